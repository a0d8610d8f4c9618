"""What a run or the converter may write into an existing directory: a failed rerun changes
nothing, the converter refuses a training run's directory and a non-empty one without
--overwrite, and a run whose output_dir is on ram:// (where every path prefix "is" a
directory) fine-tunes, evaluates and predicts end to end."""

import sys
from pathlib import Path

import pytest
import tensorflow as tf
from test_resume_damaged_checkpoint import tiny_pretraining_run

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "tasks"))

import synthetic_glue  # noqa: E402

from albert.checkpoints import CheckpointError  # noqa: E402
from albert.convert_checkpoint import convert  # noqa: E402
from albert.training import checkpointing  # noqa: E402

# Slow tier: training, conversion and fine-tuning runs (~20 s).
pytestmark = pytest.mark.slow


def _snapshot(directory):
    return {p: p.read_bytes() for p in Path(directory).rglob("*") if p.is_file()}


def test_a_failed_rerun_leaves_every_file_as_it_was(tmp_path):
    output_dir = tmp_path / "run"
    tiny_pretraining_run(tmp_path, output_dir, num_train_steps=4)
    before = _snapshot(output_dir)
    assert (output_dir / "albert_config.json") in before
    # Another hidden_size cannot resume from these checkpoints.
    with pytest.raises(CheckpointError, match="Cannot resume from .*model.ckpt-4"):
        tiny_pretraining_run(tmp_path, output_dir, num_train_steps=8, hidden_size=32)
    assert _snapshot(output_dir) == before


def test_converter_refuses_a_training_directory(tmp_path):
    output_dir = tmp_path / "run"
    tiny_pretraining_run(tmp_path, output_dir, num_train_steps=4)
    before = _snapshot(output_dir)
    for overwrite in (False, True):
        with pytest.raises(CheckpointError) as error:
            convert(str(output_dir), str(output_dir), "tf1", overwrite=overwrite)
        assert str(error.value) == (
            f"--output={output_dir} is a training run's directory (it holds input_state); "
            "write the converted checkpoint into another directory."
        )
    assert _snapshot(output_dir) == before
    # Into a new directory it converts, and resume still finds the run's own checkpoint.
    convert(str(output_dir), str(tmp_path / "tf1"), "tf1")
    assert (tmp_path / "tf1" / "model.ckpt.index").exists()
    assert tf.train.latest_checkpoint(str(output_dir)).endswith("model.ckpt-4")


def test_converter_needs_overwrite_for_a_non_empty_directory(tmp_path):
    source = tmp_path / "run"
    tiny_pretraining_run(tmp_path, source, num_train_steps=4)
    target = tmp_path / "mine"
    target.mkdir()
    (target / "config.json").write_text('{"mine": true}\n')
    with pytest.raises(CheckpointError) as error:
        convert(str(source), str(target), "hf")
    assert str(error.value) == (
        f"--output={target} is not empty (config.json); pass --overwrite to replace the files "
        "in it, or choose an empty directory."
    )
    assert _snapshot(target) == {target / "config.json": b'{"mine": true}\n'}
    convert(str(source), str(target), "hf", overwrite=True)
    assert (target / "model.safetensors").exists()
    assert (target / "config.json").read_text() != '{"mine": true}\n'


def test_classifier_on_a_ram_output_dir_end_to_end(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything written to a local "ram:" folder would land here
    data_dir = synthetic_glue.write_sst2(tmp_path / "glue", num_train=40, num_dev=10, num_test=3)
    config = synthetic_glue.write_config(tmp_path / "config.json")
    output_dir = "ram://faults_sst2/out"
    flags = synthetic_glue.tiny_run_flags(data_dir, output_dir, config, "sst-2")
    metrics, _ = synthetic_glue.run_classifier(
        *flags,
        "--train_step=6",
        "--save_checkpoints_steps=3",
        "--do_train",
        "--do_eval",
        "--do_predict",
    )
    assert metrics["global_step"] in (3, 6) and 0.0 <= metrics["accuracy"] <= 1.0
    for name in (
        "model.ckpt-best.index",
        "model.ckpt-6.index",
        "eval_results.txt",
        "best_checkpoint.txt",
        "albert_config.json",
        "test_results.tsv",
    ):
        assert tf.io.gfile.exists(f"{output_dir}/{name}"), name
    assert not tf.io.gfile.exists(f"{output_dir}/run.lock")  # released
    results = checkpointing.read_key_values(f"{output_dir}/eval_results.txt")
    assert results["checkpoint"] == f"{output_dir}/model.ckpt-best"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "glue"]


def test_a_run_resumes_in_another_precision(tmp_path):
    # float16 wraps the optimizer in a LossScaleOptimizer, whose variables (the loss scale)
    # a float32 or bfloat16 checkpoint lacks; under --mixed_precision=auto the same command
    # picks float16 on one GPU and bfloat16 on another. Resume was refused both ways.
    import keras

    output_dir = tmp_path / "run"
    tiny_pretraining_run(tmp_path, output_dir, num_train_steps=4)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        tiny_pretraining_run(tmp_path, output_dir, num_train_steps=8)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    reader = tf.train.load_checkpoint(str(output_dir / "model.ckpt-8"))
    assert reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 8
    names = reader.get_variable_to_shape_map()
    assert any("loss_scale_optimizer/dynamic_scale" in n for n in names)
    tiny_pretraining_run(tmp_path, output_dir, num_train_steps=12)  # and back to float32
    reader = tf.train.load_checkpoint(str(output_dir / "model.ckpt-12"))
    assert reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 12
    # Anything else that differs is still refused.
    with pytest.raises(CheckpointError, match="Cannot resume from .*model.ckpt-12"):
        tiny_pretraining_run(tmp_path, output_dir, num_train_steps=16, hidden_size=32)


def test_a_new_run_refuses_an_earlier_runs_evaluation_records(tmp_path):
    """No checkpoint to resume but an earlier run's records (its checkpoints deleted): the
    new run's would be judged against them and model.ckpt-best could stay the old weights."""
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    checkpointing.record_best(str(output_dir), 8, "masked_lm_accuracy", 0.9, "old/model.ckpt-8")
    with pytest.raises(CheckpointError, match="holds an earlier run's evaluation records"):
        tiny_pretraining_run(tmp_path, output_dir, num_train_steps=4)
    assert not list(output_dir.glob("model.ckpt-*"))
