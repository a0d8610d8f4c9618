"""The CPU-only parts of the GPU check (benchmarks/gpu_check.sh): the FLOPs formula, the bf16
peak table, the loss comparison, and --device=gpu refusing a machine without a GPU."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

from albert import configs

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_loss_check  # noqa: E402
import machine  # noqa: E402
import profile_training  # noqa: E402


def _config(name):
    with open(configs.path(name)) as f:
        return json.load(f)


def test_model_flops_counts_every_matmul_of_a_tiny_model_by_hand():
    config = _config("albert_tiny")  # E 32, H 64, I 128, L 4, V 1000
    seq, batch, predictions = 8, 3, 2
    layer = 2 * seq * (4 * 64 * 64 + 2 * 64 * 128) + 4 * seq * seq * 64
    forward = 2 * seq * 32 * 64 + 4 * layer + 2 * predictions * (64 * 32 + 32 * 1000) + 2 * 64 * 64
    assert machine.model_flops(config, batch, seq, predictions) == 3 * batch * forward


def test_model_flops_credit_the_whole_last_layer():
    config = _config("albert_base_v2")
    # With every position predicted, our gathered last layer does the whole model's work.
    whole = machine.model_flops(config, 32, 512, 511)
    assert whole == profile_training.training_flops(config, 32, 512, 511)
    assert machine.model_flops(config, 32, 512, 20) > profile_training.training_flops(
        config, 32, 512, 20
    )
    # ALBERT-base, seq 512, batch 32: 6 x 85M x 16,384 tokens = 8.4 TFLOP (85M: the matmul
    # weights the 12 layers run, shared or not) + 0.9 for attention's scores and context.
    assert 9.0e12 < machine.model_flops(config, 32, 512, 20) < 9.6e12


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H100 80GB HBM3", 989),
        ("NVIDIA H200", 989),
        ("NVIDIA A100-SXM4-40GB", 312),
        ("NVIDIA L4", 121),
        ("Tesla T4", None),
        (None, None),
    ],
)
def test_bf16_peak_by_card_name(name, peak):
    assert machine.peak_tflops(name) == peak


def test_mfu_text():
    # 1 TFLOP per step of 32 sequences at 320 seq/s = 10 TFLOP/s of 1000.
    assert machine.mfu_percent(1e12, 320.0, 32, 1000) == "1.0%"
    assert machine.mfu_percent(1e12, 320.0, 32, None) == "n/a"


def test_gpu_peak_memory_of_whichever_framework_holds_the_card(monkeypatch):
    import types

    device = lambda platform, peak: types.SimpleNamespace(  # noqa: E731
        platform=platform, memory_stats=lambda: {"peak_bytes_in_use": peak}
    )
    jax = types.SimpleNamespace(devices=lambda: [device("gpu", 3 * 2**30)])
    cuda = types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, max_memory_allocated=lambda: 2**30
    )
    for name in ("jax", "torch", "tensorflow"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert machine.gpu_peak_mib() is None  # none of them imported
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert machine.gpu_peak_mib() == 1024
    monkeypatch.setitem(sys.modules, "jax", jax)
    assert machine.gpu_peak_mib() == 3 * 1024
    monkeypatch.setitem(
        sys.modules, "jax", types.SimpleNamespace(devices=lambda: [device("cpu", 5)])
    )
    assert machine.gpu_peak_mib() == 1024  # JAX on the CPU only: not a GPU figure


def test_loss_comparison_within_and_outside_bf16_tolerance():
    reference = [7.60, 7.58, 7.55, 7.50, 7.41, 7.30]
    close = [7.62, 7.57, 7.58, 7.49, 7.43]
    assert all(ok for *_, ok in gpu_loss_check.compare_losses(reference, close, 5))
    far = [7.60, 7.58, 8.10, 7.50, 7.41]
    rows = gpu_loss_check.compare_losses(reference, far, 5)
    assert [ok for *_, ok in rows] == [True, True, False, True, True]
    assert rows[2][:3] == (3, 7.55, 8.10)
    with pytest.raises(ValueError, match="need 5 losses"):
        gpu_loss_check.compare_losses(reference, close[:3], 5)


def test_loss_falls():
    falling = [7.5] * 5 + [6.5] * 20 + [5.5] * 20
    assert gpu_loss_check.loss_falls(falling, 0.8)
    assert not gpu_loss_check.loss_falls(falling, 0.7)
    assert not gpu_loss_check.loss_falls([7.5] * 45, 0.8)
    assert not gpu_loss_check.loss_falls(falling[:10], 0.8)  # too few steps to tell


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_device_gpu_without_a_gpu_says_so():
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_training.py"), "--device=gpu"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert done.returncode == 1
    assert "--device=gpu: nvidia-smi finds no NVIDIA GPU here." in done.stderr


@pytest.mark.slow
def test_gpu_check_keeps_within_its_budget_when_every_part_overruns(tmp_path):
    # Stand-ins: nvidia-smi names an H100; "python" runs the loss check and both benchmarks as
    # processes that never end on their own. The script must still end within its budget.
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559 MiB'\n")
    # A benchmark given --profile_dir leaves a row's kept file there before it hangs.
    (tmp_path / "python").write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case $a in --profile_dir=*) d=${a#*=}; mkdir -p "$d/row/deep"; '
        'echo x > "$d/row.hlo.txt.gz"; echo x > "$d/row/deep/trace.pb";; esac; done\n'
        'case "$*" in *.py*) echo "ran $*" >> "$CALLS"; exec sleep 1000;; esac\n'
    )
    for stub in ("nvidia-smi", "python"):
        (tmp_path / stub).chmod(0o755)
    calls = tmp_path / "calls"
    env = dict(
        os.environ,
        PATH=f"{tmp_path}:{os.environ['PATH']}",
        PYTHON=str(tmp_path / "python"),
        GPU_CHECK_SECONDS="21",
        GPU_CHECK_PROFILE="1",
        CALLS=str(calls),
        OUT=str(tmp_path / "out"),
    )
    env.pop("KERAS_BACKEND", None)
    start = time.monotonic()
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 1, done.stdout + done.stderr  # every part timed out
    assert elapsed < 26, done.stdout
    ran = sorted(calls.read_text().splitlines(), key=lambda call: "gpu_loss_check" not in call)
    assert len(ran) == 3 and "gpu_loss_check.py --steps=200" in ran[0], ran
    # The loss check runs beside the first benchmark with half the budget (10 s). The
    # benchmarks split the budget, 10-11 s each (by whole seconds of the clock), and are told
    # 7/8 of it as their deadline; their turns wait for the loss check's end.
    assert "albert_base_v2.json" in ran[1] and "albert_large_v2.json" in ran[2]
    deadlines = [int(re.search(r"--deadline_seconds=(\d+)", call)[1]) for call in ran[1:]]
    assert all(8 <= deadline <= 10 for deadline in deadlines), deadlines
    assert all("--turns_after_file=" in call for call in ran[1:])
    assert re.search(r"--profile_dir=\S+/albert_base_v2", ran[1])
    assert "--profile_dir" not in ran[2]
    assert "gpu_check: the loss check (beside the ALBERT-base builds):" in done.stdout
    # The kept files come back from the device call: one folder down in $OUT, nothing deeper.
    kept = sorted(p.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("*"))
    assert kept == [pathlib.Path("gpu_profile"), pathlib.Path("gpu_profile/row.hlo.txt.gz")]
    assert "gpu_check: " in done.stdout and "in all (budget 21 s)" in done.stdout
