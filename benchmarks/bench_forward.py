"""Forward-pass throughput of AlbertBackbone beside HF transformers, measured in one run.

    python benchmarks/bench_forward.py [--config=albert/configs/albert_base_v2.json] [--seq=128]
        [--batch=8] [--steps=7]

Each measurement runs in its own subprocess (so TensorFlow and PyTorch never share the cores),
one after the other, and reports the median sequences/s over `--steps` timed calls after
warm-up. Ours runs with and without XLA in each precision; `*` marks the path the entry points
pick here by default (`albert.training.hardware`: on a CPU with bfloat16 matrix units, bfloat16
without XLA). HF rows are skipped when torch/transformers are not installed.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import machine  # beside this script, as in bench_training.py
import training_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(fn, steps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def run_ours(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, ROOT)
    import albert

    if args.precision == "bfloat16":
        keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    config = albert.AlbertConfig.from_json_file(args.config)
    model = albert.AlbertBackbone(config)
    ids = np.random.RandomState(0).randint(5, config.vocab_size, (args.batch, args.seq))
    inputs = {
        "input_ids": ids.astype("int32"),
        "input_mask": np.ones_like(ids, "int32"),
        "segment_ids": np.zeros_like(ids, "int32"),
    }
    forward = tf.function(
        lambda x: model(x, training=False)["sequence_output"], jit_compile=args.jit
    )
    return measure(lambda: forward(inputs).numpy(), args.steps)


def run_hf(args):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    with open(args.config) as f:
        values = json.load(f)
    values["hidden_act"] = "gelu_new"  # the original's "gelu" is HF's "gelu_new"
    config = transformers.AlbertConfig(**values)
    model = transformers.AlbertModel(config).eval()
    ids = torch.randint(5, config.vocab_size, (args.batch, args.seq))
    mask = torch.ones_like(ids)

    def forward():
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16, args.precision == "bfloat16"):
            return model(input_ids=ids, attention_mask=mask).last_hidden_state

    return measure(forward, args.steps)


ROWS = [
    ("ours (Keras 3 / TF, XLA)", "ours", "float32", True),
    ("ours (Keras 3 / TF, no XLA)", "ours", "float32", False),
    ("ours (Keras 3 / TF, XLA)", "ours", "bfloat16", True),
    ("ours (Keras 3 / TF, no XLA)", "ours", "bfloat16", False),
    ("HF transformers (PyTorch)", "hf", "float32", False),
    ("HF transformers (PyTorch, autocast)", "hf", "bfloat16", False),
]


def auto_path():
    """(precision, XLA, why): what the entry points run here with no precision/XLA flags."""
    return training_rows.auto_path("cpu")


def ratio_lines(results, auto):
    """Best ours / HF in each precision, and the default path / the best HF row."""
    lines = []
    for precision in ("float32", "bfloat16"):
        ours = [
            seqs for (which, p, _), seqs in results.items() if which == "ours" and p == precision
        ]
        hf = results.get(("hf", precision, False))
        if ours and hf:
            lines.append(f"best ours / HF, {precision}: {max(ours) / hf:.2f}x")
    hf_rows = [seqs for (which, _, _), seqs in results.items() if which == "hf"]
    if auto in results and hf_rows:
        lines.append(f"default ours (*) / best HF: {results[auto] / max(hf_rows):.2f}x")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default=os.path.join(ROOT, "albert/configs/albert_base_v2.json")
    )
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--row_timeout", type=int, default=600, help="Seconds per row.")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one row
    parser.add_argument("--precision", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--jit", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one:
        seconds = (run_ours if args.one == "ours" else run_hf)(args)
        print(json.dumps({"seconds": seconds}))
        return

    print(f"Forward pass, {os.path.basename(args.config)}, batch {args.batch}, seq {args.seq}, ")
    print(f"{os.cpu_count()} cores, median of {args.steps} calls")
    auto_precision, auto_jit, why = auto_path()
    print(f"CPU: {machine.cpu_model()}\n")
    auto = ("ours", auto_precision, auto_jit)
    print(f"{'implementation':38s} {'precision':10s} {'seq/s':>8s}")
    results = {}
    for label, which, precision, jit in ROWS:
        if (which, precision, jit) == auto:
            label += " *"
        command = [sys.executable, __file__, f"--one={which}", f"--precision={precision}"]
        command += [f"--config={args.config}", f"--seq={args.seq}", f"--batch={args.batch}"]
        command += [f"--steps={args.steps}"] + (["--jit"] if jit else [])
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.row_timeout)
        except subprocess.TimeoutExpired:
            print(f"{label:38s} {precision:10s} {'timeout':>8s}  (> {args.row_timeout} s)")
            continue
        if done.returncode != 0:
            reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
            print(f"{label:38s} {precision:10s} {'skipped':>8s}  ({reason[:60]})")
            continue
        seconds = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
        results[(which, precision, jit)] = args.batch / seconds
        print(f"{label:38s} {precision:10s} {args.batch / seconds:8.2f}")
    print(f"\n* the entry points' default here ({why})")
    for line in ratio_lines(results, auto):
        print(line)


if __name__ == "__main__":
    main()
