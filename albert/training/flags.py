"""Flags shared by run_pretraining.py and the fine-tuning scripts, declared once.

A script calls the `define_*` functions it needs, passing its own defaults (the original's
defaults for that script), then builds everything through the `*_from_flags` helpers:

    define_pretraining_flags()
    def main(_):
        strategy = strategy_from_flags(FLAGS)
        ...
    run_main(main)
"""

from __future__ import annotations

import logging as std_logging
import math
import os
import sys
import warnings

from absl import app, flags, logging

from albert.errors import AlbertError

FLAGS = flags.FLAGS
# Kept in step with albert.training.strategy / optimization (not imported here: TensorFlow).
STRATEGIES = ("tpu", "mirrored", "multi_worker", "default")
PRECISIONS = ("none", "bfloat16", "float16")
OPTIMIZERS = ("lamb", "adamw")


class FlagError(AlbertError):
    """A missing or inconsistent command-line flag."""


def define_strategy_flags(flag_values=FLAGS):
    """Where to run: strategy, TPU location (the original's flags), precision, XLA."""
    define = _definer(flag_values)
    define(
        flags.DEFINE_enum,
        "strategy",
        None,
        "tf.distribute strategy. Default: tpu when a "
        "TPU flag is set, multi_worker when TF_CONFIG names several tasks, mirrored with "
        "several GPUs, else default (one device).",
        enum_values=list(STRATEGIES),
    )
    define(flags.DEFINE_bool, "use_tpu", False, "Run on a TPU (same as --strategy=tpu).")
    define(flags.DEFINE_string, "tpu_name", None, "Cloud TPU name or grpc:// address; implies tpu.")
    define(flags.DEFINE_string, "tpu_zone", None, "GCE zone of the Cloud TPU.")
    define(flags.DEFINE_string, "gcp_project", None, "GCP project of the Cloud TPU.")
    define(
        flags.DEFINE_string, "master", None, "TensorFlow master address of the TPU; implies tpu."
    )
    define(
        flags.DEFINE_integer,
        "num_tpu_cores",
        8,
        "TPU cores (kept for compatibility; the "
        "strategy uses every core of the TPU it connects to).",
    )
    define(
        flags.DEFINE_enum,
        "mixed_precision",
        "auto",
        "Compute dtype; variables stay float32. float16 adds dynamic loss scaling. auto: "
        "bfloat16 on TPU, GPU and CPUs with bfloat16 units, else none (albert.training.hardware).",
        enum_values=["auto", *PRECISIONS],
    )
    jit_compile = _auto_bool_flag(
        "jit_compile",
        "Compile the training step with XLA: true, false or auto (XLA on TPU and GPU, and on "
        "CPU unless bfloat16 runs there without it).",
    )
    flags.DEFINE_flag(jit_compile, flag_values)


class _AutoBooleanParser(flags.BooleanParser):
    """A boolean flag's parser that also takes `auto`, which stands for None (choose)."""

    def parse(self, argument):
        if isinstance(argument, str) and argument.lower() == "auto":
            return None
        return super().parse(argument)


def _auto_bool_flag(name, help_text):
    """`--name`, `--noname` or `--name=true|false|auto` (unset: auto, the value None)."""
    flag = flags.BooleanFlag(name, None, help_text)
    flag.parser = _AutoBooleanParser()
    return flag


def define_run_flags(train_batch_size, eval_batch_size, max_seq_length, flag_values=FLAGS):
    """Model, directories, what to do, batch sizes."""
    define = _definer(flag_values)
    define(flags.DEFINE_string, "albert_config_file", None, "The model's albert_config.json.")
    define(flags.DEFINE_string, "output_dir", None, "Checkpoints, summaries and results go here.")
    define(
        flags.DEFINE_string,
        "init_checkpoint",
        None,
        "Initial weights: an official TF1 "
        "checkpoint, one of ours, an HF directory or Keras weights.",
    )
    define(flags.DEFINE_bool, "do_train", False, "Train.")
    define(flags.DEFINE_bool, "do_eval", False, "Evaluate.")
    define(
        flags.DEFINE_integer,
        "train_batch_size",
        train_batch_size,
        "Global training batch (split evenly across replicas).",
    )
    define(
        flags.DEFINE_integer,
        "gradient_accumulation_steps",
        1,
        "Split each replica's training batch into this many micro-batches run one after the "
        "other, gradients summed: the same update as the whole --train_batch_size, in less "
        "memory (it must divide each replica's batch).",
    )
    define(flags.DEFINE_integer, "eval_batch_size", eval_batch_size, "Global eval batch.")
    define(
        flags.DEFINE_integer, "max_seq_length", max_seq_length, "Sequence length of the records."
    )
    define(
        flags.DEFINE_integer, "random_seed", 12345, "Seed of the initial weights and data order."
    )


