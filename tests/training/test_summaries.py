"""What the training loop writes to TensorBoard: each scalar at its step, with its value."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert.training import loop
from albert.training.optimization import create_optimizer
from albert.training.task import TrainingTask


def _scalars(directory):
    """{tag: {step: value}} over the event files directly under `directory`."""
    values = {}
    for path in sorted(tf.io.gfile.glob(f"{directory}/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalar = float(tf.make_ndarray(value.tensor))
                values.setdefault(value.tag, {})[event.step] = scalar
    return values


class _ScaledInputTask(TrainingTask):
    """loss = sum(x @ w) over a batch of one; the gradient of w is x, so ||g|| = ||x||.

    Under float16 the scaled gradient of the float16 copy of `w` overflows (inf) once
    |x| * loss scale exceeds 65504: a step the loss scaler skips.
    """

    def __init__(self, inputs):
        self.inputs = np.asarray(inputs, np.float32)  # [steps, 2]

    def create_model(self):
        inputs = keras.Input((2,))
        # Named: a resumed run in the same process finds the same variable paths.
        dense = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones", name="dense")
        return keras.Model(inputs, dense(inputs), name="model")

    def train_dataset(self, input_context, seed):
        return tf.data.Dataset.from_tensor_slices(self.inputs).batch(1).repeat()

    def loss_normalizers(self, features):
        return {"examples": tf.cast(tf.shape(features)[0], tf.float32)}

    def compute_loss(self, model, features, normalizers, training):
        return tf.reduce_sum(tf.cast(model(features, training=training), tf.float32)), {}

    def export(self, model, output_dir):
        return output_dir


def _train(task, output_dir, num_train_steps, iterations_per_loop):
    options = loop.RunOptions(
        output_dir=str(output_dir),
        num_train_steps=num_train_steps,
        train_batch_size=1,
        save_checkpoints_steps=num_train_steps,
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
    scalars = _train(_ScaledInputTask(inputs), tmp_path / "run", 5, 3)
    # Steps 1-3: two applied, one skipped; steps 4-5: both skipped, so no norm to show.
    assert scalars["gradient_norm"] == pytest.approx({3: math.sqrt(2.0)})
    assert sorted(scalars["loss"]) == [3, 5]


def test_rates_leave_out_the_first_host_call_of_a_process(tmp_path):
    # It also traces and compiles the step: its examples/s was a fraction of the others'.
    task = _ScaledInputTask([[1.0, 1.0]])
    scalars = _train(task, tmp_path / "run", 3, 1)
    assert sorted(scalars["loss"]) == [1, 2, 3]
    assert sorted(scalars["examples_per_second"]) == [2, 3]
    # Resumed: the new process's first call is left out too.
    scalars = _train(task, tmp_path / "run", 5, 1)
    assert sorted(scalars["examples_per_second"]) == [2, 3, 5]
