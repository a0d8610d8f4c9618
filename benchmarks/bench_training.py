"""Pretraining-step throughput (MLM + SOP, forward + backward + update) beside peers.

    python benchmarks/bench_training.py [--config=albert/configs/albert_base_v2.json] [--seq=128]
        [--batch=8] [--steps=10] [--rows=ours,hf,keras_hub]

Each row runs in its own subprocess. They are started one after the other (on a GPU, all at
once, but each compiles and warms up alone, so that XLA's autotuning times its kernels on a
quiet card), then take turns one step at a time, `--steps` rounds, so that a slow spell of
a shared machine hits every row alike; each row reports the median of its step times.
A row that ran out of memory beside the others is run again alone once they have quit, and
marked so (on a GPU, JAX rows share a compilation cache, so a rerun does not compile again, and
the PyTorch row hands back its cached memory after warming up):
- ours: `albert.training.steps.Trainer` (the engine run_pretraining.py uses: LAMB, global-norm
  clipping, MLM gathered at 20 positions + SOP), one step per host call: float32 with XLA,
  bfloat16 with and without XLA (`--ours_paths=all` adds float32 without). The row marked `*`
  is what run_pretraining.py runs here by default (the `auto` choice of
  `albert.training.hardware`); it is added when the other rows leave it out.
- hf: transformers `AlbertForPreTraining` (PyTorch), AdamW, fp32 or bf16 autocast.
- keras_hub: keras-hub `AlbertMaskedLM` (MLM only, no SOP head), Adam, `train_on_batch`,
  fp32 with XLA, bf16 without (as its docs recommend on CPU).
The rows themselves are in `training_rows.py`, the machine's description and the FLOPs
in `machine.py`. Peak resident memory of each subprocess is reported beside its throughput. Rows whose
packages are missing are skipped; a row whose steps take over `--max_step_seconds` stops taking
turns and reports the steps it ran. Exit status 1 when a row has no figure (it failed, ran out
of memory even alone, or did not build or step within `--deadline_seconds`), but for a row
whose package is not installed.
"""

import argparse
import contextlib
import fcntl
import importlib.util
import json
import os
import re
import resource
import select
import subprocess
import sys
import tempfile
import time

from machine import cpu_model, gpu_name, gpu_peak_mib, mfu_percent, model_flops, peak_tflops
from training_rows import (
    PREDICTIONS,
    ROOT,
    RUNNERS,
    WARMUP_STEPS,
    auto_path,
    planned_rows,
)


def serve(args, config_values):
    """The row process: build, warm up, then run one step per `step` line on stdin."""
    step = RUNNERS[args.one](args, config_values)
    # The first step compiles (and autotunes).
    with warmup_turn(args.warmup_lock, args.warmup_wait_seconds) as held:
        for _ in range(WARMUP_STEPS):
            step()
        release_cached_memory()
    print(json.dumps({"ready": True, "warmed_up_alone": held}), flush=True)
    for line in sys.stdin:
        command, _, log_dir = line.strip().partition(" ")
        if command == "profile":
            print(json.dumps({"profile": profile_row(step, log_dir)}), flush=True)
            continue
        if command != "step":
            break
        start = time.perf_counter()
        step()
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    try:
        gpu_peak = gpu_peak_mib()
    except Exception as error:  # a framework's memory query must not lose the row's reply
        print(f"peak GPU memory unreadable: {error!r}", file=sys.stderr)
        gpu_peak = None
    print(json.dumps({"peak_mib": peak_mib, "gpu_peak_mib": gpu_peak}), flush=True)


