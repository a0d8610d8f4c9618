"""Smoke test of the training benchmark's turn-taking protocol on the tiny config (the
numbers themselves are for people to read, not for tests to time)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from albert import configs

# Slow tier: the training benchmark's smoke run on a tiny model (~20 s).
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_bench_training_reports_a_row_per_precision_on_a_tiny_model(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("ALBERT_CPU_XLA", None)  # the benchmark marks the real default of such a CPU
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_training.py")]
    command += [f"--config={configs.path('albert_tiny')}", "--seq=32", "--batch=2"]
    command += ["--rows=ours", "--precisions=float32", "--steps=2", "--verbose"]
    # A TensorFlow row answers the profile command with nothing; the table still follows.
    command += [f"--profile_dir={tmp_path}", "--deadline_seconds=500"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    # The suite's CPU has no bf16 units (tests/conftest.py): float32 with XLA is the default.
    row = re.search(r"ours \(Trainer, LAMB, XLA\) \*\s+float32\s+([\d.]+)\s+(\d+) MiB", done.stdout)
    assert row, done.stdout
    assert float(row.group(1)) > 0 and int(row.group(2)) > 100
    assert re.search(
        r"built and warmed up in: ours \(Trainer, LAMB, XLA\) float32 \d+ s", done.stdout
    )
    assert "ms of device time" not in done.stdout
    assert "* run_pretraining.py's default here (auto precision: CPU without" in done.stdout
    lines = done.stdout.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("ours (Trainer"))
    assert len(lines[index - 1].split()) == 2, done.stdout  # --verbose: one time per turn
