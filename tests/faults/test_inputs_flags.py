"""Numeric flags out of range: one-line FlagErrors naming the flag, before anything runs."""

import pytest
from absl import flags

from albert.tasks import classification, race, squad
from albert.training import flags as training_flags
from albert.training.flags import FlagError


def _parsed(define, *args):
    flag_values = flags.FlagValues()
    define(flag_values)
    flag_values(["prog", *args])
    return flag_values


@pytest.mark.parametrize(
    "arg, message",
    [
        (
            "--learning_rate=-1",
            "--learning_rate must be zero or more. Received: --learning_rate=-1.0",
        ),
        (
            "--learning_rate=nan",
            "--learning_rate must be zero or more. Received: --learning_rate=nan",
        ),
        ("--learning_rate=inf", "--learning_rate must be finite. Received: --learning_rate=inf"),
        ("--keep_checkpoint_max=-1", "--keep_checkpoint_max must be zero or more"),
        ("--save_checkpoints_steps=0", "--save_checkpoints_steps must be positive"),
        ("--train_batch_size=0", "--train_batch_size must be positive"),
        ("--eval_batch_size=-8", "--eval_batch_size must be positive"),
        ("--predict_batch_size=0", "--predict_batch_size must be positive"),
        ("--max_seq_length=0", "--max_seq_length must be positive"),
        ("--poly_power=-1", "--poly_power must be zero or more"),  # 0: a constant rate
        ("--warmup_step=-1", "--num_warmup_steps must be zero or more"),
        ("--albert_dropout_prob=1", r"--albert_dropout_prob must be in \[0, 1\)"),
        ("--classifier_dropout_prob=-0.1", r"--classifier_dropout_prob must be in \[0, 1\)"),
    ],
)
def test_finetuning_flag_ranges(arg, message):
    flag_values = _parsed(classification.define_classifier_flags, arg)
    with pytest.raises(FlagError, match=message):
        training_flags.check_ranges(flag_values)


def test_unset_flags_and_defaults_pass():
    # Table-filled flags are None until the task's row fills them: not an error.
    training_flags.check_ranges(_parsed(classification.define_classifier_flags))
    pretraining = _parsed(training_flags.define_pretraining_flags)
    training_flags.check_ranges(pretraining)


@pytest.mark.parametrize(
    "arg, name",
    [
        ("--max_predictions_per_seq=0", "max_predictions_per_seq"),
        ("--max_eval_steps=0", "max_eval_steps"),
        ("--num_train_steps=0", "num_train_steps"),
        ("--iterations_per_loop=0", "iterations_per_loop"),
        ("--gradient_accumulation_steps=0", "gradient_accumulation_steps"),
    ],
)
def test_pretraining_flag_ranges(arg, name):
    flag_values = _parsed(training_flags.define_pretraining_flags, arg)
    with pytest.raises(FlagError, match=f"^--{name} must be positive. Received: --{name}=0$"):
        training_flags.check_ranges(flag_values)


def test_run_options_checks_ranges_first():
    flag_values = _parsed(
        training_flags.define_pretraining_flags, "--do_train", "--keep_checkpoint_max=-1"
    )
    with pytest.raises(FlagError, match="--keep_checkpoint_max must be zero or more"):
        training_flags.run_options_from_flags(flag_values)


SQUAD_BASE = (
    "--max_seq_length=64",
    "--max_query_length=16",
    "--do_predict",
    "--predict_file=unused.json",
)


@pytest.mark.parametrize(
    "arg, message",
    [
        ("--doc_stride=0", "--doc_stride must be positive"),
        ("--n_best_size=0", "--n_best_size must be positive"),
        ("--max_answer_length=0", "--max_answer_length must be positive"),
        ("--max_query_length=0", "--max_query_length must be positive"),
        ("--start_n_top=0", "--start_n_top must be positive"),
    ],
)
def test_squad_flag_ranges(arg, message):
    flag_values = _parsed(squad.define_squad_flags, *SQUAD_BASE, arg)
    with pytest.raises(ValueError, match=message):  # FlagError or SquadDataError
        squad.check_squad_flags(flag_values)


def test_squad_query_longer_than_the_sequence():
    flag_values = _parsed(squad.define_squad_flags, *SQUAD_BASE, "--max_query_length=61")
    with pytest.raises(ValueError, match="--max_seq_length=64 leaves no room for the context"):
        squad.check_squad_flags(flag_values)


def test_race_qa_length_range():
    flag_values = _parsed(race.define_race_flags, "--max_seq_length=64", "--max_qa_length=62")
    with pytest.raises(FlagError, match=r"--max_qa_length=62 must be in \[1, 61\]"):
        race.check_race_flags(flag_values)


def test_zero_learning_rate_is_allowed_with_a_warning(caplog):
    # A zero rate keeps the weights as loaded (the init-checkpoint tests rely on it).
    flag_values = _parsed(classification.define_classifier_flags, "--learning_rate=0")
    training_flags.check_ranges(flag_values)
    assert "--learning_rate=0: training will not change the weights." in caplog.text


