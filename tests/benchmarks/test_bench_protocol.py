"""The training benchmark's protocol without models: the warm-up lock the rows share, and a
row that runs out of memory beside the others being run again alone (fake rows)."""

import argparse
import io
import json
import pathlib
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_training  # noqa: E402

HOLDER = """
import sys, time
sys.path.insert(0, sys.argv[1])
import bench_training
with bench_training.warmup_turn(sys.argv[2]):
    print(time.time(), flush=True)
    time.sleep(0.6)
    print(time.time(), flush=True)
"""


def test_rows_started_at_once_warm_up_one_at_a_time(tmp_path):
    lock = str(tmp_path / "warmup.lock")
    command = [sys.executable, "-c", HOLDER, str(ROOT / "benchmarks"), lock]
    holders = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    spans = sorted(tuple(map(float, h.communicate(timeout=60)[0].split())) for h in holders)
    assert all(h.returncode == 0 for h in holders)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end, spans  # no two rows inside their warm-up at once
    with bench_training.warmup_turn(None) as held:  # rows started one after the other
        assert held is None


def test_a_row_that_waits_too_long_for_its_turn_warms_up_beside_the_others(tmp_path):
    lock = str(tmp_path / "warmup.lock")
    with bench_training.warmup_turn(lock) as first:
        started = time.monotonic()
        with bench_training.warmup_turn(lock, wait_seconds=0.3) as second:
            waited = time.monotonic() - started
    assert first is True and second is False and 0.3 <= waited < 5
    with bench_training.warmup_turn(lock, wait_seconds=0.3) as third:  # released: its turn
        assert third is True


class FakeRow:
    """Stands in for `bench_training.Row`: keras_hub runs out of memory while another row is
    alive; every row steps in fixed times."""

    alive = set()
    name, is_auto, out_of_memory, key, package_missing, _log_tail = (
        bench_training.Row.name,
        bench_training.Row.is_auto,
        bench_training.Row.out_of_memory,
        bench_training.Row.key,
        bench_training.Row.package_missing,
        bench_training.Row._log_tail,
    )

    def __init__(self, which, label, precision, args, jit=-1, warmup_lock=None, clock=None):
        self.which, self.label, self.precision, self.jit = which, label, precision, jit
        self.times, self.error, self.peak_mib, self.rerun_alone = [], None, None, False
        self.warmed_up_alone = None
        self.started, self.build_seconds = time.monotonic(), None
        self.log, self.hungry = io.StringIO(), which == "keras_hub"
        FakeRow.alive.add(self)

    def read(self, timeout):
        if self.hungry and len(FakeRow.alive) > 1:
            self.log.write("jaxlib.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while\n")
            self.error = "skipped  (jaxlib.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of mem)"
            FakeRow.alive.discard(self)
            return None
        return {"ready": True}

    def step(self, timeout):
        self.times.append(0.5 if self.hungry else 1.0)
        return {"seconds": self.times[-1]}

    def finish(self, timeout=60):
        FakeRow.alive.discard(self)
        self.peak_mib = 100.0


def _args(**overrides):
    values = dict(
        config=str(ROOT / "albert/configs/albert_base_v2.json"),
        seq=16,
        batch=8,
        steps=4,
        device="cpu",
        precisions="bfloat16",
        ours_backend="tensorflow",
        parallel_start=1,
        deadline_seconds=0,
        settle_seconds=0,
        max_step_seconds=60,
        row_timeout=60,
        profile_dir=None,
        verbose=False,
        peak_tflops=None,
        turns_after_file=None,
    )
    values.update(overrides)
    return argparse.Namespace(**values)


def _config():
    with open(ROOT / "albert/configs/albert_base_v2.json") as f:
        return json.load(f)


@pytest.fixture
def fake_rows(monkeypatch):
    FakeRow.alive.clear()
    monkeypatch.setattr(bench_training, "Row", FakeRow)
    monkeypatch.setattr(bench_training, "auto_path", lambda device: ("bfloat16", False, "test"))
    planned = [
        ("ours", "ours (Trainer, LAMB, no XLA)", "bfloat16", 0),
        ("keras_hub", "keras-hub AlbertMaskedLM (no XLA)", "bfloat16", 0),
    ]
    monkeypatch.setattr(bench_training, "planned_rows", lambda args: planned)


def test_a_row_out_of_memory_beside_the_others_runs_again_alone(fake_rows, capsys):
    assert bench_training.compare(_args(), _config())  # every row has a figure
    out = capsys.readouterr().out
    assert "keras-hub AlbertMaskedLM (no XLA) bfloat16: out of memory beside the others" in out
    table = out[out.index("implementation") :]
    assert "ours (Trainer, LAMB, no XLA) *" in table
    line = next(x for x in table.splitlines() if x.startswith("keras-hub"))
    assert "16.00" in line and "(alone: out of memory beside the others)" in line
    assert "best ours / best peer: 0.50x" in out
    assert "paired by turn" not in out  # its steps took no turns beside ours'


