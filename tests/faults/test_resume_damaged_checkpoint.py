"""A damaged latest checkpoint (a write cut short) is skipped on resume, with a warning naming
it, for the newest intact one; the rerun then ends bit-identical to the uninterrupted run."""

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import logging as absl_logging

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "training"))

import synthetic_pretraining as synthetic  # noqa: E402

from albert.checkpoints import CheckpointError  # noqa: E402
from albert.config import AlbertConfig  # noqa: E402
from albert.tasks.pretraining import PretrainingTask  # noqa: E402
from albert.training import checkpointing, loop  # noqa: E402
from albert.training.optimization import create_optimizer  # noqa: E402

# Slow tier: trains the tiny pretrainer again in every test (~12 s).
pytestmark = pytest.mark.slow

DROPOUT = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}


def tiny_pretraining_run(tmp_path, output_dir, num_train_steps=8, **config_changes):
    """Trains the tiny pretrainer in this process (dropout 0.1), a checkpoint every 4 steps."""
    data = tmp_path / "train.tfrecord"
    if not data.exists():
        synthetic.write_records(data, 64, seed=3)
    config = AlbertConfig.from_dict({**synthetic.TINY_CONFIG, **DROPOUT, **config_changes})
    task = PretrainingTask(
        config, str(data), 6, 6, synthetic.MAX_SEQ_LENGTH, synthetic.MAX_PREDICTIONS
    )
    options = loop.RunOptions(
        output_dir=str(output_dir),
        num_train_steps=num_train_steps,
        train_batch_size=6,
        save_checkpoints_steps=4,
        keep_checkpoint_max=3,
        iterations_per_loop=2,
        seed=7,
    )

    def optimizer_fn(global_step):
        return create_optimizer(
            "lamb",
            0.05,
            num_train_steps,
            num_warmup_steps=1,
            global_step=global_step,
            aggregate_gradients=False,
        )

    return loop.run(task, tf.distribute.get_strategy(), options, optimizer_fn)


def _values(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    keys = [k for k in reader.get_variable_to_shape_map() if not k.startswith("_CHECKPOINTABLE")]
    return {k: reader.get_tensor(k) for k in keys if "save_counter" not in k}


@pytest.mark.parametrize("damaged_file", ["data-00000-of-00001", "index"])
def test_truncated_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, damaged_file, caplog):
    output_dir = tmp_path / "run"
    tiny_pretraining_run(tmp_path, output_dir)
    expected = _values(output_dir / "model.ckpt-8")
    path = output_dir / f"model.ckpt-8.{damaged_file}"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert checkpointing.is_intact(str(output_dir / "model.ckpt-4"))
    assert not checkpointing.is_intact(str(output_dir / "model.ckpt-8"))

    absl_logging.get_absl_logger().propagate = True
    # The absl logger's own level too: an earlier test may have set absl's verbosity to WARNING.
    with caplog.at_level("INFO"), caplog.at_level("INFO", logger="absl"):
        tiny_pretraining_run(tmp_path, output_dir)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"Checkpoint {output_dir / 'model.ckpt-8'} is damaged" in w for w in warnings)
    assert any(
        f"Resumed from {output_dir / 'model.ckpt-4'} at global step 4" in r.getMessage()
        for r in caplog.records
    )
    got = _values(output_dir / "model.ckpt-8")
    assert expected.keys() == got.keys() and any(k.startswith("rng/") for k in got)
    for key in expected:
        assert np.array_equal(expected[key], got[key]), key


def test_every_checkpoint_damaged_is_one_clear_error(tmp_path):
    output_dir = tmp_path / "run"
    tiny_pretraining_run(tmp_path, output_dir, num_train_steps=4)
    index = output_dir / "model.ckpt-4.index"
    index.write_bytes(b"")
    before = {p: p.read_bytes() for p in output_dir.rglob("*") if p.is_file()}
    with pytest.raises(CheckpointError, match=r"No checkpoint in .* can be read"):
        tiny_pretraining_run(tmp_path, output_dir, num_train_steps=4)
    assert {p: p.read_bytes() for p in output_dir.rglob("*") if p.is_file()} == before


def test_a_rerun_removes_what_writes_killed_midway_left(tmp_path):
    # What a SIGKILL during each write leaves (seen in a randomized kill audit): TensorFlow's
    # sharded save writes `<prefix>_temp/part-...tempstate<n>` and merges it into the
    # checkpoint only at the end; the model.ckpt-best copy and the Keras export write under
    # `.tmp-` names. No later save or rename removed them: one checkpoint's size per kill.
    output_dir = tmp_path / "run"
    tiny_pretraining_run(tmp_path, output_dir, num_train_steps=4)
    part = "part-00000-of-00001.data-00000-of-00001.tempstate8301734466204712419"
    leftovers = [
        output_dir / "model.ckpt-8_temp" / part,
        output_dir / "input_state" / "worker_0" / "ckpt-8_temp" / part,
        output_dir / ".model.ckpt-best.data-00000-of-00001.tmp-0123456789abcdef",
        output_dir / "pretrainer.tmp-0123456789abcdef.weights.h5",
    ]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * 1000)
    tiny_pretraining_run(tmp_path, output_dir)
    remaining = [p for p in output_dir.rglob("*") if "_temp" in p.name or ".tmp-" in p.name]
    assert remaining == []
    assert checkpointing.is_intact(str(output_dir / "model.ckpt-8"))
    assert (output_dir / "pretrainer.weights.h5").exists()
