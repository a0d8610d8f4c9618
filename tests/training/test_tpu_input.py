"""The TPU branch of the training input, simulated on the CPU.

Under TPUStrategy the loop feeds from `strategy.distribute_datasets_from_function` (the input
runs on the TPU hosts), whose iterator TensorFlow cannot checkpoint, so a TPU run saves no
input position and a resumed one starts a reshuffled pass. Here `tf.distribute.TPUStrategy`
is patched to the default strategy's class, so `loop` takes that branch: it trains as the
non-TPU branch does, writes no `input_state`, and on resume neither restores nor prunes an
input position (not even one an earlier non-TPU run of the same directory saved).
"""

import numpy as np
import pytest
import synthetic_pretraining as synthetic
import tensorflow as tf

from albert.config import AlbertConfig
from albert.tasks.pretraining import PretrainingTask
from albert.training import loop
from albert.training.optimization import create_optimizer

# Slow tier: four brief pretraining runs (~15 s).
pytestmark = pytest.mark.slow


def _train(data, output_dir, num_train_steps):
    task = PretrainingTask(
        AlbertConfig.from_dict(synthetic.TINY_CONFIG),
        data,
        4,
        4,
        synthetic.MAX_SEQ_LENGTH,
        synthetic.MAX_PREDICTIONS,
    )
    options = loop.RunOptions(
        output_dir=str(output_dir),
        num_train_steps=num_train_steps,
        train_batch_size=4,
        save_checkpoints_steps=2,
        iterations_per_loop=2,
        seed=7,
    )

    def optimizer_fn(global_step):
        return create_optimizer(
            "lamb", 0.05, 4, num_warmup_steps=1, global_step=global_step, aggregate_gradients=False
        )

    loop.run(task, tf.distribute.get_strategy(), options, optimizer_fn)


def _weights(output_dir, step):
    reader = tf.train.load_checkpoint(str(output_dir / f"model.ckpt-{step}"))
    names = [k for k in reader.get_variable_to_shape_map() if k.startswith("model/")]
    return {name: reader.get_tensor(name) for name in names}


def _input_states(output_dir):
    return sorted(p.name for p in (output_dir / "input_state").glob("*/*.index"))


def test_a_tpu_run_saves_no_input_position_and_resumes_reshuffled(
    tmp_path, monkeypatch, absl_caplog
):
    data = synthetic.write_records(tmp_path / "train.tfrecord", 48, seed=3)
    other, tpu = tmp_path / "other", tmp_path / "tpu"
    _train(data, other, 2)
    assert _input_states(other) == ["ckpt-2.index"]

    monkeypatch.setattr(tf.distribute, "TPUStrategy", type(tf.distribute.get_strategy()))
    _train(data, tpu, 2)
    assert not (tpu / "input_state").exists()
    # The same data and updates as the non-TPU branch.
    expected, got = _weights(other, 2), _weights(tpu, 2)
    assert len(got) > 20 and got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], atol=1e-6, err_msg=name)

    _train(data, tpu, 4)
    assert "Resumed from" in absl_caplog.text
    assert "No saved input position for step 2; reshuffling the data." in absl_caplog.text
    assert (tpu / "model.ckpt-4.index").exists() and not (tpu / "input_state").exists()

    # A non-TPU run resumed on a TPU: its saved position is left alone, none is added.
    absl_caplog.clear()
    _train(data, other, 4)
    assert "No saved input position for step 2; reshuffling the data." in absl_caplog.text
    assert (other / "model.ckpt-4.index").exists()
    assert _input_states(other) == ["ckpt-2.index"]


def test_a_resumed_tpu_run_builds_only_its_reshuffled_input(tmp_path, monkeypatch):
    """On a pod slice building an input starts every host's pipeline: a resumed TPU run, with
    no position to restore, builds the reshuffled pass alone (seed 7 + step 2), not first the
    pass of seed 7 that it would drop."""
    data = synthetic.write_records(tmp_path / "train.tfrecord", 48, seed=3)
    monkeypatch.setattr(tf.distribute, "TPUStrategy", type(tf.distribute.get_strategy()))
    _train(data, tmp_path / "tpu", 2)
    seeds = []
    build = PretrainingTask.train_dataset
    monkeypatch.setattr(
        PretrainingTask,
        "train_dataset",
        lambda task, context, seed: seeds.append(seed) or build(task, context, seed),
    )
    _train(data, tmp_path / "tpu", 4)
    assert seeds == [7 + 2]
