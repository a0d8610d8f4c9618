"""Flags every fine-tuning script shares (run_classifier.py, run_squad.py, run_race.py).

They reuse the engine's flags (`albert.training.flags`) with the original fine-tuning
defaults (AdamW, eval and predict batches of 8, a checkpoint every 1000 steps) and add the
original's tokenizer and prediction flags. The original names `--train_step` and
`--warmup_step` are aliases of the engine's `--num_train_steps` and `--num_warmup_steps`.
Flags of the paper's table default to None and are filled from the task's row
(`albert.tasks.hyperparameters.fill_from_table`).
"""

from __future__ import annotations

import os

from absl import flags, logging

from albert.training import flags as training_flags
from albert.training.flags import FLAGS, FlagError


def define_finetuning_flags(flag_values=FLAGS):
    """Declares the flags of a fine-tuning script (see the module doc)."""
    training_flags.define_run_flags(
        train_batch_size=None, eval_batch_size=8, max_seq_length=None, flag_values=flag_values
    )
    training_flags.define_optimization_flags(
        optimizer="adamw",
        learning_rate=None,
        num_train_steps=None,
        num_warmup_steps=None,
        flag_values=flag_values,
    )
    flags.DEFINE_alias("train_step", "num_train_steps", flag_values=flag_values)
    flags.DEFINE_alias("warmup_step", "num_warmup_steps", flag_values=flag_values)
    training_flags.define_checkpoint_flags(
        save_checkpoints_steps=1000,
        keep_checkpoint_max=5,
        iterations_per_loop=1000,
        flag_values=flag_values,
    )
    training_flags.define_strategy_flags(flag_values)
    for define, name, default, help_text in (
        (flags.DEFINE_string, "spm_model_file", None, "SentencePiece model (30k-clean.model)."),
        (flags.DEFINE_string, "vocab_file", None,
         "WordPiece vocab.txt, used when there is no --spm_model_file."),
        (flags.DEFINE_bool, "do_lower_case", True, "Lower-case the text (uncased models)."),
        (flags.DEFINE_bool, "do_predict", False, "Write predictions for the test set."),
        (flags.DEFINE_integer, "predict_batch_size", 8, "Global batch of the predict pass."),
        (flags.DEFINE_string, "cached_dir", None,
         "Directory of the tokenized-feature cache (TFRecords); a later run with the same "
         "data, tokenizer and max_seq_length reads it instead of tokenizing again."),
        (flags.DEFINE_string, "export_dir", None,
         "Write a SavedModel taking raw strings (in-graph tokenizer) here."),
        (flags.DEFINE_float, "albert_dropout_prob", None,
         "The model's dropout (hidden and attention), overriding the config's. Default: the "
         "paper's value for the task."),
        (flags.DEFINE_float, "classifier_dropout_prob", 0.1,
         "Dropout on the pooled output before the task head."),
        (flags.DEFINE_string, "albert_hub_module_handle", None,
         "A downloaded TF-Hub ALBERT module directory (variables/, assets/30k-clean.model, "
         "tfhub_module.pb): its weights are the initial checkpoint, its SentencePiece model "
         "the --spm_model_file and its albert_config.json, if any, the config. URLs are not "
         "fetched (tfhub.dev is gone): download the module and pass its folder."),
    ):  # fmt: skip
        define(name, default, help_text, flag_values=flag_values)


def tokenizer_from_flags(flag_values):
    """The `FullTokenizer` of --spm_model_file (or --vocab_file) and --do_lower_case.

    Raises:
        albert.tokenization.TokenizerError: neither file is given, or it cannot be read.
    """
    from albert.tokenization import FullTokenizer

    return FullTokenizer(
        vocab_file=flag_values.vocab_file,
        do_lower_case=flag_values.do_lower_case,
        spm_model_file=flag_values.spm_model_file,
    )


