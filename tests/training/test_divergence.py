"""A diverged run (a NaN or infinite loss or gradient norm) stops at the host call where it
diverged, with one line naming the steps and the checkpoint a rerun resumes from, and saves
no checkpoint of its weights; a finite run, and a float16 run whose loss scaler skips steps,
train on as before."""

import math
import re
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import synthetic_pretraining as synthetic
import tensorflow as tf
from test_multi_worker import _finish, _start_workers
from toy_tasks import LinearInputTask

from albert.config import AlbertConfig
from albert.errors import TrainingDivergedError
from albert.tasks.pretraining import PretrainingTask
from albert.training import divergence, loop
from albert.training.failures import describe_failure
from albert.training.optimization import create_optimizer

NAN = float("nan")


def _scalars(directory, tag):
    """{step: value} of `tag` over the event files directly under `directory`."""
    values = {}
    for path in sorted(tf.io.gfile.glob(f"{directory}/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


def _checkpoint_steps(output_dir):
    return sorted(int(p.name.split("-")[1].split(".")[0]) for p in output_dir.glob("*.index"))


def _all_finite(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    names = [n for n in reader.get_variable_to_shape_map() if "/.ATTRIBUTES/" in n]
    values = [reader.get_tensor(n) for n in names]
    return all(np.all(np.isfinite(v)) for v in values if np.issubdtype(v.dtype, np.floating))


class _InputTask(LinearInputTask):
    """loss = sum(sqrt(x @ w)) over a batch of one, step i reading row i - 1 of `inputs`.

    x = [0, 0] gives a finite loss (0) and a NaN gradient (inf * 0); x = NaN a NaN loss.
    """

    def compute_loss(self, model, features, normalizers, training):
        outputs = tf.cast(model(features, training=training), tf.float32)
        return tf.reduce_sum(tf.sqrt(outputs)), {}


def _train(task, output_dir, num_train_steps=8, strategy=None, learning_rate=0.01):
    """Two steps a host call, a checkpoint every two, AdamW, a batch of one a replica."""
    strategy = strategy or tf.distribute.get_strategy()
    options = loop.RunOptions(
        output_dir=str(output_dir),
        num_train_steps=num_train_steps,
        train_batch_size=strategy.num_replicas_in_sync,
        save_checkpoints_steps=2,
        keep_checkpoint_max=10,
        iterations_per_loop=2,
    )

    def optimizer_fn(global_step):
        return create_optimizer("adamw", learning_rate, num_train_steps, global_step=global_step)

    return loop.run(task, strategy, options, optimizer_fn)


def _inputs(poisoned_step=None, value=NAN):
    rows = [[1.0, 1.0]] * 8
    if poisoned_step:
        rows[poisoned_step - 1] = [value, value]
    return rows


def test_a_finite_run_trains_to_the_end(tmp_path):
    _train(_InputTask(_inputs()), tmp_path / "run")
    assert _checkpoint_steps(tmp_path / "run") == [2, 4, 6, 8]


def test_a_nan_loss_stops_the_call_before_its_checkpoint(tmp_path, absl_caplog):
    output_dir = tmp_path / "run"
    with pytest.raises(TrainingDivergedError) as error:
        _train(_InputTask(_inputs(poisoned_step=5)), output_dir)
    message = str(error.value)
    last = output_dir / "model.ckpt-4"
    assert message.startswith("Training diverged: the loss was NaN in steps 5-6, ")
    assert f"resumes from the last checkpoint saved, {last}," in message
    assert "lower --learning_rate (now 0.01)" in message
    assert "\n" not in message and describe_failure(error.value) == message
    # The earlier checkpoints are intact, none at or after the call.
    assert _checkpoint_steps(output_dir) == [2, 4]
    assert _all_finite(last)
    # The call's progress line and TensorBoard point come first.
    assert re.search(r"step 6/8 \(75%\) \| loss nan", absl_caplog.text)
    loss = _scalars(output_dir, "loss")
    assert sorted(loss) == [2, 4, 6] and math.isnan(loss[6])


def test_a_nan_gradient_with_a_finite_loss_stops_the_call(tmp_path):
    # Step 6 has loss 0 (the call's mean is finite) and a NaN gradient: its weights are NaN.
    output_dir = tmp_path / "run"
    with pytest.raises(TrainingDivergedError, match=r"the gradient norm was NaN in steps 5-6"):
        _train(_InputTask(_inputs(poisoned_step=6, value=0.0)), output_dir)
    assert _checkpoint_steps(output_dir) == [2, 4]
    assert math.isfinite(_scalars(output_dir, "loss")[6])


def test_a_first_call_that_diverges_says_no_checkpoint_was_saved(tmp_path):
    with pytest.raises(TrainingDivergedError, match=r"in steps 1-2, .*no checkpoint was saved"):
        _train(_InputTask(_inputs(poisoned_step=2)), tmp_path / "run")
    assert _checkpoint_steps(tmp_path / "run") == []


@pytest.fixture
def float16_policy():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_float16_steps_the_loss_scaler_skips_do_not_stop_the_run(tmp_path, float16_policy):
    # Scaled by 2**15 and then 2**14, x = 64 overflows float16 (inf gradients): steps 3 and
    # 4 are both skipped, with a finite loss. Step 5's NaN loss is skipped too, and step 6
    # applied: the call's mean loss is NaN, its weights finite. A NaN loss in every step of a
    # call (none applied) stops it.
    inputs = [[1.0, 1.0]] * 2 + [[64.0, 64.0]] * 2 + [[NAN, NAN], [1.0, 1.0]] + [[NAN, NAN]] * 2
    output_dir = tmp_path / "run"
    with pytest.raises(TrainingDivergedError, match=r"the loss was NaN in steps 7-8"):
        _train(LinearInputTask(inputs), output_dir)
    assert _checkpoint_steps(output_dir) == [2, 4, 6]
    assert _all_finite(output_dir / "model.ckpt-6")
    assert math.isnan(_scalars(output_dir, "loss")[6])


def test_weights_that_overflow_from_finite_gradients_are_not_saved(tmp_path):
    # loss = w0 (x = [1, 0]): its gradient is always finite. AdamW at 1e38 moves w0 by ~3e38
    # a step, so step 2's update overflows w0 to -inf while the call's loss and norm are
    # finite; step 3's loss would show it, one checkpoint too late.
    output_dir = tmp_path / "run"
    with pytest.raises(TrainingDivergedError) as error:
        _train(LinearInputTask([[1.0, 0.0]] * 8), output_dir, learning_rate=1e38)
    message = str(error.value)
    assert message.startswith("Training diverged: the weight dense/kernel was infinite in ")
    assert "steps 1-2, so these weights were not saved; no checkpoint was saved" in message
    assert _checkpoint_steps(output_dir) == []
    assert math.isfinite(_scalars(output_dir, "loss")[2])


def test_every_weight_is_checked_for_non_finite_values():
    # The overflow can reach any weight (a bias, a later layer), not only the first.
    finite = tf.Variable([1.0, 2.0], name="finite")
    assert divergence.nonfinite_weight([finite, tf.Variable([0.0], name="zero")]) is None
    infinite = tf.Variable([[1.0, -np.inf]], name="infinite")
    nan = tf.Variable([np.nan, np.inf], name="nan")
    what, value = divergence.nonfinite_weight([finite, infinite, nan])
    assert what == "weight infinite:0" and value == np.inf
    what, value = divergence.nonfinite_weight([finite, nan, infinite])
    assert what == "weight nan:0" and math.isnan(value)


def _poisoned(compute_loss, from_step):
    """`compute_loss` whose training loss is NaN from the `from_step`-th training step on."""
    steps = tf.Variable(0, trainable=False)

    def poisoned(model, features, normalizers, training):
        loss, sums = compute_loss(model, features, normalizers, training)
        if training:
            steps.assign_add(1)
            loss += tf.where(steps >= from_step, NAN, 0.0)
        return loss, sums

    return poisoned


@pytest.mark.slow  # traces the tiny pretrainer (~4 s)
def test_pretraining_stops_at_the_call_whose_loss_is_nan(tmp_path):
    data = synthetic.write_records(tmp_path / "train.tfrecord", 32, seed=3)
    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    task = PretrainingTask(config, data, 4, 4, synthetic.MAX_SEQ_LENGTH, synthetic.MAX_PREDICTIONS)
    task.compute_loss = _poisoned(task.compute_loss, from_step=7)
    options = loop.RunOptions(
        output_dir=str(tmp_path / "run"),
        num_train_steps=12,
        train_batch_size=4,
        save_checkpoints_steps=3,
        iterations_per_loop=3,
    )

    def optimizer_fn(global_step):
        return create_optimizer(
            "lamb", 1e-3, 12, num_warmup_steps=2, global_step=global_step, aggregate_gradients=False
        )

    with pytest.raises(TrainingDivergedError) as error:
        loop.run(task, tf.distribute.get_strategy(), options, optimizer_fn)
    last = Path(tmp_path / "run" / "model.ckpt-6")
    assert str(error.value).startswith("Training diverged: the loss was NaN in steps 7-9, ")
    assert f"{last}," in str(error.value)
    assert "--num_warmup_steps (now 2)." in str(error.value)
    assert _checkpoint_steps(tmp_path / "run") == [3, 6]
    assert _all_finite(last)


# One worker of a two-worker MultiWorkerMirroredStrategy run reads a NaN at step 5.
_WORKER_SCRIPT = """
import sys
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
sys.path.insert(0, sys.argv[2])
from test_divergence import _InputTask, _inputs, _train

class OneWorkerPoisoned(_InputTask):
    def train_dataset(self, input_context, seed):
        rows = _inputs(poisoned_step=5 if input_context.input_pipeline_id == 0 else None)
        return tf.data.Dataset.from_tensor_slices(np.asarray(rows, np.float32)).batch(1).repeat()

try:
    _train(OneWorkerPoisoned([]), sys.argv[1], strategy=strategy)
except Exception as e:
    print(f"{type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(3)
"""


@pytest.mark.slow  # two worker processes train together (~15 s)
def test_every_worker_stops_at_the_same_call(tmp_path):
    output_dir = tmp_path / "run"
    command = [sys.executable, "-c", _WORKER_SCRIPT, str(output_dir), str(Path(__file__).parent)]
    workers = _start_workers(command)
    logs = _finish(workers)
    assert [worker.returncode for worker in workers] == [3, 3], logs
    for log in logs:
        assert "TrainingDivergedError: Training diverged: the loss was NaN in steps 5-6" in log
        assert f"{output_dir / 'model.ckpt-4'}," in log
    assert _checkpoint_steps(output_dir) == [2, 4]
