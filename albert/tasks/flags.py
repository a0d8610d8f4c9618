"""Flags every fine-tuning script shares (run_classifier.py, run_squad.py, run_race.py), and
the set-up all three build from them (`setup_from_flags`).

They reuse the engine's flags (`albert.training.flags`) with the original fine-tuning
defaults (AdamW, eval and predict batches of 8, a checkpoint every 1000 steps, every 100 in
run_race) and add the original's tokenizer and prediction flags. Names the original scripts gave some of these flags
are aliases (`ORIGINAL_ALIASES`): `--train_step` and `--warmup_step` of the engine's
`--num_train_steps` and `--num_warmup_steps` in every script, and run_squad's and run_race's
`--dropout_prob` of `--classifier_dropout_prob`, the one dropout flag of the task head.
Flags of the paper's table default to None and are filled from the task's row
(`albert.tasks.hyperparameters.fill_from_table`).
"""

from __future__ import annotations

import dataclasses
import os

from absl import flags, logging

from albert.tasks import hyperparameters
from albert.training import flags as training_flags
from albert.training.flags import FLAGS, FlagError

# The original scripts' names of flags declared here: each is the same flag under both names.
ORIGINAL_ALIASES = {
    "train_step": "num_train_steps",
    "warmup_step": "num_warmup_steps",
    "dropout_prob": "classifier_dropout_prob",
    "num_keep_checkpoint": "keep_checkpoint_max",
}


def define_finetuning_flags(
    flag_values=FLAGS, aliases=("train_step", "warmup_step"), save_checkpoints_steps=1000
):
    """Declares the flags of a fine-tuning script (see the module doc).

    Args:
        flag_values: the `absl.flags.FlagValues` to declare them in.
        aliases: the keys of `ORIGINAL_ALIASES` the script's original declares.
        save_checkpoints_steps: the script's original default.
    """
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
    training_flags.define_checkpoint_flags(
        save_checkpoints_steps=save_checkpoints_steps,
        keep_checkpoint_max=5,
        iterations_per_loop=1000,
        flag_values=flag_values,
    )
    flag_values["keep_checkpoint_max"].help += (
        " Unset, a run with --do_train and without --do_eval keeps all, as the original "
        "fine-tuning scripts, so that a later --do_eval run chooses among every checkpoint. "
        "--do_eval without --do_train by default removes, as the original's eval loop does, "
        "each evaluated checkpoint but the best and the two newest; --keep_checkpoint_max=0 "
        "on that command keeps every one."
    )
    training_flags.define_strategy_flags(flag_values)
    for define, name, default, help_text in (
        (flags.DEFINE_string, "spm_model_file", None, "SentencePiece model (30k-clean.model)."),
        (
            flags.DEFINE_string,
            "vocab_file",
            None,
            "WordPiece vocab.txt, used when there is no --spm_model_file.",
        ),
        (flags.DEFINE_bool, "do_lower_case", True, "Lower-case the text (uncased models)."),
        (flags.DEFINE_bool, "do_predict", False, "Write predictions for the test set."),
        (flags.DEFINE_integer, "predict_batch_size", 8, "Global batch of the predict pass."),
        (
            flags.DEFINE_string,
            "cached_dir",
            None,
            "Directory of the tokenized-feature cache (TFRecords); a later run with the same "
            "data, tokenizer and max_seq_length reads it instead of tokenizing again. "
            "Default: --output_dir/features.",
        ),
        (
            flags.DEFINE_string,
            "export_dir",
            None,
            "Write a SavedModel taking raw strings (in-graph tokenizer) here: GLUE, SQuAD 1.1 "
            "and 2.0, and RACE heads; SQuAD 2.0 nulls answers with the null threshold of "
            "predictions.json.",
        ),
        (
            flags.DEFINE_float,
            "albert_dropout_prob",
            None,
            "The model's dropout (hidden and attention), overriding the config's. Default: the "
            "paper's value for the task.",
        ),
        (
            flags.DEFINE_float,
            "classifier_dropout_prob",
            0.1,
            "Dropout on the pooled output before the task head.",
        ),
        (
            flags.DEFINE_string,
            "albert_hub_module_handle",
            None,
            "A downloaded TF-Hub ALBERT module directory (variables/, assets/30k-clean.model, "
            "tfhub_module.pb): its weights are the initial checkpoint, its SentencePiece model "
            "the --spm_model_file and its albert_config.json, if any, the config. URLs are not "
            "fetched (tfhub.dev is gone): download the module and pass its folder.",
        ),
    ):
        define(name, default, help_text, flag_values=flag_values)
    for field in dataclasses.fields(hyperparameters.Hyperparameters):
        flag = flag_values[field.name]
        if "paper" not in flag.help:  # --albert_dropout_prob says so already
            flag.help += (
                " Default: the paper's value for the task (logged), where the original "
                "scripts have one fixed default."
            )
    for alias in aliases:
        flags.DEFINE_alias(alias, ORIGINAL_ALIASES[alias], flag_values=flag_values)


