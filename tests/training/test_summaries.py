"""What the training loop writes to TensorBoard: each scalar at its step, with its value."""

import math
import random
import sys
import time
import types

import keras
import pytest
import tensorflow as tf
from toy_tasks import LinearInputTask

from albert.training import checkpointing, loop, summaries
from albert.training.optimization import create_optimizer
from albert.training.summaries import ProgressLogger, ScalarWriter


def _scalars(directory):
    """{tag: {step: value}} over the event files directly under `directory`."""
    values = {}
    for path in sorted(tf.io.gfile.glob(f"{directory}/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalar = float(tf.make_ndarray(value.tensor))
                values.setdefault(value.tag, {})[event.step] = scalar
    return values


def _train(task, output_dir, num_train_steps, iterations_per_loop, save_checkpoints_steps=None):
    options = loop.RunOptions(
        output_dir=str(output_dir),
        num_train_steps=num_train_steps,
        train_batch_size=1,
        save_checkpoints_steps=save_checkpoints_steps or num_train_steps,
        iterations_per_loop=iterations_per_loop,
        clip_norm=None,
    )

    def optimizer_fn(global_step):
        return create_optimizer("adamw", 0.0, num_train_steps, global_step=global_step)

    loop.run(task, tf.distribute.get_strategy(), options, optimizer_fn)
    return _scalars(output_dir)


@pytest.fixture
def float16_policy():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.slow  # traces the float16 step (~2 s)
def test_gradient_norm_leaves_out_the_steps_the_loss_scaler_skipped(tmp_path, float16_policy):
    # The loss scale starts at 2**15 and halves at each skipped step. x = 1 fits float16
    # (65504) once scaled; x = 4 overflows at 2**15 and x = 64 at 2**14 and 2**13.
    # ||x|| = sqrt(2) for x = [1, 1].
    inputs = [[1.0, 1.0], [4.0, 4.0], [1.0, 1.0], [64.0, 64.0], [64.0, 64.0]]
    scalars = _train(LinearInputTask(inputs), tmp_path / "run", 5, 3)
    # Steps 1-3: two applied, one skipped; steps 4-5: both skipped, so no norm to show.
    assert scalars["gradient_norm"] == pytest.approx({3: math.sqrt(2.0)})
    assert sorted(scalars["loss"]) == [3, 5]


def test_rates_leave_out_the_first_host_call_of_a_process(tmp_path):
    # It also traces and compiles the step: its examples/s was a fraction of the others'.
    task = LinearInputTask([[1.0, 1.0]])
    scalars = _train(task, tmp_path / "run", 3, 1)
    assert sorted(scalars["loss"]) == [1, 2, 3]
    assert sorted(scalars["examples_per_second"]) == [2, 3]
    # Steps/s under the original's tag (a batch of one: the same as examples/s).
    assert scalars["global_step/sec"] == pytest.approx(scalars["examples_per_second"])
    # Resumed: the new process's first call is left out too.
    scalars = _train(task, tmp_path / "run", 5, 1)
    assert sorted(scalars["examples_per_second"]) == [2, 3, 5]


def _tensorboard_points(directory, tag):
    """[step] of each point of `tag` that TensorBoard's Python loader shows (the loader of
    `--load_fast=false`, `--logdir_spec` and logdirs other than local and gs://), after its
    purge of the points a killed process wrote past its last checkpoint."""
    from tensorboard.backend.event_processing import plugin_event_accumulator

    accumulator = plugin_event_accumulator.EventAccumulator(str(directory))
    accumulator.Reload()
    return [event.step for event in accumulator.Tensors(tag)]


class _Killed(Exception):
    pass


def test_a_resumed_run_shows_each_step_once_in_tensorboard(tmp_path, monkeypatch):
    # Killed after writing step 3's point, saved at step 2: the rerun trains step 3 again.
    # As the original's Estimator, each process opens its event file with a SessionLog.START
    # at the first step it trains, and TensorBoard drops the earlier process's points from
    # there on; without it the curve went back from step 3 to step 3 (two points).
    def killed_at_step_3(name, step):
        if (name, step) == ("train_step", 3):
            raise _Killed

    task = LinearInputTask([[1.0, 1.0], [2.0, 2.0]])
    monkeypatch.setattr(checkpointing, "fault_point", killed_at_step_3)
    with pytest.raises(_Killed):
        _train(task, tmp_path / "run", 4, 1, save_checkpoints_steps=2)
    monkeypatch.undo()
    # TensorBoard reads event files in name order; two files made in the same second differ
    # only by a per-process counter (".9.v2" sorts after ".10.v2"), so the rerun starts in
    # a later second, as a real rerun (a new process) does.
    time.sleep(1.01 - time.time() % 1)
    _train(task, tmp_path / "run", 4, 1, save_checkpoints_steps=2)
    assert _tensorboard_points(tmp_path / "run", "loss") == [1, 2, 3, 4]


def test_a_writer_without_its_private_resource_still_writes_the_scalars(
    tmp_path, monkeypatch, absl_caplog
):
    """The SessionLog.START event goes through the writer's private `_resource`: a
    TensorFlow that keeps it elsewhere loses the purge, with a warning, not the run."""

    class _Writer:  # a tf.summary writer without `_resource`
        def __init__(self, writer):
            self.as_default, self.flush, self.close = writer.as_default, writer.flush, writer.close

    create = tf.summary.create_file_writer
    monkeypatch.setattr(tf.summary, "create_file_writer", lambda d: _Writer(create(d)))
    writer = ScalarWriter(str(tmp_path), start_step=1)
    writer.write({"loss": 2.5}, 1)
    writer.close()
    assert _scalars(tmp_path) == {"loss": {1: 2.5}}
    assert "may show the steps it trains again twice" in absl_caplog.text


# TensorFlow keeps the tensor of every Python int or float it converts eagerly, and a
# reference to the number, for the life of the process (tensorflow/tensorflow#68196): a
# step or metric value handed to an eager op each host call grew memory without bound
# (about 10 KB a call; a run of a million host calls, gigabytes). A number nothing else
# holds after the call has its refcount back where it was.


def test_summaries_keep_no_reference_to_their_values_or_steps(tmp_path):
    writer = ScalarWriter(str(tmp_path))
    for _ in range(3):
        value = random.random() + 1000.0  # a new float object each time, as a metric
        step = random.randrange(10**9, 2 * 10**9)  # above the small ints Python shares
        counts = sys.getrefcount(value), sys.getrefcount(step)
        writer.write({"loss": value}, step)
        assert (sys.getrefcount(value), sys.getrefcount(step)) == counts
    writer.close()
    assert len(_scalars(tmp_path)["loss"]) == 3


def test_the_learning_rate_summary_keeps_no_step_alive(tmp_path):
    steps = []

    def optimizer_fn(global_step):
        optimizer, schedule = create_optimizer("adamw", 0.0, 600, global_step=global_step)

        def recording_schedule(step):
            steps.append(step)
            return schedule(step)

        return optimizer, recording_schedule

    options = loop.RunOptions(
        output_dir=str(tmp_path / "run"),
        num_train_steps=600,
        train_batch_size=1,
        save_checkpoints_steps=600,
        iterations_per_loop=150,
        clip_norm=None,
    )
    loop.run(LinearInputTask([[1.0, 1.0]]), tf.distribute.get_strategy(), options, optimizer_fn)
    assert [int(step) for step in steps] == [149, 299, 449, 599]
    # Referenced by `steps` and by getrefcount's argument only (the first, below 256, would
    # be one of the small ints Python shares).
    assert [sys.getrefcount(steps[i]) for i in (1, 2, 3)] == [2] * 3


def _session_starts(directory):
    """The steps of the SessionLog.START events in `directory`'s event files."""
    return [
        event.step
        for path in sorted(tf.io.gfile.glob(f"{directory}/events.out.tfevents.*"))
        for event in tf.compat.v1.train.summary_iterator(path)
        if event.HasField("session_log")
        and event.session_log.status == tf.compat.v1.SessionLog.START
    ]


def test_the_session_starts_at_the_first_step_trained_again(tmp_path):
    # Resumed from step 2 with 2 steps per host call: the first point is step 4, but a killed
    # process may have written step 3 (with 1 step per call), which this one trains again.
    writer = ScalarWriter(str(tmp_path / "resumed"), start_step=3)
    writer.write({"loss": 1.0}, 4)
    writer.close()
    assert _session_starts(tmp_path / "resumed") == [3]
    # A new run's session starts at its first point.
    writer = ScalarWriter(str(tmp_path / "new"))
    writer.write({"loss": 1.0}, 2)
    writer.close()
    assert _session_starts(tmp_path / "new") == [2]


def test_a_disabled_writer_writes_nothing(tmp_path):
    # A non-chief worker: the chief alone writes the run's event files.
    writer = ScalarWriter(str(tmp_path / "events"), enabled=False)
    writer.write({"loss": 1.0}, 1)
    writer.close()
    assert not tf.io.gfile.exists(str(tmp_path / "events"))


def test_the_progress_line_shows_the_metrics_rates_and_eta(monkeypatch, absl_caplog):
    # The first host call (tracing) gives no ETA; then 100 steps took 10 s: 800 steps left.
    clock = iter([100.0, 110.0])
    monkeypatch.setattr(summaries, "time", types.SimpleNamespace(time=lambda: next(clock)))
    progress = ProgressLogger(1000, ("loss", "accuracy"))
    progress.log(100, {"loss": 2.5, "examples_per_second": 12.34, "tokens_per_second": 0.0})
    progress.log(
        200,
        {"loss": 2.0, "accuracy": 0.5, "examples_per_second": 20.0, "tokens_per_second": 2560.0},
    )
    lines = [r.getMessage() for r in absl_caplog.records if r.getMessage().startswith("step ")]
    assert lines == [
        "step 100/1000 (10%) | loss 2.5 | 12.3 examples/s",
        "step 200/1000 (20%) | loss 2 | accuracy 0.5 | 20.0 examples/s | 2560 tokens/s"
        " | ETA 0:01:20",
    ]
