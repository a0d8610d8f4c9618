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


# Eval rows x (one per batch); with the weights at 1 the model's output is x0 + x1.
EVAL_ROWS = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]


class EvalRowsTask(TrainingTask):
    """prediction = dropout(x) @ [1, 1]; loss = the prediction, weighted by `weight` (0 for
    padding). Its metrics name no `loss`: the loop reports the mean of the steps' losses."""

    metric_names = ("real",)

    def __init__(self):
        self.evaluated = []  # the steps of the evaluations the loop recorded, in order
        self.initialised_from = []  # the --init_checkpoint paths the loop loaded

    def record_evaluation(self, step, checkpoint_path, metrics):
        self.evaluated.append(step)

    def load_initial_weights(self, model, path):
        self.initialised_from.append(path)

    def create_model(self):
        inputs = keras.Input((2,))
        dropped = keras.layers.Dropout(0.5, seed=1)(inputs)
        dense = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones", name="dense")
        return keras.Model(inputs, dense(dropped))

    def train_dataset(self, input_context, seed):
        rows = {"x": [[1.0, 1.0]], "weight": [1.0]}
        return tf.data.Dataset.from_tensor_slices(rows).repeat().batch(1)

    def eval_dataset(self, input_context, num_steps):
        # One real row per batch, then padding (weight 0) up to `num_steps` batches.
        padding = num_steps - len(EVAL_ROWS)
        rows = {
            "x": EVAL_ROWS + [[0.0, 0.0]] * padding,
            "weight": [1.0] * len(EVAL_ROWS) + [0.0] * padding,
        }
        return tf.data.Dataset.from_tensor_slices(rows).batch(1)

    def loss_normalizers(self, features):
        return {"examples": tf.reduce_sum(features["weight"])}

    def compute_loss(self, model, features, normalizers, training):
        predictions = model(features["x"], training=training)[:, 0]  # [B]
        weighted = tf.reduce_sum(features["weight"] * predictions)
        loss = weighted / tf.maximum(normalizers["examples"], 1.0)
        return loss, {"real": tf.reduce_sum(features["weight"])}

    def metric_results(self, sums):
        return {"real": sums["real"]}

    def export(self, model, output_dir):
        return output_dir