def test_a_row_out_of_memory_alone_is_not_run_again(fake_rows, monkeypatch, capsys):
    monkeypatch.setattr(
        bench_training, "planned_rows", lambda args: [("keras_hub", "kh", "bfloat16", 0)]
    )
    FakeRow.alive.add("another process")  # out of memory even without another row
    assert not bench_training.compare(_args(), _config())  # a row without a figure
    out = capsys.readouterr().out
    assert "again alone" not in out and "RESOURCE_EXHAUSTED" in out


def test_a_row_whose_package_is_missing_is_no_failure(fake_rows, monkeypatch, capsys):
    def read(row, timeout):
        if row.which == "keras_hub":
            row.log.write("ModuleNotFoundError: No module named 'keras_hub'\n")
            row.error = "skipped  (ModuleNotFoundError: No module named 'keras_hub')"
            return None
        return {"ready": True}

    monkeypatch.setattr(FakeRow, "read", read)
    assert bench_training.compare(_args(), _config())
    assert "skipped  (ModuleNotFoundError" in capsys.readouterr().out


def test_rows_that_built_but_took_no_turn_say_so_and_fail(fake_rows, monkeypatch, capsys):
    monkeypatch.setattr(bench_training, "take_turns", lambda rows, args, clock: 0)
    assert not bench_training.compare(_args(), _config())
    out = capsys.readouterr().out
    table = out[out.index("implementation") :]
    line = next(x for x in table.splitlines() if x.startswith("ours"))
    assert line.split()[-4:] == ["no", "step", "within", "--deadline_seconds"]
    assert "None" not in table


def test_turns_wait_for_the_file_then_start(fake_rows, monkeypatch, tmp_path, capsys):
    signal = tmp_path / "loss_check_done"
    waited = []

    def sleep(seconds):
        waited.append(seconds)
        signal.write_text("0")  # the loss check ends while the turns wait

    monkeypatch.setattr(bench_training.time, "sleep", sleep)
    assert bench_training.compare(_args(turns_after_file=str(signal)), _config())
    assert waited[0] == 0.5 and waited.count(0.5) == 1  # one poll, then the turns
    assert "went on at the deadline" not in capsys.readouterr().out


def test_turns_go_on_without_the_file_when_the_deadline_nears(tmp_path):
    clock = bench_training.Clock(10)  # under the 20 s the turns keep for themselves
    assert not bench_training.wait_for_file(str(tmp_path / "never"), clock)
    (tmp_path / "there").write_text("")
    assert bench_training.wait_for_file(str(tmp_path / "there"), clock)


def test_paired_ratio_cancels_a_slow_spell_that_the_medians_keep():
    # The peer is 1.2x slower throughout. The machine turns 1.5x slower between ours' and the
    # peer's step of turn 4, and stays so: ours has 4 slow steps, the peer 3.
    ours = [1.0, 1.0, 1.0, 1.5, 1.5, 1.5, 1.5]
    peer = [1.2, 1.2, 1.2, 1.2, 1.8, 1.8, 1.8]
    assert sorted(peer)[3] / sorted(ours)[3] == pytest.approx(0.8)  # medians: "ours slower"
    low, middle, high = bench_training.quartiles(bench_training.paired_ratios(ours, peer))
    assert middle == pytest.approx(1.2) and low == pytest.approx(1.2)
    assert bench_training.quartiles([1, 2, 3, 4, 5]) == (2, 3, 4)


def test_rows_on_a_gpu_share_a_compilation_cache_a_rerun_row_too(monkeypatch, tmp_path):
    envs = []

    def popen(command, env=None, **kwargs):
        envs.append(env)
        return None

    monkeypatch.setattr(bench_training.subprocess, "Popen", popen)
    args = _args(device="gpu", compile_cache=str(tmp_path))
    bench_training.Row("keras_hub", "kh", "bfloat16", args, warmup_lock=str(tmp_path / "lock"))
    bench_training.Row("keras_hub", "kh", "bfloat16", args)  # run again alone: no lock
    bench_training.Row("ours", "ours", "bfloat16", _args(compile_cache=str(tmp_path)))  # CPU
    assert [env.get("JAX_COMPILATION_CACHE_DIR") for env in envs] == [str(tmp_path)] * 2 + [None]


def test_the_pytorch_row_hands_back_its_cached_memory_before_it_says_ready(monkeypatch, capsys):
    events = []

    class Cuda:
        @staticmethod
        def is_initialized():
            return True

        @staticmethod
        def empty_cache():
            events.append("empty_cache")

    monkeypatch.setitem(sys.modules, "torch", argparse.Namespace(cuda=Cuda))
    monkeypatch.setitem(
        bench_training.RUNNERS, "hf", lambda args, config: lambda: events.append("step")
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.setattr(bench_training, "gpu_peak_mib", lambda: None)
    args = argparse.Namespace(one="hf", warmup_lock=None, warmup_wait_seconds=0)
    bench_training.serve(args, _config())
    assert events == ["step"] * bench_training.WARMUP_STEPS + ["empty_cache"]
    assert '"ready": true' in capsys.readouterr().out
    Cuda.is_initialized = staticmethod(lambda: False)  # PyTorch never touched the GPU
    events.clear()
    bench_training.serve(args, _config())
    assert events == ["step"] * bench_training.WARMUP_STEPS