@dataclasses.dataclass(frozen=True)
class FineTuningSetup:
    """What a fine-tuning script builds from its flags before its task (`setup_from_flags`).

    Attributes:
        task_key: the task's row of the paper's table (`albert.tasks.hyperparameters`).
        tokenizer: the `albert.tokenization.FullTokenizer` of the vocabulary flags.
        config: the model's `AlbertConfig`, with --albert_dropout_prob applied.
        options: the run's `albert.training.loop.RunOptions`.
        strategy: the `tf.distribute.Strategy` of the strategy flags.
    """

    task_key: str
    tokenizer: object
    config: object
    options: object
    strategy: object


def setup_from_flags(flag_values, task_key_from_flags, check_filled_flags=None):
    """The start every fine-tuning script shares, in this order:

    1. `check_finetuning_flags` (--output_dir, something to do, a vocabulary, a TF-Hub
       module's paths);
    2. `task_key_from_flags(flag_values)`: the task's checks of its flags as given, returning
       its row of the paper's table (it may depend on paths a TF-Hub module set in 1);
    3. every flag of that row left unset takes the row's value (`fill_from_table`);
    4. `check_filled_flags(flag_values)`: the task's checks that need those values;
    5. the tokenizer, the config and their vocabulary check, the run options, and last the
       strategy (MultiWorkerMirroredStrategy must exist before any other TensorFlow op runs).

    Args:
        flag_values: the script's parsed flags (defaults are written into them).
        task_key_from_flags: callable(flag_values) -> a key of `PAPER_HYPERPARAMETERS`.
        check_filled_flags: callable(flag_values), or None.

    Returns:
        A `FineTuningSetup`.

    Raises:
        FlagError, TokenizerError, ...: user errors, each one sentence naming the flag.
    """
    check_finetuning_flags(flag_values)
    task_key = task_key_from_flags(flag_values)
    hyperparameters.fill_from_table(flag_values, task_key)
    if check_filled_flags is not None:
        check_filled_flags(flag_values)
    tokenizer = tokenizer_from_flags(flag_values)
    config = config_from_flags(flag_values)
    check_vocabulary(tokenizer, config)
    options = training_flags.run_options_from_flags(
        flag_values, keep_checkpoint_max=kept_checkpoints(flag_values)
    )
    strategy, _, _ = training_flags.strategy_from_flags(flag_values)
    return FineTuningSetup(task_key, tokenizer, config, options, strategy)


def kept_checkpoints(flag_values):
    """--keep_checkpoint_max, or 0 (keep all) for a run that trains without --do_eval and
    does not set it: the original fine-tuning scripts keep every checkpoint (their RunConfig
    ignores the flag), and run_glue.sh's later --do_eval run picks the best of all of them;
    keeping only the newest 5 left the earlier ones out of that choice."""
    if flag_values.do_eval or not flag_values.do_train:
        return flag_values.keep_checkpoint_max
    if flag_values["keep_checkpoint_max"].present:
        return flag_values.keep_checkpoint_max
    return 0


def tokenizer_from_flags(flag_values):
    """The `FullTokenizer` of --spm_model_file (or --vocab_file) and --do_lower_case.

    Raises:
        albert.tokenization.TokenizerError: neither file is given, or it cannot be read.
    """
    from albert.tokenization import FullTokenizer, casing_mismatch

    tokenizer = FullTokenizer(
        vocab_file=flag_values.vocab_file,
        do_lower_case=flag_values.do_lower_case,
        spm_model_file=flag_values.spm_model_file,
    )
    mismatch = casing_mismatch(tokenizer)
    if mismatch:
        logging.warning(mismatch)
    return tokenizer


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
    if config is None and flag_values.init_checkpoint:
        raise FlagError(
            "--albert_config_file is required: no config is stored with --init_checkpoint="
            f"{flag_values.init_checkpoint}."
        )
    if config is None:
        raise FlagError(
            "--albert_config_file is required (or an --init_checkpoint stored with its config: "
            "an HF directory, or a checkpoint with albert_config.json beside it)."
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
    training_flags.require_something_to_do(flag_values)
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
