"""Where a jitted JAX step spends its device time, from a `jax.profiler` trace.

The GPU check runs ours and keras-hub as Keras on JAX (the lent GPU machines have no
TensorFlow); when ours is slower there, this says where the time goes without TensorBoard:

    summary = device_profile.trace_steps(step, steps=2, log_dir="/tmp/profile/ours")
    print("\n".join(device_profile.summary_lines("ours", summary)))

The trace is written with `create_perfetto_trace=True` (plain JSON, opened with the standard
library; the whole trace stays under `log_dir` for ui.perfetto.dev). Device time is the sum of
the kernels on the GPU's streams (kernels of different streams may overlap), or on a machine
without a GPU, of XLA's CPU ops on its worker threads.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re

# (kind, pattern over the op's kernel name and HLO names), the first match wins.
KINDS = (
    ("matmul", r"gemm|cublas|cutlass|nvjet|matmul|dot|conv|wgmma|xmma"),
    ("attention", r"flash|fmha|cudnn|attention"),
    ("copy/transpose", r"copy|transpose|memcpy|memset"),
    ("gather/scatter", r"gather|scatter|dynamic.slice|dynamic.update"),
    ("reduce", r"reduc"),
    ("elementwise fusion", r"fusion|loop_|input_|wrapped_|convert|multiply|add|select"),
)
# Events of XLA's CPU runtime that are bookkeeping, not ops.
_CPU_BOOKKEEPING = re.compile(r"^(end: |Threadpool|ThunkExecutor|Wait |\$)")


def kind_of(text):
    """The KINDS name for an op, from its kernel and HLO names; "other" when none matches."""
    for kind, pattern in KINDS:
        if re.search(pattern, text, re.IGNORECASE):
            return kind
    return "other"


def device_ops(trace):
    """[(name, text to classify, microseconds)] of the device's ops in a trace-event dict."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    processes, threads = {}, {}
    for event in events:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            processes[event["pid"]] = event["args"]["name"]
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            threads[(event["pid"], event.get("tid"))] = event["args"]["name"]
    gpus = {pid for pid, name in processes.items() if "/device:GPU" in name}
    if gpus:
        # The streams carry the kernels; the GPU's other lines ("XLA Ops", "XLA Modules",
        # "Launch Stats") repeat the same time grouped differently.
        def keep(event):
            return event["pid"] in gpus and threads.get(
                (event["pid"], event.get("tid")), ""
            ).startswith("Stream")
    else:

        def keep(event):  # XLA:CPU runs ops on its client's and its Eigen pool's threads
            thread = threads.get((event["pid"], event.get("tid")), "")
            return "XLA" in thread and not _CPU_BOOKKEEPING.match(event["name"])

    ops = []
    for event in events:
        if event.get("ph") == "X" and keep(event):
            args = event.get("args") or {}
            hlo = " ".join(str(args.get(key, "")) for key in ("hlo_op", "long_name", "name"))
            ops.append((event["name"], f"{event['name']} {hlo}", float(event.get("dur", 0.0))))
    return ops


def summarize(trace, steps, top=8):
    """{"device_ms_per_step", "kinds": {kind: ms per step}, "top": [[name, ms per step, calls
    per step]]} of a trace of `steps` steps."""
    by_kind, by_name, calls = collections.Counter(), collections.Counter(), collections.Counter()
    for name, text, micros in device_ops(trace):
        name = re.sub(r"\.\d+$", "", name)  # fusion.12 and fusion.13 are one kind of op
        by_kind[kind_of(text)] += micros
        by_name[name] += micros
        calls[name] += 1
    per_step = 1e-3 / steps
    return {
        "device_ms_per_step": round(sum(by_kind.values()) * per_step, 3),
        "kinds": {kind: round(us * per_step, 3) for kind, us in by_kind.most_common()},
        "top": [
            [name, round(us * per_step, 3), calls[name] / steps]
            for name, us in by_name.most_common(top)
        ],
    }


def trace_steps(step, steps, log_dir, top=8):
    """Runs `step()` `steps` times under `jax.profiler` into `log_dir`; `summarize`s the trace."""
    import jax

    os.makedirs(log_dir, exist_ok=True)
    jax.profiler.start_trace(log_dir, create_perfetto_trace=True)
    try:
        for _ in range(steps):
            step()
    finally:
        jax.profiler.stop_trace()
    paths = glob.glob(os.path.join(log_dir, "**", "perfetto_trace.json.gz"), recursive=True)
    if not paths:
        raise FileNotFoundError(f"jax.profiler wrote no perfetto_trace.json.gz under {log_dir}")
    with gzip.open(max(paths, key=os.path.getmtime)) as f:
        return summarize(json.load(f), steps, top)


def dump_flags(folder):
    """XLA_FLAGS that make a row's process write the HLO of its training step (the modules
    named *step*, as jax.jit names them after the function) into `folder`/xla_dump."""
    dump = os.path.join(folder, "xla_dump")
    return f"--xla_dump_to={dump} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*step.*"


def keep_for_reading(folder):
    """Beside `folder`, one file each that a person or a later session reads without the rest:
    `folder`.hlo.txt.gz, the largest step module as XLA optimized it (its fusion names are the
    kernel names of the trace), and `folder`.trace.json.gz, the newest perfetto trace.
    Returns the paths written (none where nothing was dumped or traced)."""
    kept = []
    modules = glob.glob(os.path.join(folder, "xla_dump", "*after_optimizations.txt"))
    traces = glob.glob(os.path.join(folder, "**", "perfetto_trace.json.gz"), recursive=True)
    if modules:
        with open(max(modules, key=os.path.getsize), "rb") as source:
            with gzip.open(folder + ".hlo.txt.gz", "wb") as target:
                target.write(source.read())
        kept.append(folder + ".hlo.txt.gz")
    if traces:
        with open(max(traces, key=os.path.getmtime), "rb") as source:
            with open(folder + ".trace.json.gz", "wb") as target:
                target.write(source.read())
        kept.append(folder + ".trace.json.gz")
    return kept


def summary_lines(label, summary):
    """A few lines for people: device time per step, by kind, and the costliest ops."""
    lines = [f"{label}: {summary['device_ms_per_step']:.1f} ms of device time per step"]
    lines.append(
        "  " + ", ".join(f"{kind} {ms:.1f}" for kind, ms in summary["kinds"].items() if ms >= 0.05)
    )
    for name, ms, calls in summary["top"]:
        lines.append(f"  {ms:8.2f} ms {calls:6.0f}x  {name[:90]}")
    return lines
