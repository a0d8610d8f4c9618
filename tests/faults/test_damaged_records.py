"""A record damaged in the middle of one of several pretraining shards, or of a fine-tuning
feature cache: the run stops with one line naming exactly that file (tf.data's own error,
"corrupted record at <offset>", names none)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
sys.path.insert(0, str(TESTS / "training"))
sys.path.insert(0, str(TESTS / "tasks"))

import synthetic_glue  # noqa: E402
import synthetic_pretraining  # noqa: E402

# Slow tier: training subprocesses (~15 s each).
pytestmark = pytest.mark.slow


def _flip_middle_byte(path):
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(path).write_bytes(bytes(data))


def _last_line(command):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 2, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    return process.stderr.strip().splitlines()[-1]


def test_pretraining_names_the_damaged_shard(tmp_path):
    shards = [
        synthetic_pretraining.write_records(tmp_path / f"train-{i}.tfrecord", 60, seed=i)
        for i in range(4)
    ]
    _flip_middle_byte(shards[2])
    line = _last_line(
        [
            sys.executable,
            str(REPO / "run_pretraining.py"),
            f"--albert_config_file={synthetic_pretraining.write_config(tmp_path / 'c.json')}",
            f"--input_file={tmp_path}/train-*.tfrecord",
            f"--output_dir={tmp_path / 'out'}",
            "--do_train",
            "--train_batch_size=8",
            "--max_seq_length=32",
            "--max_predictions_per_seq=5",
            "--num_train_steps=100",
            "--num_warmup_steps=2",
        ]
    )
    assert line.startswith(f"run_pretraining.py: error: {shards[2]} is damaged (corrupted ")
    assert line.endswith(
        ": remove it from --input_file or rebuild it with create_pretraining_data."
    )
    assert [shard for shard in shards if shard in line] == [shards[2]]


def test_fine_tuning_names_the_damaged_feature_cache(tmp_path):
    data_dir = synthetic_glue.write_sst2(tmp_path / "glue", num_train=200, num_dev=10)
    config = synthetic_glue.write_config(tmp_path / "config.json")

    def command(output_dir):
        return [
            sys.executable,
            str(REPO / "run_classifier.py"),
            *synthetic_glue.tiny_run_flags(data_dir, tmp_path / output_dir, config, "sst-2"),
            f"--spm_model_file={synthetic_glue.SPM_MODEL}",
            f"--cached_dir={tmp_path / 'cache'}",
            "--do_train",
            "--train_step=4",
            "--save_checkpoints_steps=4",
        ]

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    subprocess.run(command("first"), env=env, check=True, capture_output=True, timeout=300)
    (cache,) = (tmp_path / "cache").glob("*.tfrecord")
    _flip_middle_byte(cache)  # the same size: the cache's size check passes it
    line = _last_line(command("second"))
    assert line.startswith(f"run_classifier.py: error: {cache} is damaged (corrupted record ")
    assert line.endswith(
        ": delete it and rerun, which rebuilds the feature cache from the task's data."
    )