def define_optimization_flags(
    optimizer, learning_rate, num_train_steps, num_warmup_steps, flag_values=FLAGS
):
    """Optimizer and learning-rate schedule."""
    define = _definer(flag_values)
    define(flags.DEFINE_enum, "optimizer", optimizer, "Optimizer.", enum_values=list(OPTIMIZERS))
    define(flags.DEFINE_float, "learning_rate", learning_rate, "Peak learning rate.")
    define(flags.DEFINE_float, "poly_power", 1.0, "Power of the polynomial decay.")
    define(flags.DEFINE_integer, "num_train_steps", num_train_steps, "Training steps.")
    define(flags.DEFINE_integer, "num_warmup_steps", num_warmup_steps, "Linear warmup steps.")
    define(flags.DEFINE_integer, "start_warmup_step", 0, "Step at which warmup starts.")


def define_checkpoint_flags(
    save_checkpoints_steps, keep_checkpoint_max, iterations_per_loop, flag_values=FLAGS
):
    """Checkpoint cadence and steps per host call."""
    define = _definer(flag_values)
    define(
        flags.DEFINE_integer,
        "save_checkpoints_steps",
        save_checkpoints_steps,
        "Steps between checkpoints.",
    )
    define(
        flags.DEFINE_integer,
        "keep_checkpoint_max",
        keep_checkpoint_max,
        "Newest checkpoints kept; 0 keeps all (the original's meaning).",
    )
    define(
        flags.DEFINE_integer,
        "iterations_per_loop",
        iterations_per_loop,
        "Steps run on the device per host call.",
    )


# Said in the help of the --do_* flags the original defaults to true (run_pretraining's
# --do_train, run_race's --do_train and --do_eval): here every one is passed explicitly.
EXPLICIT_DO = " (The original script defaults this to true; here it must be passed.)"


def define_pretraining_flags(flag_values=FLAGS):
    """Every run_pretraining.py flag, with the original's defaults."""
    define_run_flags(
        train_batch_size=4096, eval_batch_size=64, max_seq_length=512, flag_values=flag_values
    )
    define_optimization_flags(
        optimizer="lamb",
        learning_rate=0.00176,
        num_train_steps=125000,
        num_warmup_steps=3125,
        flag_values=flag_values,
    )
    define_checkpoint_flags(
        save_checkpoints_steps=5000,
        keep_checkpoint_max=5,
        iterations_per_loop=1000,
        flag_values=flag_values,
    )
    define_strategy_flags(flag_values)
    flag_values["do_train"].help += EXPLICIT_DO
    define = _definer(flag_values)
    define(flags.DEFINE_string, "input_file", None, "Pretraining TFRecords: comma-separated globs.")
    define(flags.DEFINE_string, "eval_input_file", None, "Eval TFRecords (default: --input_file).")
    define(flags.DEFINE_integer, "max_predictions_per_seq", 20, "Masked positions per sequence.")
    define(flags.DEFINE_integer, "max_eval_steps", 100, "Eval batches.")
    define(
        flags.DEFINE_bool,
        "init_from_group0",
        False,
        "Initialise every layer group from group 0 of --init_checkpoint.",
    )
    define(
        flags.DEFINE_float,
        "masked_lm_budget",
        0.0,
        "Accepted for the original's commands; no effect: its online masking (> 0) was never "
        "finished there (the reader drops the masked-LM features the model needs). Masking "
        "is done by create_pretraining_data.",
    )


