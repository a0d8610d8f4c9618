"""The predict pass: every example once, padding dropped, dataset order restored, on one
device and under MirroredStrategy over 2 logical CPUs (in a subprocess: logical devices
must be set before TensorFlow initialises)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from albert import progress
from albert.data.features import pad_dataset
from albert.training import predict

HERE = Path(__file__).resolve().parent
NUM_EXAMPLES, GLOBAL_BATCH = 11, 4  # 11 examples -> 3 global batches, 1 padding example

_MIRRORED_SCRIPT = """
import json
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import test_predict
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
print(json.dumps([test_predict.predict_numbers(strategy),
                  test_predict.predict_numbers(strategy, steps_per_call=2, num_batches=3)]))
"""


def predict_numbers(strategy, steps_per_call=1, num_batches=None):
    """Predicts x * 2 for x = 1, 11, 21, ... under `strategy`, `steps_per_call` batches per
    host call; returns lists for JSON."""
    values = tf.range(NUM_EXAMPLES, dtype=tf.float32) * 10.0 + 1.0

    def dataset_fn(context):
        data = tf.data.Dataset.from_tensor_slices(
            {"x": values, "is_real_example": tf.ones([NUM_EXAMPLES], tf.int32)}
        )
        data = pad_dataset(predict.add_example_index(data), NUM_EXAMPLES, GLOBAL_BATCH)
        return data.batch(context.get_per_replica_batch_size(GLOBAL_BATCH), drop_remainder=True)

    def step(features):
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        return {
            "double": features["x"] * 2.0,
            "replica": tf.fill(tf.shape(features["x"]), replica),
            "example_index": features["example_index"],
            "is_real_example": features["is_real_example"],
        }

    predictor = predict.Predictor(strategy, step)
    host_calls = []
    loop = predictor._loop
    predictor._loop = lambda iterator, n, *rest: (
        host_calls.append(int(n)) or loop(iterator, n, *rest)
    )
    raw = predictor.predict(dataset_fn, num_batches=num_batches, steps_per_call=steps_per_call)
    ordered = predict.real_examples_in_order(raw)
    return {
        "host_calls": host_calls,
        "raw_rows": len(raw["double"]),
        "double": ordered["double"].tolist(),
        "index": ordered["example_index"].tolist(),
        "replicas": sorted(set(raw["replica"].tolist())),
    }


def _check(out, replicas, host_calls=(1, 1, 1, 1)):
    # Batches asked for per host call: the last call of an unknown count finds the end.
    assert out["host_calls"] == list(host_calls)
    assert out["raw_rows"] == 12  # padded to whole global batches
    assert out["index"] == list(range(NUM_EXAMPLES))
    assert out["double"] == [(10.0 * i + 1.0) * 2.0 for i in range(NUM_EXAMPLES)]
    assert out["replicas"] == replicas


def test_every_example_once_in_order_on_one_device():
    _check(predict_numbers(tf.distribute.get_strategy()), [0])


@pytest.mark.slow
def test_every_example_once_in_order_on_two_replicas():
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join([str(HERE.parents[1]), str(HERE)]),
    )
    result = subprocess.run(
        [sys.executable, "-c", _MIRRORED_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    one_per_call, two_per_call = json.loads(result.stdout.strip().splitlines()[-1])
    _check(one_per_call, [0, 1])
    _check(two_per_call, [0, 1], host_calls=(1, 2))


def test_several_batches_per_host_call_give_the_same_predictions():
    strategy = tf.distribute.get_strategy()
    # 3 global batches. Calls start at one batch and double (up to steps_per_call): 1 + 2
    # when the count is known; 1 + 2 + 2 (the last finds the end) when not.
    _check(predict_numbers(strategy, steps_per_call=2, num_batches=3), [0], host_calls=(1, 2))
    _check(predict_numbers(strategy, steps_per_call=2), [0], host_calls=(1, 2, 2))
    _check(predict_numbers(strategy, steps_per_call=1000, num_batches=3), [0], host_calls=(1, 2))


def test_a_host_call_runs_within_half_a_progress_interval():
    # The first call compiles: the next doubles whatever it took.
    assert predict.next_call_size(1, None, 15.0) == 2
    assert predict.next_call_size(512, 1.0, 15.0) == 1024  # fast: doubles
    # 0.2 s a batch (a large model): 75 batches fit in 15 s, not 1000 (200 s of silence).
    assert predict.next_call_size(100, 20.0, 15.0) == 75
    assert predict.next_call_size(1, 100.0, 15.0) == 1  # never fewer than one


@pytest.mark.parametrize("num_workers, host_calls", [(1, (1, 2, 1)), (2, (1, 2, 4))])
def test_workers_make_the_same_calls_whatever_their_clocks(monkeypatch, num_workers, host_calls):
    # Every call takes 100 s: after the first (untimed: it compiles), one worker goes back to
    # one batch a call. Several workers must make the same calls (their collectives pair by
    # loop iteration), so theirs double, untimed.
    clock = iter(range(0, 10**6, 100))
    monkeypatch.setattr(predict.time, "perf_counter", lambda: float(next(clock)))
    monkeypatch.setattr(predict, "worker_info", lambda strategy: (0, num_workers, True))
    strategy = tf.distribute.get_strategy()
    _check(predict_numbers(strategy, steps_per_call=1000), [0], host_calls=host_calls)


def test_real_examples_in_order_drops_padding_and_sorts():
    outputs = {
        "logits": np.array([[3.0], [1.0], [0.0], [2.0]]),
        "example_index": np.array([2, 0, 0, 1]),
        "is_real_example": np.array([1, 1, 0, 1]),
    }
    ordered = predict.real_examples_in_order(outputs)
    assert ordered["logits"][:, 0].tolist() == [1.0, 2.0, 3.0]
    assert ordered["example_index"].tolist() == [0, 1, 2]


def test_real_examples_in_order_rejects_a_repeated_index():
    outputs = {"example_index": np.array([0, 0]), "is_real_example": np.array([1, 1])}
    with pytest.raises(predict.PredictError, match="not numbered"):
        predict.real_examples_in_order(outputs)


def test_an_empty_dataset_is_an_error():
    def dataset_fn(context):
        return tf.data.Dataset.from_tensor_slices({"x": tf.zeros([0])}).batch(2)

    with pytest.raises(predict.PredictError, match="holds no batch"):
        predict.Predictor(tf.distribute.get_strategy(), lambda f: f).predict(dataset_fn)


def test_the_pass_logs_its_progress(monkeypatch, absl_caplog):
    # A large model over SQuAD's 12k dev windows runs for minutes between the loop's lines.
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)
    predict_numbers(tf.distribute.get_strategy(), num_batches=3)
    assert "predict: ran 3/3 batches (100%) | " in absl_caplog.text
