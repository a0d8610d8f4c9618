"""The training step clips the summed gradients to global norm 1.0, as the original does.

A linear model whose loss is `features . w`, so the gradient is the features themselves and
the update of plain SGD (learning rate 1) is minus the clipped gradient.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from albert.training import flags as flags_lib
from albert.training.inputs import DistributedInput
from albert.training.steps import Trainer
from albert.training.task import TrainingTask

UNITS = 3


class LinearTask(TrainingTask):
    """loss = features . w over a batch of one: the gradient with respect to w is `features`."""

    def create_model(self):
        inputs = keras.Input((UNITS,))
        outputs = keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")(inputs)
        return keras.Model(inputs, outputs)

    def loss_normalizers(self, features):
        return {"examples": tf.cast(tf.shape(features)[0], tf.float32)}

    def compute_loss(self, model, features, normalizers, training):
        return tf.reduce_sum(model(features, training=training)) / normalizers["examples"], {}


def _one_step(gradient, loss_scaled=False, **trainer_kwargs):
    """(kernel after one step from zeros, the gradient norm the step reports)."""
    strategy = tf.distribute.get_strategy()
    task = LinearTask()
    model = task.create_model()
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    optimizer = keras.optimizers.SGD(1.0)
    if loss_scaled:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=2.0**10)
    optimizer.build(model.trainable_variables)
    trainer = Trainer(strategy, task, model, optimizer, global_step, **trainer_kwargs)
    features = tf.constant([gradient], tf.float32)  # [1, UNITS]
    data = DistributedInput(
        strategy, lambda context: tf.data.Dataset.from_tensors(features).repeat()
    )
    sums = trainer.train(data, 1)
    return model.weights[0].numpy()[:, 0], sums["gradient_norm"]


@pytest.mark.parametrize("loss_scaled", [False, True])
def test_a_gradient_above_norm_1_is_clipped_to_norm_1_by_default(loss_scaled):
    gradient = np.array([6.0, 0.0, 8.0], np.float32)  # global norm 10
    kernel, norm = _one_step(gradient, loss_scaled=loss_scaled)
    assert norm == pytest.approx(10.0, rel=1e-6)  # reported before clipping
    np.testing.assert_allclose(kernel, -gradient / 10.0, rtol=1e-6)


def test_a_gradient_below_the_threshold_is_left_as_it_is():
    gradient = np.array([0.3, -0.4, 0.0], np.float32)  # global norm 0.5
    kernel, _ = _one_step(gradient)
    np.testing.assert_allclose(kernel, -gradient, rtol=1e-6)
    kernel, _ = _one_step(np.array([6.0, 0.0, 8.0], np.float32), clip_norm=None)
    np.testing.assert_allclose(kernel, [-6.0, 0.0, -8.0], rtol=1e-6)


def test_run_pretraining_clips_at_the_originals_norm_of_1():
    flag_values = flags.FlagValues()
    flags_lib.define_pretraining_flags(flag_values)
    flag_values(["run_pretraining.py", "--do_train", "--output_dir=unused"])
    assert flags_lib.run_options_from_flags(flag_values).clip_norm == 1.0