def _definer(flag_values):
    """define(DEFINE_x, name, default, help, **kwargs) into `flag_values`."""

    def define(define_function, name, default, help_text, **kwargs):
        define_function(
            name=name, default=default, help=help_text, flag_values=flag_values, **kwargs
        )

    return define


def define_rows(rows, flag_values=FLAGS):
    """Defines each (DEFINE_x, name, default, help) row of a task's flag table."""
    define = _definer(flag_values)
    for row in rows:
        define(*row)


def require(flag_values, *names):
    """Raises FlagError naming the first of `names` that is not set."""
    for name in names:
        if getattr(flag_values, name) in (None, ""):
            raise FlagError(f"--{name} is required.")


# Numeric flags and the range each must be in: "positive" (> 0), "non_negative" (>= 0) or
# "probability" ([0, 1)). Only the flags a script declares are checked; None means unset.
NUMERIC_RANGES = {
    "positive": (
        "num_train_steps",
        "train_batch_size",
        "gradient_accumulation_steps",
        "eval_batch_size",
        "predict_batch_size",
        "max_seq_length",
        "save_checkpoints_steps",
        "iterations_per_loop",
        "num_tpu_cores",
        "max_predictions_per_seq",
        "max_eval_steps",
    ),
    # poly_power 0 is a constant rate after warmup (the quickstart's recipe); a learning rate
    # of 0 keeps the weights as loaded (tests use it; a warning says so), a negative one is
    # refused.
    # keep_checkpoint_max 0 keeps every checkpoint, as the original's RunConfig does.
    "non_negative": (
        "learning_rate",
        "num_warmup_steps",
        "start_warmup_step",
        "poly_power",
        "keep_checkpoint_max",
    ),
    "probability": ("albert_dropout_prob", "classifier_dropout_prob"),
}


def check_ranges(flag_values, ranges=None):
    """Raises FlagError naming the first numeric flag outside its range.

    Args:
        flag_values: parsed flags.
        ranges: {"positive" | "non_negative" | "probability": flag names}; default
            `NUMERIC_RANGES`. Flags the script does not declare, or left None, are skipped.
    """
    tests = {
        "positive": (lambda v: v > 0, "must be positive"),
        "non_negative": (lambda v: v >= 0, "must be zero or more"),
        "probability": (lambda v: 0 <= v < 1, "must be in [0, 1)"),
    }
    for kind, names in (ranges or NUMERIC_RANGES).items():
        in_range, requirement = tests[kind]
        for name in names:
            value = getattr(flag_values, name) if name in flag_values else None
            if value is not None and math.isinf(value):  # inf passes the tests below
                raise FlagError(f"--{name} must be finite. Received: --{name}={value}")
            # `not in_range` also catches NaN, for which every comparison is False.
            if value is not None and not in_range(value):
                raise FlagError(f"--{name} {requirement}. Received: --{name}={value}")
    if "learning_rate" in flag_values and flag_values.learning_rate == 0:
        logging.warning("--learning_rate=0: training will not change the weights.")
    _warn_warmup_beyond_training(flag_values)


def _warn_warmup_beyond_training(flag_values):
    """Warns when warmup lasts all of training: the rate rises to the last step and never
    reaches --learning_rate. The original trains so too (not an error), but a run of e.g.
    --num_train_steps=1000 with the pretraining default --num_warmup_steps=3125 is more
    likely a mistake than a choice. A warmup the paper's table filled in is warned about by
    `albert.tasks.hyperparameters`, with the table's advice, and is left out here."""
    names = ("num_train_steps", "num_warmup_steps")
    if not all(name in flag_values and flag_values[name].value is not None for name in names):
        return
    warmup = flag_values["num_warmup_steps"]
    if not warmup.present and warmup.default is None:  # filled from the paper's table
        return
    start = flag_values.start_warmup_step if "start_warmup_step" in flag_values else 0
    steps = flag_values.num_train_steps
    if warmup.value > 0 and start + warmup.value >= steps:
        logging.warning(
            "--num_warmup_steps=%d%s is not below --num_train_steps=%d: the learning rate "
            "rises for all of training and never reaches --learning_rate (at the last step "
            "it is %.2g of it); lower --num_warmup_steps.",
            warmup.value,
            f" (after --start_warmup_step={start})" if start else "",
            steps,
            max(0, steps - 1 - start) / warmup.value,
        )


