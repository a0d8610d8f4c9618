"""run_squad and run_race with every path on `ram://` (a non-local TensorFlow filesystem, as
gs:// is on a pod; per-process, so the runs are library calls): they train, evaluate and
predict end to end, and nothing lands on the local disk, not even in a temporary folder
left behind. (run_classifier: tests/faults/test_output_dir_rerun.py.)"""

import sys
import tempfile
from pathlib import Path

import pytest
import tensorflow as tf

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "tasks"))

import synthetic_glue as synthetic  # noqa: E402
import test_race_task  # noqa: E402
import test_squad_task  # noqa: E402

# Slow tier: fine-tunes SQuAD and RACE end to end (~15 s).
pytestmark = pytest.mark.slow


def _to_ram(local, remote):
    """Copies a local file or folder tree to `remote` on ram://; returns `remote`."""
    local = Path(local)
    for path in [local] if local.is_file() else sorted(local.rglob("*")):
        if path.is_file():
            target = remote if path == local else f"{remote}/{path.relative_to(local)}"
            tf.io.gfile.makedirs(target.rsplit("/", 1)[0])
            tf.io.gfile.copy(str(path), target, overwrite=True)
    return remote


@pytest.fixture
def ram_inputs(tmp_path, monkeypatch):
    """Inputs written locally under tmp_path/in, copied to ram://; a local scratch folder for
    anything the run might write to the local disk (the working directory and the
    temporary folder) that must stay empty."""
    root = f"ram://{tmp_path.name}"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.chdir(scratch)  # a local "ram:" folder would land here
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    (tmp_path / "in").mkdir()
    config = _to_ram(synthetic.write_config(tmp_path / "in" / "config.json"), f"{root}/config.json")
    spm = _to_ram(synthetic.SPM_MODEL, f"{root}/tiny.model")
    yield root, tmp_path / "in", config, spm
    # Nothing written to the local disk but AutoGraph's own converted-code files, which
    # TensorFlow writes into the temporary folder whatever the paths.
    written = [p.name for p in scratch.rglob("*")]
    assert [n for n in written if not n.startswith("__autograph_generated_file")] == []


def test_squad_on_ram_end_to_end(ram_inputs):
    root, local, config, spm = ram_inputs
    train = _to_ram(
        test_squad_task.write_marker_squad(local / "train.json", 40, 0), f"{root}/squad/train.json"
    )
    dev = _to_ram(
        test_squad_task.write_marker_squad(local / "dev.json", 9, 1), f"{root}/squad/dev.json"
    )
    output_dir = f"{root}/out_squad"
    metrics, _ = test_squad_task.run_squad(
        *test_squad_task.tiny_flags(config, output_dir, train, dev),
        f"--spm_model_file={spm}",
        f"--cached_dir={root}/cache",
        "--train_step=4",
        "--save_checkpoints_steps=2",
        "--do_train",
        "--do_eval",
        "--do_predict",
    )
    assert metrics["global_step"] in (2, 4) and 0.0 <= metrics["f1"] <= 100.0
    for name in (
        "model.ckpt-4.index",
        "model.ckpt-best.index",
        "eval_results.txt",
        "predictions.json",
        "nbest_predictions.json",
    ):
        assert tf.io.gfile.exists(f"{output_dir}/{name}"), name
    assert tf.io.gfile.glob(f"{root}/cache/squad_predict_*.tfrecord")
    assert not tf.io.gfile.exists(f"{output_dir}/run.lock")


def test_race_on_ram_end_to_end(ram_inputs):
    root, local, config, spm = ram_inputs
    data = test_race_task.write_race(local / "race", {"train": 8, "dev": 5, "test": 3}, seed=0)
    data_dir = _to_ram(data, f"{root}/race")
    output_dir = f"{root}/out_race"
    # No --cached_dir: each split's feature cache is written to output_dir/features.
    metrics, _ = test_race_task.run_race(
        f"--spm_model_file={spm}",
        f"--data_dir={data_dir}",
        f"--albert_config_file={config}",
        f"--output_dir={output_dir}",
        "--max_seq_length=32",
        "--max_qa_length=10",
        "--train_batch_size=4",
        "--eval_batch_size=3",
        "--predict_batch_size=2",
        "--learning_rate=1e-3",
        "--warmup_step=1",
        "--train_step=4",
        "--save_checkpoints_steps=2",
        "--iterations_per_loop=2",
        "--do_train",
        "--do_eval",
        "--do_predict",
    )
    assert metrics["global_step"] in (2, 4) and 0.0 <= metrics["accuracy"] <= 1.0
    for name in (
        "model.ckpt-4.index",
        "model.ckpt-best.index",
        "eval_results.txt",
        "predictions.json",
        "predict_results.txt",
    ):
        assert tf.io.gfile.exists(f"{output_dir}/{name}"), name
    written = tf.io.gfile.glob(f"{output_dir}/features/*.tfrecord")
    assert sorted(Path(p).name.split("_")[1] for p in written) == ["dev", "test", "train"]
