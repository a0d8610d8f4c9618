"""Eval and predict batches reach the replicas with static shapes, as TPUs compile them.

Every eval and predict pipeline yields full, fixed-shape batches (padded), and the loops know
how many. Fetched with `get_next_as_optional`, TensorFlow's distributed iterator wraps each
replica's batch in a `tf.cond` with an empty stand-in, so the replica function saw
`[None, ...]`: on a TPU the step then depends on TPUStrategy's dynamic padding (bounded
dynamic shapes) instead of the static shapes the pipelines give. A one-device
MirroredStrategy takes the same path as TPUStrategy here (the default strategy does not).
"""

import keras
import pytest
import synthetic_pretraining as synthetic
import tensorflow as tf

from albert.config import AlbertConfig
from albert.data import records
from albert.tasks.pretraining import PretrainingTask
from albert.training import predict
from albert.training.inputs import InputError
from albert.training.steps import Trainer


def _task(tmp_path):
    """Pretraining on 10 eval records, eval and train batches of 4."""
    data = synthetic.write_records(tmp_path / "eval.tfrecord", 10, seed=5)
    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    return PretrainingTask(config, data, 4, 4, synthetic.MAX_SEQ_LENGTH, synthetic.MAX_PREDICTIONS)


def _strategy():
    return tf.distribute.MirroredStrategy(["/cpu:0"])


def test_pretraining_eval_steps_see_static_shapes(tmp_path):
    task = _task(tmp_path)
    strategy = _strategy()
    with strategy.scope():
        model = task.create_model()
        global_step = tf.Variable(0, dtype=tf.int64)
    shapes = []
    compute_loss = task.compute_loss

    def recording(model, features, normalizers, training):
        shapes.append(features["input_ids"].shape.as_list())
        return compute_loss(model, features, normalizers, training)

    task.compute_loss = recording
    trainer = Trainer(strategy, task, model, keras.optimizers.SGD(0.0), global_step)
    dataset = strategy.distribute_datasets_from_function(lambda c: task.eval_dataset(c, 4))
    sums = trainer.evaluate(iter(dataset), 4)
    assert sums["steps"] == 3.0  # 10 records in batches of 4; the 4th step is padding alone
    assert sums["sentence_order_examples"] == 10.0
    assert shapes and all(shape == [4, synthetic.MAX_SEQ_LENGTH] for shape in shapes), shapes


def test_predict_steps_see_static_shapes_when_the_batches_are_counted():
    def dataset_fn(context):
        data = tf.data.Dataset.from_tensor_slices(
            {"x": tf.range(12, dtype=tf.float32), "is_real_example": tf.ones([12], tf.int32)}
        )
        return predict.add_example_index(data).batch(4, drop_remainder=True)

    shapes = []

    def step(features):
        shapes.append(features["x"].shape.as_list())
        return dict(features)

    predictor = predict.Predictor(_strategy(), step)
    outputs = predictor.predict(dataset_fn, num_batches=3, steps_per_call=2)
    assert outputs["x"].tolist() == list(range(12))
    assert shapes and all(shape == [4] for shape in shapes), shapes
    # Counted or not, the same predictions: an uncounted pass runs to the data's end.
    assert predictor.predict(dataset_fn)["x"].tolist() == list(range(12))


def test_eval_data_shorter_than_its_steps_is_one_clear_error(tmp_path):
    # `get_next` needs the `num_steps` batches `TrainingTask.eval_dataset` must yield (padded).
    # An eval dataset read once instead (2 batches of 10 records, 4 steps asked for) stopped
    # at its end before static shapes; then it failed with TensorFlow's OutOfRangeError, a
    # graph traceback naming no task and no contract.
    task = _task(tmp_path)
    data = str(tmp_path / "eval.tfrecord")
    strategy = tf.distribute.get_strategy()
    model = task.create_model()
    trainer = Trainer(
        strategy, task, model, keras.optimizers.SGD(0.0), tf.Variable(0, dtype=tf.int64)
    )
    read_once = strategy.distribute_datasets_from_function(
        lambda context: records.pretraining_dataset(
            data, 4, synthetic.MAX_SEQ_LENGTH, synthetic.MAX_PREDICTIONS, False, context
        )
    )
    with pytest.raises(InputError) as raised:
        trainer.evaluate(iter(read_once), 4)
    message = str(raised.value)
    assert message.startswith("The eval data of PretrainingTask ended before its 4 steps"), message
    assert "\n" not in message


def test_predict_data_shorter_than_its_batches_is_one_clear_error():
    # num_batches promises the batches a counted pass fetches with `get_next`: a dataset
    # that ends sooner (a feature count above its records) failed with an OutOfRangeError.
    def dataset_fn(context):
        data = tf.data.Dataset.from_tensor_slices(
            {"x": tf.range(8, dtype=tf.float32), "is_real_example": tf.ones([8], tf.int32)}
        )
        return predict.add_example_index(data).batch(4, drop_remainder=True)

    predictor = predict.Predictor(_strategy(), dict)
    with pytest.raises(predict.PredictError) as raised:
        predictor.predict(dataset_fn, num_batches=3, steps_per_call=4)
    message = str(raised.value)
    assert message.startswith("The data to predict on ended before its 3 batches"), message
    assert "\n" not in message
