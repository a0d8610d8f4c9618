"""Flags every fine-tuning script shares (run_classifier.py, run_squad.py, run_race.py).

They reuse the engine's flags (`albert.training.flags`) with the original fine-tuning
defaults (AdamW, eval and predict batches of 8, a checkpoint every 1000 steps) and add the
original's tokenizer and prediction flags. The original names `--train_step` and
`--warmup_step` are aliases of the engine's `--num_train_steps` and `--num_warmup_steps`.
Flags of the paper's table default to None and are filled from the task's row
(`albert.tasks.hyperparameters.fill_from_table`).
"""

from __future__ import annotations

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
    if not (flag_values.do_train or flag_values.do_eval or flag_values.do_predict):
        raise FlagError("Pass --do_train, --do_eval and/or --do_predict; there is nothing to do.")
    if not (flag_values.spm_model_file or flag_values.vocab_file):
        raise FlagError("--spm_model_file (or --vocab_file for WordPiece models) is required.")
    if flag_values.do_predict and flag_values.predict_batch_size <= 0:
        raise FlagError(
            f"--predict_batch_size must be positive. Received: {flag_values.predict_batch_size}"
        )