def release_cached_memory():
    """Hands back to the card what PyTorch's allocator keeps for the next step, so that a row
    warming up after this one finds it free. A row on JAX cannot (its allocator keeps what it
    grew to): on a card too small for all the rows, the PyTorch row is then the one that runs
    out in a turn and is run again alone, which costs seconds, not the minute of compiling
    that rebuilding an XLA row does."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


@contextlib.contextmanager
def warmup_turn(lock_path, wait_seconds=float("inf")):
    """Holds `lock_path` (an flock shared by the rows that start at once) while the row compiles
    and warms up, so that no other row's kernels run during its autotuning. Yields whether it
    holds it: a row that waited `wait_seconds` in vain goes on beside the others rather than
    miss the deadline, and so does every row without a lock (None)."""
    if not lock_path:
        yield None
        return
    with open(lock_path, "a") as lock:
        give_up, held = time.monotonic() + wait_seconds, False
        while not held and time.monotonic() <= give_up:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
            except BlockingIOError:
                time.sleep(0.1)
        try:
            yield held
        finally:
            if held:
                fcntl.flock(lock, fcntl.LOCK_UN)


def profile_row(step, log_dir, steps=2):
    """A row's device time by kind of op (`device_profile`), for rows running Keras on JAX; None
    for the others (TensorFlow's and PyTorch's profilers are not wired in)."""
    if "jax" not in sys.modules or os.environ.get("KERAS_BACKEND") != "jax":
        return None
    import device_profile

    try:
        return device_profile.trace_steps(step, steps, log_dir)
    except Exception as error:  # a failed profile must not lose the measured table
        return {"error": f"{type(error).__name__}: {error}"[:200]}


# How JAX/XLA, PyTorch and TensorFlow say that the device ran out of memory.
OUT_OF_MEMORY = re.compile(r"RESOURCE_EXHAUSTED|out of memory|OutOfMemoryError|\bOOM\b", re.I)


class Row:
    """One row's subprocess, spoken to one JSON line at a time."""

    def __init__(self, which, label, precision, args, jit=-1, warmup_lock=None, clock=None):
        self.which, self.label, self.precision, self.jit = which, label, precision, jit
        self.times, self.error, self.peak_mib, self.gpu_peak_mib = [], None, None, None
        self.started, self.build_seconds = time.monotonic(), None
        self.rerun_alone = False  # run again alone: out of memory beside the others
        self.log = tempfile.TemporaryFile("w+")
        command = [sys.executable, __file__, f"--one={which}", f"--precision={precision}"]
        command += [f"--jit={jit}", f"--device={args.device}"]
        command += [f"--config={args.config}", f"--seq={args.seq}", f"--batch={args.batch}"]
        self.warmed_up_alone = None  # True/False where the rows shared a warm-up lock
        if warmup_lock:
            # Waiting for the lock may take half the time left, no more.
            wait = clock.left() / 2 if clock else float("inf")
            command += [f"--warmup_lock={warmup_lock}", f"--warmup_wait_seconds={wait}"]
        env = dict(os.environ)
        if args.device == "gpu":
            # Rows share the card: TensorFlow and JAX must not each take all of its memory.
            env.update(TF_FORCE_GPU_ALLOW_GROWTH="true", XLA_PYTHON_CLIENT_PREALLOCATE="false")
            if getattr(args, "compile_cache", None):
                # A row run again alone finds its step compiled (and autotuned) by its first
                # process in the cache the rows share, instead of a minute of compiling.
                env.setdefault("JAX_COMPILATION_CACHE_DIR", args.compile_cache)
            if which == "keras_hub" and importlib.util.find_spec("tensorflow") is None:
                env["KERAS_BACKEND"] = "jax"
        if which == "ours_jax":
            env["KERAS_BACKEND"] = "jax"
        self.runs_on_jax = env.get("KERAS_BACKEND") == "jax"
        if args.profile_dir and self.runs_on_jax:  # the step's HLO, to read
            import device_profile

            flags = device_profile.dump_flags(profile_folder(args, label, precision))
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flags}".strip()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )

    def is_auto(self, args):
        return (
            self.which.startswith("ours") and (self.precision, bool(self.jit)) == args.auto_path[:2]
        )

    def name(self, args):
        return self.label + (" *" if self.is_auto(args) else "")

    def key(self):
        return self.which, self.precision, self.jit

    def package_missing(self):
        """Whether the row failed because its package is not installed here."""
        return bool(self.error) and "ModuleNotFoundError" in self._log_tail()

    def _log_tail(self, lines=30):
        self.log.seek(0)
        return "\n".join(self.log.read().splitlines()[-lines:])

    def out_of_memory(self):
        """Whether the row failed for want of (device) memory, by the end of its log."""
        return bool(self.error) and bool(OUT_OF_MEMORY.search(self._log_tail()))

    def read(self, timeout):
        """The next JSON line, or None (with `error` set) on a timeout or an exit."""
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        if ready:
            self.log.seek(0)
            lines = self.log.read().strip().splitlines() or ["failed"]
            self.error = f"skipped  ({lines[-1][:70]})"
        else:
            self.error = f"timeout  (> {timeout:.0f} s)"
        self.process.kill()
        return None

    def step(self, timeout):
        self.process.stdin.write("step\n")
        self.process.stdin.flush()
        reply = self.read(timeout)
        if reply:
            self.times.append(reply["seconds"])
        return reply

    def profile(self, log_dir, timeout):
        """The row's `profile_row` summary (None for rows it does not cover)."""
        self.process.stdin.write(f"profile {log_dir}\n")
        self.process.stdin.flush()
        reply = self.read(timeout)
        return reply and reply["profile"]

    def finish(self, timeout=60):
        if self.process.poll() is None:
            self.process.stdin.write("quit\n")
            self.process.stdin.flush()
            reply = self.read(timeout)
            self.peak_mib = reply and reply["peak_mib"]
            self.gpu_peak_mib = reply and reply.get("gpu_peak_mib")
        self.process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default=os.path.join(ROOT, "albert/configs/albert_base_v2.json")
    )
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="Timed steps (turns) per row.")
    parser.add_argument("--rows", default="ours,hf,keras_hub")
    parser.add_argument(
        "--row_timeout", type=int, default=600, help="Seconds for a row to build and warm up."
    )
    parser.add_argument(
        "--max_step_seconds",
        type=float,
        default=120,
        help="A row whose step takes longer stops taking turns.",
    )
    parser.add_argument("--settle_seconds", type=float, default=1.0, help="Pause before each turn.")
    parser.add_argument("--verbose", action="store_true", help="Print every step's seconds.")
    parser.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "gpu"),
        help="gpu: one NVIDIA GPU; bfloat16 rows (ours with XLA, HF autocast, keras-hub with "
        "XLA) and model FLOPs utilisation against the card's bf16 peak.",
    )
    parser.add_argument(
        "--peak_tflops", type=float, help="The card's bf16 peak (default: by name)."
    )
    parser.add_argument(
        "--precisions", default=None, help="Default float32,bfloat16 (gpu: bfloat16)."
    )
    parser.add_argument(
        "--ours_paths",
        default="main",
        choices=("main", "all", "default"),
        help="Our rows: main (float32 XLA, bfloat16 with and without XLA), all (also float32 "
        "without XLA) or default (only run_pretraining's default path).",
    )
    parser.add_argument(
        "--ours_backend",
        choices=("tensorflow", "jax"),
        help="Keras backend of our rows (default: tensorflow; on --device=gpu, jax when "
        "TensorFlow is not installed, as on the lent GPU machines).",
    )
    parser.add_argument(
        "--parallel_start",
        type=int,
        choices=(0, 1),
        help="Start every row at once, each still compiling and warming up alone (default: 1 "
        "on --device=gpu, else 0).",
    )
    parser.add_argument(
        "--deadline_seconds",
        type=float,
        default=0,
        help="Wall-clock budget of the whole run (0: none): rows still building then are "
        "reported as timed out, and the turns stop early rather than overrun it.",
    )
    parser.add_argument(
        "--profile_dir",
        help="After the turns, trace two steps of each row that runs Keras on JAX with "
        "jax.profiler into this folder and print its device time by kind of op; beside each "
        "row's folder, keep its step's optimized HLO and its trace as one file each.",
    )
    parser.add_argument(
        "--turns_after_file",
        help="Before the first turn, wait (within the deadline) until this file exists: "
        "gpu_check.sh's loss check runs beside the rows' builds and writes it when it ends, "
        "so that no timed step runs beside it.",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--warmup_lock", help=argparse.SUPPRESS)
    parser.add_argument(
        "--warmup_wait_seconds", type=float, default=float("inf"), help=argparse.SUPPRESS
    )
    parser.add_argument("--precision", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--jit", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    with open(args.config) as f:
        config_values = json.load(f)
    if args.one:
        return serve(args, config_values)
    with tempfile.TemporaryDirectory(prefix="bench_jax_cache") as cache:
        args.compile_cache = cache
        return 0 if compare(args, config_values) else 1


def compare(args, config_values):
    """The parent process: start the rows, let them take turns, print the table."""
    gpu = args.device == "gpu"
    args.precisions = args.precisions or ("bfloat16" if gpu else "float32,bfloat16")
    args.auto_path = auto_path(args.device)
    if args.ours_backend is None:
        no_tensorflow = importlib.util.find_spec("tensorflow") is None
        args.ours_backend = "jax" if gpu and no_tensorflow else "tensorflow"
    if args.parallel_start is None:
        args.parallel_start = int(gpu)
    print(f"Training step, {os.path.basename(args.config)}, global batch {args.batch}, ")
    print(f"seq {args.seq}, {os.cpu_count()} cores, median of {args.steps} interleaved steps")
    print(f"CPU: {cpu_model()}")
    peak = None
    if gpu:
        name = gpu_name()
        peak = args.peak_tflops or peak_tflops(name)
        if name is None:
            sys.exit("--device=gpu: nvidia-smi finds no NVIDIA GPU here.")
        print(f"GPU: {name}, bf16 peak {peak or 'unknown (pass --peak_tflops)'} TFLOP/s")
    print()
    clock = Clock(args.deadline_seconds)
    rows, started = [], []
    lock = os.path.join(tempfile.mkdtemp(), "warmup.lock") if args.parallel_start else None
    for which, label, precision, jit in planned_rows(args):
        started.append(Row(which, label, precision, args, jit, warmup_lock=lock, clock=clock))
        if not args.parallel_start:
            rows += wait_ready(started[-1:], args, clock)
    if args.parallel_start:  # the rows compile at once (a GPU machine's many cores)
        rows = wait_ready(started, args, clock)
    built = ", ".join(
        f"{row.label} {row.precision} {row.build_seconds:.0f} s"
        + (
            " (beside the others: waited too long for its turn)"
            if row.warmed_up_alone is False
            else ""
        )
        for row in rows
    )
    print(f"built and warmed up in: {built or 'none'}")
    if args.turns_after_file and not wait_for_file(args.turns_after_file, clock):
        print(f"went on at the deadline without {args.turns_after_file}")
    turns = take_turns(rows, args, clock)
    if turns < args.steps:
        print(f"stopped after {turns} of {args.steps} turns: --deadline_seconds")
    if args.profile_dir:
        print_profiles(rows, args, clock)
    for row in rows:
        row.finish(timeout=max(5.0, min(60.0, clock.left())))  # its peak memory
    rows = run_alone(started, rows, args, clock)
    flops = model_flops(config_values, args.batch, args.seq, PREDICTIONS)
    mfu_header = f" {'MFU':>6s} {'peak GPU':>10s}" if gpu else ""
    print(f"{'implementation':36s} {'precision':10s} {'seq/s':>7s} {'peak RSS':>10s}{mfu_header}")
    results = {}
    for row in rows:
        if not row.times:
            reason = row.error or "no step within --deadline_seconds"
            print(f"{row.name(args):36s} {row.precision:10s} {reason}")
            continue
        rate = args.batch / sorted(row.times)[len(row.times) // 2]
        if args.verbose:
            print(" ".join(f"{t:.2f}" for t in row.times))
        results[row] = rate
        note = f"  ({len(row.times)} steps)" if len(row.times) < args.steps else ""
        note += "  (alone: out of memory beside the others)" if row.rerun_alone else ""
        memory = f"{row.peak_mib:7.0f} MiB" if row.peak_mib else "    n/a"
        mfu = ""
        if gpu:
            gpu_memory = f"{row.gpu_peak_mib:6.0f} MiB" if row.gpu_peak_mib else "       n/a"
            mfu = f" {mfu_percent(flops, rate, args.batch, peak):>6s} {gpu_memory}"
        print(f"{row.name(args):36s} {row.precision:10s} {rate:7.2f} {memory}{mfu}{note}")
    print(f"\n* run_pretraining.py's default here ({args.auto_path[2]})")
    if gpu:
        print(
            f"MFU: {flops / 1e12:.2f} TFLOP of model matmuls per step (whole model, "
            "forward + backward) x steps/s / the bf16 peak. Peak RSS is host memory; peak "
            "GPU is what the row's framework allocated on the card."
        )
    print(ratio_lines(results, args))
    # Every row has a figure, but for one whose package is not installed here.
    measured = {row.key() for row in results}
    return all(row.key() in measured or row.package_missing() for row in started)


def wait_for_file(path, clock, poll_seconds=0.5):
    """Whether `path` exists before the clock leaves under 20 s (then the turns go on)."""
    while not os.path.exists(path):
        if clock.left() < 20:
            return False
        time.sleep(poll_seconds)
    return True


class Clock:
    """Seconds left of `--deadline_seconds` (unbounded when it is 0)."""

    def __init__(self, budget):
        self.end = self.now() + budget if budget > 0 else None

    def now(self):
        return time.monotonic()

    def left(self):
        return float("inf") if self.end is None else self.end - self.now()


def wait_ready(started, args, clock):
    """The rows of `started` that build and warm up within `--row_timeout` seconds (and the
    deadline)."""
    ready = []
    deadline = time.monotonic() + min(args.row_timeout, clock.left())
    for row in started:
        reply = row.read(max(1.0, deadline - time.monotonic()))
        if reply:
            row.build_seconds = time.monotonic() - row.started
            row.warmed_up_alone = reply.get("warmed_up_alone")
            ready.append(row)
        else:
            print(f"{row.name(args):36s} {row.precision:10s} {row.error}")
    return ready


def take_turns(rows, args, clock):
    """Up to `--steps` turns of one step per row; a turn starts only when the clock leaves
    time for one more as long as the longest so far. Returns the turns taken."""
    longest = 0.0
    for turn in range(args.steps):
        if clock.left() < 1.5 * longest:
            return turn
        started = clock.now()
        for row in rows:
            slow = row.times and row.times[-1] > args.max_step_seconds
            if not row.error and not slow:
                time.sleep(args.settle_seconds)  # the previous row's threads go idle
                row.step(args.max_step_seconds * 5)
        longest = max(longest, clock.now() - started)
    return args.steps


def run_alone(started, rows, args, clock):
    """The table's rows, in order: those of `rows`, and in place of each row that ran out of
    memory beside the others (building or taking turns), the same row run again alone now
    that they have quit, with turns of its own within the deadline."""
    table = []
    for row in started:
        if len(started) > 1 and row.out_of_memory() and clock.left() > 10:
            print(f"{row.label} {row.precision}: out of memory beside the others, again alone")
            again = Row(row.which, row.label, row.precision, args, row.jit)
            again.rerun_alone = True
            if wait_ready([again], args, clock):
                take_turns([again], args, clock)
                again.finish(timeout=max(5.0, min(60.0, clock.left())))
                table.append(again)
        elif row in rows:
            table.append(row)
    return table


def profile_folder(args, label, precision):
    """Where `--profile_dir` keeps a row's trace and HLO."""
    name = re.sub(r"[^\w.-]+", "_", f"{label} {precision}").strip("_")
    return os.path.join(args.profile_dir, name)


def print_profiles(rows, args, clock):
    """Each JAX row's device time by kind of op (`--profile_dir`), while the clock allows."""
    for row in rows:
        step = max(row.times or [0.0])
        if row.error or not row.runs_on_jax:
            continue
        if clock.left() < 10 * step + 15:
            print(f"{row.label}: not profiled, {clock.left():.0f} s left of --deadline_seconds")
            continue
        folder = profile_folder(args, row.label, row.precision)
        summary = row.profile(folder, timeout=max(30.0, 20 * step))
        if summary and "error" in summary:
            print(f"{row.label}: profile failed ({summary['error']})")
        elif summary:
            import device_profile

            print("\n".join(device_profile.summary_lines(row.label, summary)))
            print(f"  trace: {folder}")
            for path in device_profile.keep_for_reading(folder):
                print(f"  kept: {path}")
    print()


def ratio_lines(results, args):
    """The best-ours / best-peer line (and the default path's), from {Row: seq/s}."""
    ours = {row: rate for row, rate in results.items() if row.which.startswith("ours")}
    peers = {row: rate for row, rate in results.items() if not row.which.startswith("ours")}
    if not ours or not peers:
        return ""
    best_ours, best_peer = max(ours, key=ours.get), max(peers, key=peers.get)
    name = lambda row: f"{row.name(args).rstrip(' *')} {row.precision}"  # noqa: E731
    lines = [
        f"best ours / best peer: {ours[best_ours] / peers[best_peer]:.2f}x "
        f"({name(best_ours)} / {name(best_peer)})"
    ]
    # Rows run alone took no turns beside the others: their steps pair with nothing.
    interleaved = not (best_ours.rerun_alone or best_peer.rerun_alone)
    paired = paired_ratios(best_ours.times, best_peer.times) if interleaved else []
    if len(paired) >= 4:
        low, middle, high = quartiles(paired)
        lines.append(
            f"  paired by turn ({len(paired)} turns): median {middle:.2f}x, middle half "
            f"{low:.2f}x-{high:.2f}x"
        )
    default = next((row for row in ours if row.is_auto(args)), None)
    if default is not None:
        lines.append(f"default / best peer: {ours[default] / peers[best_peer]:.2f}x")
    return "\n".join(lines)


def paired_ratios(ours_times, peer_times):
    """Per turn, the peer's step time over ours: each pair ran seconds apart, so a slow spell
    of a shared machine that lasts a turn cancels out of it (it does not out of the ratio of
    the two medians)."""
    return [peer / mine for mine, peer in zip(ours_times, peer_times, strict=False)]


def quartiles(values):
    """(lower quartile, median, upper quartile), linear between the sorted values."""
    ordered = sorted(values)

    def at(q):
        position = q * (len(ordered) - 1)
        below = int(position)
        above = min(below + 1, len(ordered) - 1)
        return ordered[below] + (ordered[above] - ordered[below]) * (position - below)

    return at(0.25), at(0.5), at(0.75)


if __name__ == "__main__":
    sys.exit(main())
