"""A one-weight-vector `TrainingTask` for tests of the training loop itself."""

import keras
import numpy as np
import tensorflow as tf

from albert.training.task import TrainingTask


class LinearInputTask(TrainingTask):
    """loss = sum(x @ w) over a batch of one, step i reading row i - 1 of `inputs` (cycled);
    the gradient of w is x, so ||g|| = ||x||.

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
