"""run_pretraining.py and run_classifier.py SIGKILLed at fixed points (ALBERT_FAULT_POINT) and
rerun with the same command end bit-identical to an uninterrupted run, with dropout 0.1.

Each killed directory is killed several times in a row, one point per attempt: pretraining
after a training step (nothing saved since the last checkpoint) and during a checkpoint write
(the input state written, the checkpoint not committed); fine-tuning, which shares that loop,
during a checkpoint write and between a save and its evaluation; then a last rerun finishes.
Reference and killed runs go in parallel (two cores).
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
sys.path.insert(0, str(TESTS / "training"))
sys.path.insert(0, str(TESTS / "tasks"))

import synthetic_glue  # noqa: E402
import synthetic_pretraining  # noqa: E402

from albert.training.checkpointing import read_key_values  # noqa: E402

# Slow tier: kills training subprocesses at each fault point and resumes them (~2 min).
pytestmark = pytest.mark.slow

DROPOUT = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
KILLED = -9  # the return code of a process ended by SIGKILL


def _env(fault=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    env.pop("ALBERT_FAULT_POINT", None)
    if fault:
        env["ALBERT_FAULT_POINT"] = fault
    return env


def _start(command, fault=None):
    return subprocess.Popen(
        command, env=_env(fault), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _finish(process, expected_code=0):
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == expected_code, stderr[-3000:]
    return stderr


def _kill_then_finish(command, faults):
    """Runs `command` once per fault point (each must die by SIGKILL), then to the end."""
    for fault in faults:
        stderr = _finish(_start(command, fault), KILLED)
        assert f"ALBERT_FAULT_POINT={fault}: killing this process" in stderr
    return _finish(_start(command))


def _values(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    keys = [k for k in reader.get_variable_to_shape_map() if not k.startswith("_CHECKPOINTABLE")]
    return {k: reader.get_tensor(k) for k in keys if "save_counter" not in k}


def _assert_identical(expected_prefix, got_prefix):
    expected, got = _values(expected_prefix), _values(got_prefix)
    assert expected.keys() == got.keys()
    for key in expected:
        assert np.array_equal(expected[key], got[key]), key


def _eval_scalars(directory):
    """{(step, tag): value} over every event file (one per process) under `directory`."""
    values = {}
    for path in sorted(Path(directory).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                values[(event.step, value.tag)] = float(tf.make_ndarray(value.tensor))
    return values


def test_pretraining_killed_at_each_point_resumes_bit_identical(tmp_path):
    data = synthetic_pretraining.write_records(tmp_path / "train.tfrecord", 200, seed=5)
    config = synthetic_pretraining.write_config(tmp_path / "config.json", **DROPOUT)

    def command(output_dir):
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
            "--num_train_steps=24",
            "--num_warmup_steps=3",
            "--learning_rate=0.01",
            "--save_checkpoints_steps=4",
            "--keep_checkpoint_max=2",
            "--iterations_per_loop=2",
            # XLA, as GPUs and TPUs train by default (the suite's runs leave it off on CPU):
            # the dropout masks of a resumed run come from the same restored random state.
            "--jit_compile",
        ]

    reference = _start(command(tmp_path / "reference"))
    stderr = _kill_then_finish(
        command(tmp_path / "killed"), ["train_step:6", "checkpoint_write:12"]
    )
    _finish(reference)
    assert "Resumed from" in stderr and "model.ckpt-8 at global step 8" in stderr
    _assert_identical(
        tmp_path / "reference" / "model.ckpt-24", tmp_path / "killed" / "model.ckpt-24"
    )
    assert any(k.startswith("rng/") for k in _values(tmp_path / "killed" / "model.ckpt-24"))


# A kill after a training step is the pretraining test's: the loop is the same.
@pytest.mark.parametrize("faults", [("checkpoint_write:10", "before_eval:15")])
def test_classifier_killed_at_each_point_resumes_bit_identical(tmp_path, faults):
    data_dir = synthetic_glue.write_sst2(tmp_path / "glue", num_train=64, num_dev=20, num_test=3)
    config = synthetic_glue.write_config(tmp_path / "config.json")

    def command(output_dir):
        flags = synthetic_glue.tiny_run_flags(data_dir, output_dir, config, "sst-2")
        return [
            sys.executable,
            str(REPO / "run_classifier.py"),
            *flags,
            f"--spm_model_file={synthetic_glue.SPM_MODEL}",
            "--albert_dropout_prob=0.1",
            "--classifier_dropout_prob=0.1",
            "--train_step=20",
            "--save_checkpoints_steps=5",
            "--iterations_per_loop=1",
            "--keep_checkpoint_max=2",
            "--do_train",
            "--do_eval",
        ]

    reference_dir, killed_dir = tmp_path / "reference", tmp_path / "killed"
    reference = _start(command(reference_dir))
    stderr = _kill_then_finish(command(killed_dir), faults)
    _finish(reference)
    # The checkpoint of step 15 was saved but not evaluated when the run died: the rerun
    # evaluates it before it trains on.
    assert "model.ckpt-15, saved but not evaluated" in stderr
    for name in ("model.ckpt-20", "model.ckpt-best"):
        _assert_identical(reference_dir / name, killed_dir / name)
    expected_evals = _eval_scalars(reference_dir / "eval")
    assert sorted({step for step, _ in expected_evals}) == [5, 10, 15, 20]
    assert _eval_scalars(killed_dir / "eval") == expected_evals
    for name in ("best_checkpoint.txt", "eval_results.txt"):
        expected = read_key_values(reference_dir / name)
        got = read_key_values(killed_dir / name)
        for values in (expected, got):
            values.update({k: Path(v).name for k, v in values.items() if "/" in v})
        assert got == expected, name
