"""Which way round a shared kernel's weight gradient is faster to form, on this machine.

    python benchmarks/bench_gemm_layout.py [--config=albert/configs/albert_base_v2.json]
        [--seq=128] [--batch=8] [--repeats=12]

For each kernel [I, O] of an encoder block, the gradient of x [M, I] @ kernel is x^T dy, an
[I, O] product; the same numbers come out of dy^T x, [O, I], transposed. The encoder forms it
as [O, I] for a tall kernel (I > O: the FFN's output dense) in float32 training
(`albert.modeling.shared_weights.TallKernel`); this script measures both forms of each kernel
alone, compiled by XLA and run by TensorFlow without it, in one run, taking turns, and prints
the ratio. M = batch x seq token rows, as a pretraining step's.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def block_kernels(config):
    """(name, I, O) of the kernels one encoder block multiplies by."""
    h, i = config["hidden_size"], config["intermediate_size"]
    return [
        ("attention Q/K/V", h, 3 * h),
        ("attention output", h, h),
        ("FFN intermediate", h, i),
        ("FFN output", i, h),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config", default=os.path.join(ROOT, "albert/configs/albert_base_v2.json")
    )
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=12)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    with open(args.config, encoding="utf-8") as f:
        config = json.load(f)
    rows = args.batch * args.seq
    print(f"{machine.cpu_model()}; TensorFlow {tf.__version__}; M = {rows} rows, float32")
    print(f"{'kernel [I, O]':28s} {'path':7s} {'x^T dy [I,O]':>13s} {'dy^T x [O,I]':>13s} ratio")
    for name, i, o in block_kernels(config):
        x = tf.random.normal((rows, i))
        dy = tf.random.normal((rows, o))
        flops = 2 * rows * i * o
        for jit in (True, False):
            as_stored = tf.function(
                lambda x, dy: tf.matmul(x, dy, transpose_a=True), jit_compile=jit
            )
            swapped = tf.function(lambda x, dy: tf.matmul(dy, x, transpose_a=True), jit_compile=jit)
            times = {as_stored: [], swapped: []}
            for fn in times:
                fn(x, dy).numpy()  # compile and warm up
            for _ in range(args.repeats):  # taking turns: a slow spell of the host hits both
                for fn, seconds in times.items():
                    start = time.perf_counter()
                    fn(x, dy).numpy()
                    seconds.append(time.perf_counter() - start)
            a, b = (statistics.median(times[fn]) for fn in (as_stored, swapped))
            label = f"{name} [{i}, {o}]"
            path = "XLA" if jit else "no XLA"
            print(
                f"{label:28s} {path:7s} {flops / a / 1e9:8.1f} GF/s {flops / b / 1e9:8.1f} GF/s"
                f" {a / b:5.2f}x",
                flush=True,
            )
    print("ratio: time of x^T dy over time of dy^T x (above 1: the [O, I] form is faster)")


if __name__ == "__main__":
    main()
