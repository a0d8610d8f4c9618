"""Strategy choice from flags, chief / worker roles, batch splitting."""

import json

import pytest
import tensorflow as tf

from albert.training import strategy as strategy_lib
from albert.training.inputs import InputError, per_replica_batch_size


def test_strategy_name_from_flags(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    resolve = strategy_lib.resolve_strategy_name
    assert resolve(None) == "default"  # this machine has no GPU and no cluster
    assert resolve(None, use_tpu=True) == "tpu"
    assert resolve(None, tpu_name="my-tpu") == "tpu"
    assert resolve(None, master="grpc://10.0.0.2:8470") == "tpu"
    assert resolve("mirrored") == "mirrored"
    cluster = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
               "task": {"type": "worker", "index": 0}}  # fmt: skip
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    assert resolve(None) == "multi_worker"


def test_strategy_errors_name_the_flags(monkeypatch):
    with pytest.raises(strategy_lib.StrategyError, match="use_tpu"):
        strategy_lib.resolve_strategy_name("mirrored", use_tpu=True)
    with pytest.raises(strategy_lib.StrategyError, match="strategy"):
        strategy_lib.resolve_strategy_name("horovod")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(strategy_lib.StrategyError, match="TF_CONFIG"):
        strategy_lib.create_strategy("multi_worker")
    with pytest.raises(strategy_lib.StrategyError, match="mixed_precision"):
        strategy_lib.set_precision("float8", "default")


def test_default_precision_is_bfloat16_only_on_tpu():
    import keras

    try:
        assert strategy_lib.set_precision(None, "tpu") == "bfloat16"
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        assert strategy_lib.set_precision(None, "mirrored") == "none"
        assert keras.mixed_precision.global_policy().name == "float32"
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


def test_single_process_is_the_chief(tmp_path):
    strategy = tf.distribute.get_strategy()
    assert strategy_lib.worker_info(strategy) == (0, 1, True)
    assert strategy_lib.writable_dir(str(tmp_path), strategy) == str(tmp_path)


def test_global_batch_must_split_evenly():
    assert per_replica_batch_size(12, 4) == 3
    with pytest.raises(InputError, match="train_batch_size=10"):
        per_replica_batch_size(10, 4)
    with pytest.raises(InputError, match="eval_batch_size"):
        per_replica_batch_size(0, 1, "eval_batch_size")