def strategy_from_flags(flag_values):
    """(strategy, strategy name, precision) from the strategy flags; sets the dtype policy."""
    from albert.training import strategy as strategy_lib

    name = strategy_lib.resolve_strategy_name(
        flag_values.strategy, flag_values.use_tpu, flag_values.tpu_name, flag_values.master
    )
    # Before connecting to a TPU or a cluster: a precision the device cannot run fails at once.
    choice = hardware_choice_from_flags(flag_values, name)
    strategy = strategy_lib.create_strategy(
        name,
        tpu_name=flag_values.tpu_name,
        tpu_zone=flag_values.tpu_zone,
        gcp_project=flag_values.gcp_project,
        master=flag_values.master,
    )
    precision = strategy_lib.set_precision(choice.precision, name)
    if name == "tpu" and strategy.num_replicas_in_sync != flag_values.num_tpu_cores:
        logging.warning(
            "--num_tpu_cores=%d ignored: the TPU has %d cores.",
            flag_values.num_tpu_cores,
            strategy.num_replicas_in_sync,
        )
    logging.info(
        "Strategy %s with %d replica(s), %s.",
        name,
        strategy.num_replicas_in_sync,
        choice.describe(),
    )
    return strategy, name, precision


def hardware_choice_from_flags(flag_values, strategy_name=None):
    """`--mixed_precision` and `--jit_compile` with `auto` resolved for this machine: a
    `albert.training.hardware.Choice`."""
    from albert.training import hardware
    from albert.training import strategy as strategy_lib

    if strategy_name is None:
        strategy_name = strategy_lib.resolve_strategy_name(
            flag_values.strategy, flag_values.use_tpu, flag_values.tpu_name, flag_values.master
        )
    device = hardware.describe_machine(strategy_name)
    return hardware.choose(device, flag_values.mixed_precision, flag_values.jit_compile)


def optimizer_fn_from_flags(flag_values):
    """`optimizer_fn(global_step) -> (optimizer, schedule)` for `albert.training.loop.run`."""
    from albert.training.optimization import create_optimizer

    def optimizer_fn(global_step):
        return create_optimizer(
            flag_values.optimizer,
            flag_values.learning_rate,
            num_train_steps=flag_values.num_train_steps,
            num_warmup_steps=flag_values.num_warmup_steps,
            start_warmup_step=flag_values.start_warmup_step,
            poly_power=flag_values.poly_power,
            global_step=global_step,
            aggregate_gradients=False,
        )

    return optimizer_fn


def require_something_to_do(flag_values):
    """Raises FlagError unless a `--do_*` flag (or, fine-tuning, `--export_dir`) is set."""
    # Fine-tuning scripts also declare --do_predict and --export_dir (see albert.tasks.flags);
    # --export_dir alone exports the run's weights, as the original run_squad_v1 does.
    names = ["do_train", "do_eval", "do_predict", "export_dir"]
    names = [name for name in names if name in flag_values]
    if not any(getattr(flag_values, name) for name in names):
        listed = ", ".join(f"--{name}" for name in names[:-1])
        raise FlagError(f"Pass {listed} and/or --{names[-1]}; there is nothing to do.")


# Off TPU, the original's Estimator logs the loss and writes summaries every 100 steps
# (`log_step_count_steps`, `save_summary_steps`); its --iterations_per_loop=1000 is a TPU
# setting. Here a host call logs and writes once, so off TPU it runs at most this many steps
# unless --iterations_per_loop is given.
OFF_TPU_STEPS_PER_CALL = 100


def steps_per_host_call(flag_values):
    """`--iterations_per_loop`, or, left at its default off TPU, at most
    `OFF_TPU_STEPS_PER_CALL`: a GPU run of a large model would otherwise log (and add a
    TensorBoard point) once per 1000 steps, minutes apart."""
    from albert.training import strategy as strategy_lib

    steps = flag_values.iterations_per_loop
    if flag_values["iterations_per_loop"].present or steps <= OFF_TPU_STEPS_PER_CALL:
        return steps
    name = strategy_lib.resolve_strategy_name(
        flag_values.strategy, flag_values.use_tpu, flag_values.tpu_name, flag_values.master
    )
    if name == "tpu":
        return steps
    if flag_values.do_train:  # training's cadence: nothing to say to an eval or predict run
        logging.info(
            "Host calls of at most %d steps (a log line and summaries each), as the original's "
            "Estimator logs off TPU; --iterations_per_loop=%d applies on TPU or when given.",
            OFF_TPU_STEPS_PER_CALL,
            steps,
        )
    return OFF_TPU_STEPS_PER_CALL


