"""Where a pretraining step's time goes: the XLA ops of `bench_training.py`'s "ours" row.

    python benchmarks/profile_training.py [--config=albert/configs/albert_base_v2.json] [--seq=128]
        [--batch=8] [--steps=2] [--precision=float32] [--top=12]

Runs the step under the TensorFlow profiler, groups the compiled program's ops by kind
(matrix products, reductions, fused elementwise, other) and prints their share of the time
beside the step's matmul FLOPs counted from the config, so that the achieved GFLOP/s can be
set against the machine's matmul peak.
"""

import argparse
import collections
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_training  # noqa: E402

ROOT = bench_training.ROOT


def training_flops(config, batch, seq, predictions):
    """Matmul FLOPs of one step (forward x 3 for forward + backward), as our model runs it:
    the last block only at [CLS] and the masked positions."""
    h, i = config["hidden_size"], config["intermediate_size"]
    e, v = config["embedding_size"], config["vocab_size"]
    layers, rows = config["num_hidden_layers"], predictions + 1

    def block(queries):  # one attention + FFN block with `queries` query rows per sequence
        projections = 2 * 2 * h * h * seq + 2 * (2 * h * h + 2 * h * i) * queries
        attention = 2 * 2 * queries * seq * h
        return projections + attention

    forward = 2 * e * h * seq + (layers - 1) * block(seq) + block(rows)
    forward += 2 * predictions * (h * e + e * v) + 2 * h * h  # MLM head, pooler
    return 3 * forward * batch


def op_kind(name):
    if name.startswith(("MatMul", "dot", "Einsum", "BatchMatMul")):
        return "matrix products (dot)"
    if "reduce" in name:
        return "reductions (LayerNorm moments, norms, sums)"
    if name.endswith("fusion"):
        return "fused elementwise (GELU, softmax, residual, LAMB)"
    return "other (copies, transposes, scatter, concat)"


def op_times(logdir):
    """Milliseconds per compiled-op name (numeric suffixes dropped), over the trace."""
    import glob

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    path = sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1]
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    totals = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_numa"):  # XLA:CPU's compute threads
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                match = re.match(r"^([A-Za-z_\-]+)[.\d]*$", name)
                if match and name != "ThunkExecutor::Execute":
                    totals[match.group(1)] += event.duration_ps / 1e9
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default=os.path.join(ROOT, "albert/configs/albert_base_v2.json")
    )
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2, help="Profiled steps.")
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with open(args.config) as f:
        config = json.load(f)
    step = bench_training.RUNNERS["ours"](args, config)
    for _ in range(bench_training.WARMUP_STEPS):
        step()
    import tensorflow as tf

    logdir = tempfile.mkdtemp()
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = (time.perf_counter() - start) / args.steps
    tf.profiler.experimental.stop()

    totals = {name: ms / args.steps for name, ms in op_times(logdir).items()}
    busy = sum(totals.values())
    kinds = collections.Counter()
    for name, ms in totals.items():
        kinds[op_kind(name)] += ms
    flops = training_flops(config, args.batch, args.seq, bench_training.PREDICTIONS)
    dot_ms = kinds["matrix products (dot)"]
    print(f"{os.path.basename(args.config)}, batch {args.batch}, seq {args.seq}, {args.precision}")
    print(f"step {seconds:.2f} s under the profiler; compiled ops busy {busy / 1000:.2f} s")
    print(f"matmul work {flops / 1e9:.0f} GFLOP/step: {flops / seconds / 1e9:.0f} GFLOP/s over")
    print(f"the step, {flops / dot_ms / 1e6:.0f} GFLOP/s inside the matrix products\n")
    for kind, ms in kinds.most_common():
        print(f"{ms:8.0f} ms {100 * ms / busy:5.1f}%  {kind}")
    print(f"\ntop {args.top} ops:")
    for name, ms in collections.Counter(totals).most_common(args.top):
        print(f"{ms:8.0f} ms {100 * ms / busy:5.1f}%  {name}")


if __name__ == "__main__":
    main()