def test_pretraining_poly_power_must_be_finite():
    flag_values = _parsed(training_flags.define_pretraining_flags, "--poly_power=inf")
    with pytest.raises(
        FlagError, match="^--poly_power must be finite. Received: --poly_power=inf$"
    ):
        training_flags.check_ranges(flag_values)


@pytest.mark.parametrize(
    "define, args, warned",
    [
        # Pretraining's default warmup (3125) with a short run.
        (training_flags.define_pretraining_flags, ["--num_train_steps=1000"], "=3125 is"),
        (
            training_flags.define_pretraining_flags,
            ["--num_train_steps=1000", "--num_warmup_steps=600", "--start_warmup_step=500"],
            "=600 (after --start_warmup_step=500) is",
        ),
        (classification.define_classifier_flags, ["--train_step=8", "--warmup_step=10"], "=10 is"),
        # The last step's rate is 9/10 of the peak: still rising.
        (classification.define_classifier_flags, ["--train_step=10", "--warmup_step=10"], "=10 is"),
    ],
    ids=["pretraining_default", "start_warmup_step", "finetuning_given", "finetuning_equal"],
)
def test_warmup_beyond_training_is_warned(caplog, define, args, warned):
    # The original trains so too (the rate never peaks), so a warning, not an error.
    training_flags.check_ranges(_parsed(define, *args))
    assert f"--num_warmup_steps{warned} not below --num_train_steps=" in caplog.text
    assert "never reaches --learning_rate" in caplog.text


def test_warmup_within_training_or_from_the_table_is_not_warned(caplog):
    training_flags.check_ranges(_parsed(training_flags.define_pretraining_flags))
    flag_values = _parsed(classification.define_classifier_flags, "--train_step=7")
    flag_values.num_warmup_steps = 320  # as the paper's table fills it (warned there)
    training_flags.check_ranges(flag_values)
    flag_values = _parsed(classification.define_classifier_flags, "--train_step=8")
    training_flags.check_ranges(flag_values)  # no warmup at all
    assert "never reaches" not in caplog.text


@pytest.mark.parametrize("steps, warmup", [(12, 2), (600, 100), (6000, 100)])
def test_the_quickstart_warmup_fits_its_steps(steps, warmup):
    # The quickstart's smoke run (--num_train_steps=12) warmed up for 100 steps: the rate never
    # peaked, and run_pretraining warned about a flag the quickstart does not take.
    from albert.quickstart import Recipe, pretraining_command

    command = pretraining_command("c", "t", "h", "m", Recipe(num_train_steps=steps))
    assert f"--num_warmup_steps={warmup}" in command


def test_the_quickstart_refuses_a_remote_output_dir(tmp_path, monkeypatch, capsys):
    # os.path.abspath("gs://b/q") is "<cwd>/gs:/b/q": the quickstart made a local "gs:" folder
    # and ran every step there instead of saying it only works on local folders.
    from absl import flags

    from albert import quickstart

    monkeypatch.chdir(tmp_path)
    flags.FLAGS(["quickstart", "--output_dir=gs://bucket/quickstart"])
    try:
        with pytest.raises(SystemExit) as exit_info:
            quickstart.main([])
    finally:
        flags.FLAGS.unparse_flags()
    # Exit 2 with one line, as every entry point's usage error (sys.exit(text) gave 1).
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 2 and stderr.count("\n") == 1
    assert stderr.startswith("quickstart: error: --output_dir must be a local folder")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, steps",
    [
        ([], training_flags.OFF_TPU_STEPS_PER_CALL),  # the default 1000 is a TPU setting
        (["--iterations_per_loop=500"], 500),  # given: as given
        (["--use_tpu"], 1000),
    ],
)
def test_steps_per_host_call(args, steps):
    flag_values = _parsed(training_flags.define_pretraining_flags, *args)
    assert training_flags.steps_per_host_call(flag_values) == steps


@pytest.mark.parametrize(
    "args, defaulted",
    [
        ([], ("eval_batch_size", "predict_batch_size")),
        (["--eval_batch_size=16"], ("predict_batch_size",)),
    ],
)
def test_batch_flags_left_at_their_defaults_are_the_ones_fitted(args, defaulted):
    # Those fit the replica count (rounded up); a batch given must divide evenly.
    flag_values = _parsed(
        classification.define_classifier_flags, "--do_train", "--output_dir=out", *args
    )
    options = training_flags.run_options_from_flags(flag_values)
    assert options.defaulted_batch_flags == defaulted


def test_a_required_flag_given_empty_is_missing():
    # `--output_dir=$OUT` with $OUT unset.
    flag_values = _parsed(classification.define_classifier_flags, "--output_dir=")
    with pytest.raises(FlagError, match=r"^--output_dir is required\.$"):
        training_flags.require(flag_values, "output_dir")
