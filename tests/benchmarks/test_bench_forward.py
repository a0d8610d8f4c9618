"""The forward benchmark's choice of rows and ratio lines, without models."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_forward  # noqa: E402


def test_ours_runs_each_precision_with_and_without_xla():
    ours = {(p, jit) for _, which, p, jit in bench_forward.ROWS if which == "ours"}
    assert ours == {("float32", True), ("float32", False), ("bfloat16", True), ("bfloat16", False)}


def test_the_default_is_the_entry_points_choice_for_this_cpu(monkeypatch):
    monkeypatch.setenv("ALBERT_CPU_FLAGS", "avx2 fma avx512_bf16")
    monkeypatch.delenv("ALBERT_CPU_XLA", raising=False)
    assert bench_forward.auto_path()[:2] == ("bfloat16", False)
    monkeypatch.setenv("ALBERT_CPU_FLAGS", "avx2 fma")
    assert bench_forward.auto_path()[:2] == ("float32", True)


def test_ratio_lines_take_the_best_of_ours_and_name_the_default():
    results = {
        ("ours", "float32", True): 3.0,
        ("ours", "float32", False): 2.0,
        ("ours", "bfloat16", True): 2.5,
        ("ours", "bfloat16", False): 6.0,
        ("hf", "float32", False): 2.4,
        ("hf", "bfloat16", False): 5.0,
    }
    lines = bench_forward.ratio_lines(results, ("ours", "bfloat16", False))
    assert lines == [
        "best ours / HF, float32: 1.25x",
        "best ours / HF, bfloat16: 1.20x",
        "default ours (*) / best HF: 1.20x",
    ]
    # A precision without an HF figure gets no line; nor does a default that did not run.
    del results[("hf", "bfloat16", False)], results[("ours", "bfloat16", False)]
    assert bench_forward.ratio_lines(results, ("ours", "bfloat16", False)) == [
        "best ours / HF, float32: 1.25x"
    ]
