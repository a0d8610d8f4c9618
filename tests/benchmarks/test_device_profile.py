"""benchmarks/device_profile.py: device time by kind of op from a jax.profiler trace, and the
training benchmark's deadline (the GPU check must finish in its 4 minutes)."""

import gzip
import json
import os
import pathlib
import subprocess
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_training  # noqa: E402
import device_profile  # noqa: E402


def _gpu_trace():
    """A trace shaped like jax.profiler's on a GPU: a host process, and the GPU's process with
    two kernel streams and an "XLA Ops" line that repeats the kernels' time."""

    def meta(pid, tid, kind, name):
        event = {"ph": "M", "pid": pid, "name": kind, "args": {"name": name}}
        return event if tid is None else dict(event, tid=tid)

    def op(pid, tid, name, dur, **args):
        return {"ph": "X", "pid": pid, "tid": tid, "ts": 0, "dur": dur, "name": name, "args": args}

    events = [
        meta(1, None, "process_name", "/host:CPU"),
        meta(1, 10, "thread_name", "python"),
        meta(2, None, "process_name", "/device:GPU:0"),
        meta(2, 7, "thread_name", "Stream #7(Compute)"),
        meta(2, 8, "thread_name", "Stream #8(MemcpyH2D)"),
        meta(2, 99, "thread_name", "XLA Ops"),
        op(1, 10, "PjitFunction(step)", 50_000),
        op(2, 7, "sm90_xmma_gemm_bf16bf16_bf16f32", 3000, hlo_op="custom-call.3"),
        op(2, 7, "nvjet_hsh_128x256", 1000, hlo_op="custom-call.9"),
        op(2, 7, "loop_multiply_fusion.12", 500, hlo_op="fusion.12"),
        op(2, 7, "loop_multiply_fusion.13", 300, hlo_op="fusion.13"),
        op(2, 7, "input_reduce_fusion.2", 400, hlo_op="fusion.2"),
        op(2, 7, "transpose_kernel", 600),
        op(2, 8, "MemcpyH2D", 200),
        op(2, 7, "scatter_kernel", 100, long_name="scatter.1 = f32[30000,128] scatter(...)"),
        op(2, 7, "mystery", 100),
        op(2, 99, "custom-call.3", 3000),  # the same time again, grouped by HLO op
    ]
    return {"traceEvents": events}


def test_summary_counts_the_gpu_streams_once_by_kind_per_step():
    summary = device_profile.summarize(_gpu_trace(), steps=2)
    # 6.2 ms of kernels over 2 steps; the host's 50 ms and the "XLA Ops" copy are not counted.
    assert summary["device_ms_per_step"] == pytest.approx(3.1)
    assert summary["kinds"] == {
        "matmul": 2.0,
        "copy/transpose": 0.4,
        "elementwise fusion": 0.4,
        "reduce": 0.2,
        "gather/scatter": 0.05,
        "other": 0.05,
    }
    top = summary["top"]
    assert top[0] == ["sm90_xmma_gemm_bf16bf16_bf16f32", 1.5, 0.5]
    assert ["loop_multiply_fusion", 0.4, 1.0] in top  # fusion.12 and .13: one kind of op
    lines = device_profile.summary_lines("ours", summary)
    assert lines[0] == "ours: 3.1 ms of device time per step"
    assert lines[1].startswith("  matmul 2.0, ") and "reduce 0.2" in lines[1]


def test_the_turns_stop_before_the_deadline():
    class FakeRow:
        error, times = None, []

        def step(self, timeout):
            now[0] += 10.0

    now = [0.0]
    clock = types.SimpleNamespace(now=lambda: now[0], left=lambda: 65.0 - now[0])
    args = types.SimpleNamespace(steps=10, max_step_seconds=120, settle_seconds=0)
    # Turns of 20 s (two rows of 10 s) in 65 s: after two turns 25 s are left, under 1.5 turns.
    assert bench_training.take_turns([FakeRow(), FakeRow()], args, clock) == 2
    now[0] = 0.0
    unbounded = types.SimpleNamespace(now=lambda: now[0], left=lambda: float("inf"))
    assert bench_training.take_turns([FakeRow()], args, unbounded) == 10


_PROFILE_A_JAX_STEP = """
import json, sys
import jax, jax.numpy as jnp
import bench_training

@jax.jit
def train_step(x):
    return jnp.tanh(x @ x).sum()

@jax.jit
def other(x):
    return x + 1

x = jnp.ones((256, 256))
step = lambda: train_step(other(x)).block_until_ready()
step()
print("SUMMARY " + json.dumps(bench_training.profile_row(step, sys.argv[1])))
"""


@pytest.mark.slow
def test_a_jax_row_profiles_its_steps_on_this_cpu(tmp_path):
    # What a JAX row does on the bench's "profile" command, with a real jax.profiler trace (of
    # XLA's CPU ops here; of the GPU's kernels on a GPU, as the GPU-shaped trace above).
    pytest.importorskip("jax")
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(ROOT / "benchmarks"))
    folder = str(tmp_path / "row")
    env["XLA_FLAGS"] = device_profile.dump_flags(folder)  # as bench_training sets for the row
    command = [sys.executable, "-c", _PROFILE_A_JAX_STEP, folder]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    # One file each to read without the rest: the step's optimized HLO and the trace.
    assert device_profile.keep_for_reading(folder) == [
        folder + ".hlo.txt.gz",
        folder + ".trace.json.gz",
    ]
    with gzip.open(folder + ".hlo.txt.gz", "rt") as f:
        hlo = f.read()
    assert "HloModule jit_train_step" in hlo and "tanh" in hlo
    assert not list(tmp_path.glob("row/xla_dump/*jit_other*.txt"))  # only the step's HLO
    with gzip.open(folder + ".trace.json.gz") as f:
        assert json.load(f)["traceEvents"]
    line = next(x for x in done.stdout.splitlines() if x.startswith("SUMMARY "))
    summary = json.loads(line[len("SUMMARY ") :])
    assert summary["device_ms_per_step"] > 0, summary
    assert sum(summary["kinds"].values()) == pytest.approx(summary["device_ms_per_step"], 0.01)
    assert summary["top"] and list(tmp_path.glob("**/perfetto_trace.json.gz"))
    # Rows on other backends answer None (TensorFlow's and PyTorch's profilers are not wired).
    env["KERAS_BACKEND"] = "tensorflow"
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert "SUMMARY null" in done.stdout, done.stderr[-2000:]