def config_from_flags(flag_values):
    """The model's `AlbertConfig`, with --albert_dropout_prob applied.

    Read from --albert_config_file, or else from the config stored with --init_checkpoint
    (an HF directory's config.json, an albert_config.json beside a checkpoint).

    Raises:
        FlagError: no config to be found, or --max_seq_length beyond its position embeddings.
    """
    from albert.config import AlbertConfig

    config = None
    if flag_values.albert_config_file:
        config = AlbertConfig.from_json_file(flag_values.albert_config_file)
    elif flag_values.init_checkpoint:
        from albert.checkpoints import read_config

        config = read_config(flag_values.init_checkpoint)
        if config is not None:
            logging.info("Using the config stored with %s.", flag_values.init_checkpoint)
    if config is None:
        raise FlagError(
            "--albert_config_file is required (no config is stored with --init_checkpoint)."
        )
    if flag_values.albert_dropout_prob is not None:
        dropout = flag_values.albert_dropout_prob
        config = config.replace(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    if flag_values.max_seq_length > config.max_position_embeddings:
        raise FlagError(
            f"--max_seq_length={flag_values.max_seq_length} exceeds the config's "
            f"max_position_embeddings={config.max_position_embeddings}."
        )
    return config


def check_vocabulary(tokenizer, config):
    """Raises FlagError when the tokenizer yields ids beyond the config's `vocab_size`.

    Such ids make the embedding lookup fail mid-run on CPU (and read zeros silently on GPU).

    Args:
        tokenizer: an `albert.tokenization.FullTokenizer`.
        config: the model's `AlbertConfig`.
    """
    size = max(tokenizer.vocab.values(), default=-1) + 1
    if size > config.vocab_size:
        source = tokenizer.spm_model_file or tokenizer.vocab_file
        raise FlagError(
            f"{source} has {size} pieces but the config's vocab_size is {config.vocab_size}; "
            "pass the albert_config.json that goes with this vocabulary."
        )


def check_finetuning_flags(flag_values):
    """The checks every fine-tuning script shares (before anything heavy runs).

    Raises:
        FlagError: a required flag is missing or a batch size is not positive.
    """
    training_flags.require(flag_values, "output_dir")
    apply_hub_module(flag_values)
    if not (flag_values.do_train or flag_values.do_eval or flag_values.do_predict):
        raise FlagError("Pass --do_train, --do_eval and/or --do_predict; there is nothing to do.")
    if not (flag_values.spm_model_file or flag_values.vocab_file):
        raise FlagError("--spm_model_file (or --vocab_file for WordPiece models) is required.")
    if flag_values.do_predict and flag_values.predict_batch_size <= 0:
        raise FlagError(
            f"--predict_batch_size must be positive. Received: {flag_values.predict_batch_size}"
        )


HUB_SPM_MODEL = "assets/30k-clean.model"
HUB_VARIABLES = "variables/variables"


def apply_hub_module(flag_values):
    """Reads --albert_hub_module_handle into --init_checkpoint, --spm_model_file and the config.

    A TF1-format TF-Hub ALBERT module holds `variables/variables.{index,data-*}` (names under
    `module/`, which the TF1 reader strips), `assets/30k-clean.model` and `tfhub_module.pb`.
    Flags given on the command line win over the module's SentencePiece model and config.

    Raises:
        FlagError: the handle is a URL, is not a module directory, or comes with
            --init_checkpoint.
    """
    import tensorflow as tf

    handle = flag_values.albert_hub_module_handle
    if not handle:
        return
    if handle.startswith(("http://", "https://")):
        raise FlagError(
            f"--albert_hub_module_handle={handle} is a URL, which is not fetched (tfhub.dev is "
            "gone): download the module, unpack it and pass its folder."
        )
    if flag_values.init_checkpoint:
        raise FlagError(
            "Pass --albert_hub_module_handle or --init_checkpoint, not both: the module's "
            "variables are the initial checkpoint."
        )
    variables = os.path.join(handle, HUB_VARIABLES)
    if not tf.io.gfile.exists(variables + ".index"):
        raise FlagError(
            f"--albert_hub_module_handle={handle} is not a TF-Hub module directory (no "
            f"{HUB_VARIABLES}.index in it)."
        )
    flag_values.init_checkpoint = variables
    spm_model = os.path.join(handle, HUB_SPM_MODEL)
    if not (flag_values.spm_model_file or flag_values.vocab_file):
        if not tf.io.gfile.exists(spm_model):
            raise FlagError(
                f"--albert_hub_module_handle={handle} holds no {HUB_SPM_MODEL}; pass "
                "--spm_model_file."
            )
        flag_values.spm_model_file = spm_model
    if not flag_values.albert_config_file:
        for name in ("assets/albert_config.json", "albert_config.json"):
            if tf.io.gfile.exists(os.path.join(handle, name)):
                flag_values.albert_config_file = os.path.join(handle, name)
                break
    logging.info(
        "TF-Hub module %s: --init_checkpoint=%s --spm_model_file=%s --albert_config_file=%s.",
        handle,
        flag_values.init_checkpoint,
        flag_values.spm_model_file,
        flag_values.albert_config_file,
    )


def feature_file_directory(flag_values, names):
    """The directory of the first original feature-file flag among `names` that is set.

    The original writes its tokenized features to files named by flags (run_squad's
    `--train_feature_file`, `--predict_feature_file`, pickled `--predict_feature_left_file`;
    run_race's `--train_file`, `--eval_file`, `--predict_file`). Here every feature set is a
    TFRecord file plus metadata in a cache directory, named by a hash of the data, the
    tokenizer and the settings (so a stale or foreign file is never read, and nothing is
    pickled): such a flag selects that directory. --cached_dir wins when given.

    Args:
        flag_values: parsed flags.
        names: flag names, in order of preference.

    Returns:
        The directory ("." for a bare file name), or None when none of the flags is set.
    """
    given = [name for name in names if getattr(flag_values, name)]
    if not given:
        return None
    directory = os.path.dirname(getattr(flag_values, given[0])) or "."
    if flag_values.cached_dir:
        logging.warning(
            "--%s is ignored: the features are cached under --cached_dir=%s.",
            given[0],
            flag_values.cached_dir,
        )
        return flag_values.cached_dir
    logging.warning(
        "--%s=%s: the features are cached as TFRecords in %s under names that encode the data "
        "and settings (files the original wrote there are not read; nothing is pickled).",
        given[0],
        getattr(flag_values, given[0]),
        directory,
    )
    return directory
