"""The JAX pretraining step of the GPU check (benchmarks/jax_pretraining.py) against
TensorFlow's Trainer, the engine of run_pretraining.py: same losses from the same weights,
batches and optimizer, and the stored reference the GPU check compares with is current."""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_loss_check  # noqa: E402
import jax_pretraining  # noqa: E402

STORED = json.loads(pathlib.Path(gpu_loss_check.REFERENCE_FILE).read_text())["losses"]


@pytest.mark.slow  # five Trainer steps (~5 s)
def test_stored_reference_is_what_the_trainer_computes_now():
    keras.mixed_precision.set_dtype_policy("float32")
    losses = gpu_loss_check.tensorflow_losses(gpu_loss_check.tiny_config(), len(STORED))
    assert np.max(np.abs(np.array(losses) - STORED)) < 1e-5
    assert losses[-1] < losses[0]  # the five steps learn


def test_learnable_batches_are_deterministic_and_well_formed():
    first, second = (jax_pretraining.learnable_batches(99, 3, 7, seed=1) for _ in range(2))
    for a, b in zip(first, second, strict=True):
        assert all(np.array_equal(a[name], b[name]) for name in a)
    batch = first[0]
    assert batch["input_ids"].shape == (7, jax_pretraining.LEARNABLE_SEQ)
    rows = np.arange(7)[:, None]
    # The masked token is its left neighbour plus one (the sequences count up).
    left = batch["input_ids"][rows, batch["masked_lm_positions"] - 1]
    masked = batch["masked_lm_positions"]
    adjacent = np.diff(masked, axis=1, prepend=-1) == 1  # left neighbour masked too
    after_cls = masked == 1  # [CLS] is 2 whatever the start
    assert np.all((batch["masked_lm_ids"] == left + 1) | adjacent | after_cls)
    assert np.all(batch["input_ids"][rows, masked] == 4)


@pytest.mark.slow
def test_jax_step_matches_the_trainer():
    pytest.importorskip("jax")
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); import gpu_loss_check as g; "
        f"print(json.dumps(g.jax_losses(g.tiny_config(), {len(STORED)}, 'cpu')))"
    )
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    losses = json.loads(done.stdout.strip().splitlines()[-1])
    assert np.max(np.abs(np.array(losses) - STORED)) < 1e-4
