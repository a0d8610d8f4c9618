"""run_pretraining.py killed with SIGKILL after its first checkpoint and rerun with the same
command finishes at num_train_steps with the weights of an uninterrupted run, bit for bit,
with dropout 0.1 (the dropout seed state is in the checkpoint)."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import synthetic_pretraining as synthetic
import tensorflow as tf

# Slow tier: kills a run_pretraining subprocess and resumes it (~75 s).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
NUM_STEPS = 40


def _command(data, config, output_dir):
    return [
        sys.executable,
        str(REPO / "run_pretraining.py"),
        f"--albert_config_file={config}",
        f"--input_file={data}",
        f"--output_dir={output_dir}",
        "--do_train",
        "--train_batch_size=8",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        f"--num_train_steps={NUM_STEPS}",
        "--num_warmup_steps=5",
        "--learning_rate=0.01",
        "--save_checkpoints_steps=4",
        "--keep_checkpoint_max=3",
        "--iterations_per_loop=1",
    ]


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))


def _checkpoint_values(output_dir):
    path = tf.train.latest_checkpoint(str(output_dir))
    reader = tf.train.load_checkpoint(path)
    keys = [k for k in reader.get_variable_to_shape_map() if not k.startswith("_CHECKPOINTABLE")]
    return path, {k: reader.get_tensor(k) for k in keys if "save_counter" not in k}


def test_killed_run_resumes_to_the_uninterrupted_result(tmp_path):
    data = synthetic.write_records(tmp_path / "train.tfrecord", 200, seed=5)
    config = synthetic.write_config(
        tmp_path / "config.json", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1
    )
    reference_dir, killed_dir = tmp_path / "reference", tmp_path / "killed"
    reference = subprocess.Popen(
        _command(data, config, reference_dir),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed = subprocess.Popen(
        _command(data, config, killed_dir),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 180
    while not (killed_dir / "checkpoint").exists() and killed.poll() is None:
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    interrupted_at = int(tf.train.latest_checkpoint(str(killed_dir)).rsplit("-", 1)[1])
    assert interrupted_at < NUM_STEPS, "the run ended before the kill; the test proved nothing"

    resumed = subprocess.run(
        _command(data, config, killed_dir), env=_env(), capture_output=True, text=True, timeout=240
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert reference.wait(timeout=240) == 0, reference.stderr.read()[-3000:]

    match = re.search(r"Resumed from \S+ at global step (\d+)", resumed.stderr)
    assert match and int(match.group(1)) == interrupted_at
    # The first step the resumed run reports is the one after the checkpoint: none counted twice.
    logged = [int(s) for s in re.findall(rf"step (\d+)/{NUM_STEPS}", resumed.stderr)]
    assert logged == list(range(interrupted_at + 1, NUM_STEPS + 1))

    reference_path, expected = _checkpoint_values(reference_dir)
    resumed_path, got = _checkpoint_values(killed_dir)
    assert Path(reference_path).name == Path(resumed_path).name == f"model.ckpt-{NUM_STEPS}"
    assert int(got["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == NUM_STEPS
    assert expected.keys() == got.keys()
    assert any(
        k.startswith("optimizer/") and k.endswith("_m/.ATTRIBUTES/VARIABLE_VALUE") for k in got
    )
    for key in expected:
        assert np.array_equal(expected[key], got[key]), key
    # Only keep_checkpoint_max checkpoints and their input states remain.
    assert len(list(killed_dir.glob("model.ckpt-*.index"))) == 3
    assert len(list((killed_dir / "input_state" / "worker_0").glob("*.index"))) == 3