def run_options_from_flags(flag_values, **overrides):
    """`RunOptions` from the shared flags (plus job-specific `overrides`)."""
    from albert.training.loop import RunOptions

    require_something_to_do(flag_values)
    check_ranges(flag_values)
    values = dict(
        output_dir=flag_values.output_dir,
        num_train_steps=flag_values.num_train_steps,
        train_batch_size=flag_values.train_batch_size,
        eval_batch_size=flag_values.eval_batch_size,
        do_train=flag_values.do_train,
        do_eval=flag_values.do_eval,
        save_checkpoints_steps=flag_values.save_checkpoints_steps,
        keep_checkpoint_max=flag_values.keep_checkpoint_max,
        iterations_per_loop=steps_per_host_call(flag_values),
        init_checkpoint=flag_values.init_checkpoint,
        seed=flag_values.random_seed,
        jit_compile=hardware_choice_from_flags(flag_values).jit_compile,
        gradient_accumulation_steps=flag_values.gradient_accumulation_steps,
        # Left at their defaults, these fit the replica count (albert.training.loop).
        defaulted_batch_flags=tuple(
            name
            for name in ("eval_batch_size", "predict_batch_size")
            if name in flag_values and not flag_values[name].present
        ),
    )
    values.update(overrides)
    return RunOptions(**values)


class _ProjectInfoOnly(std_logging.Filter):
    """Lets INFO records through only from this project (TensorFlow logs through absl too)."""

    def filter(self, record):
        return record.levelno >= std_logging.WARNING or f"{os.sep}albert{os.sep}" in record.pathname


def quiet_python_logs():
    """Keeps TensorFlow's and Keras's Python-side noise off the console; our INFO stays."""
    import tensorflow as tf

    tf.get_logger().setLevel(std_logging.ERROR)
    tf.autograph.set_verbosity(0)
    warnings.filterwarnings("ignore", category=UserWarning, module="keras")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    logging.set_verbosity(max(logging.get_verbosity(), logging.INFO))  # --verbosity=1 stays
    logging.get_absl_logger().addFilter(_ProjectInfoOnly())


def run_main(main):
    """`absl.app.run(main)`, printing user errors and environmental failures as one line.

    A project error (`albert.errors.AlbertError`), a corrupted record or checkpoint, a full
    disk, a read-only output folder or token ids beyond the config's vocabulary print
    `prog: error: <one sentence>` and exit with status 2 (`albert.training.failures`);
    `--verbosity=1` (or higher) or `ALBERT_TRACEBACK=1` shows the traceback instead. Any other
    exception is a bug and keeps its traceback.
    """
    from albert.training.failures import describe_failure, traceback_requested

    # absl's --help shows the __main__ module's docstring. A module of this package run with
    # `python -m` has its own; a clone's thin wrapper script or a console-script stub has none
    # worth showing, so they show the entry module's (its usage example).
    main_module = sys.modules.get("__main__")
    main_file = os.path.abspath(getattr(main_module, "__file__", None) or "")
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    entry_doc = getattr(sys.modules.get(main.__module__), "__doc__", None)
    if entry_doc and main_module is not None and not main_file.startswith(package_dir + os.sep):
        main_module.__doc__ = entry_doc
    program = os.path.basename(sys.argv[0])

    def guarded(argv):
        verbosity = FLAGS.verbosity if "verbosity" in FLAGS else None
        quiet_python_logs()
        try:
            return main(argv)
        except Exception as e:
            message = describe_failure(e)
            if message is None or traceback_requested(verbosity):
                raise
            print(f"{program}: error: {message}", file=sys.stderr)
            sys.exit(2)

    app.run(guarded)
