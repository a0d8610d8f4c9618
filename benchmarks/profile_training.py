"""Where a pretraining step's time goes: the ops of `bench_training.py`'s "ours" row.

    python benchmarks/profile_training.py [--config=albert/configs/albert_base_v2.json] [--seq=128]
        [--batch=8] [--steps=2] [--precision=float32] [--jit=1] [--top=12]

Runs the step under the TensorFlow profiler and prints the step's matmul FLOPs counted from
the config beside the time, so that the achieved GFLOP/s can be set against the machine's
matmul peak. With XLA (`--jit=1`) it groups the compiled program's ops by kind (matrix
products, reductions, fused elementwise, other). Without (`--jit=0`, the bfloat16 path on CPUs
with bf16 units) it groups TensorFlow's kernels by kind (matmuls, casts, elementwise,
reductions, copies) and by the part of the step they belong to (GELU, LayerNorm, attention
softmax, optimizer update, MLM head, embeddings gathers, ...). Without XLA two executor
threads run kernels side by side, so those figures are shares of busy thread time, not of
wall time.
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

import training_rows  # noqa: E402

ROOT = training_rows.ROOT


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


# TensorFlow kernel types (oneDNN's `_Mkl*` prefixes dropped) -> kind, for the non-XLA path.
KERNEL_KINDS = {
    "matrix products": ("MatMul", "BatchMatMulV2", "NativeFusedMatMul", "FusedMatMul"),
    "casts": ("Cast",),
    "copies (transpose, concat, split, slice, tile, gather)": (
        "Transpose",
        "ConcatV2",
        "Split",
        "SplitV",
        "Slice",
        "StridedSlice",
        "StridedSliceGrad",
        "Tile",
        "GatherV2",
        "UnsortedSegmentSum",
        "BroadcastTo",
        "Pack",
        "Reshape",
    ),
    "reductions (sums, means, norms, bias gradients)": (
        "Sum",
        "Mean",
        "BiasAddGrad",
        "L2Loss",
        "AddN",
        "ArgMax",
        "Max",
        "Prod",
    ),
}
# Name-scope fragments -> part of the step, first match wins.
STEP_PARTS = (
    (
        "optimizer update (LAMB) and clipping",
        ("lamb/", "adamw/", "clip_by_global_norm", "global_norm"),
    ),
    ("GELU", ("/Gelu",)),
    ("weights cast once, gradients cast back", ("CastOnce",)),
    ("LayerNorm", ("LayerNorm",)),
    ("MLM head and losses", ("masked_lm_head", "SparseSoftmaxCrossEntropy", "sentence_order")),
    ("embeddings (gathers, LayerNorm, E->H)", ("embeddings/",)),
    ("attention scores, softmax, context", ("BatchMatMul", "Softmax", "attention/add")),
    ("dense layers (matmul, bias)", ("MatMul", "BiasAdd", "Tensordot")),
)


def kernel_kind(kernel):
    kernel = kernel.removeprefix("_Mkl")
    for kind, names in KERNEL_KINDS.items():
        if kernel in names:
            return kind
    return "elementwise (mul, add, tanh, ...)"


def step_part(name):
    """The part of the step an event `op name:kernel` belongs to."""
    for part, fragments in STEP_PARTS:
        if any(fragment in name for fragment in fragments):
            return part
    return "other (attention reshapes, residuals, casts of weights)"


def _trace(logdir):
    import glob

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    path = sorted(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True))[-1]
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    return space


def kernel_times(logdir):
    """{(kernel type, op name): busy milliseconds} of TensorFlow's executor threads."""
    totals = collections.Counter()
    for plane in _trace(logdir).planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" in name and "::" not in name:  # not the executor's own events
                    op_name, kernel = name.rsplit(":", 1)
                    totals[(kernel, op_name)] += event.duration_ps / 1e9
    return totals


def op_times(logdir):
    """Milliseconds per compiled-op name (numeric suffixes dropped), over the trace."""
    space = _trace(logdir)
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
    parser.add_argument("--jit", type=int, default=1, choices=(0, 1), help="XLA on (1) or off.")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with open(args.config) as f:
        config = json.load(f)
    step = training_rows.RUNNERS["ours"](args, config)
    for _ in range(training_rows.WARMUP_STEPS):
        step()
    import tensorflow as tf

    logdir = tempfile.mkdtemp()
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = (time.perf_counter() - start) / args.steps
    tf.profiler.experimental.stop()

    flops = training_flops(config, args.batch, args.seq, training_rows.PREDICTIONS)
    xla = "XLA" if args.jit else "no XLA"
    print(
        f"{os.path.basename(args.config)}, batch {args.batch}, seq {args.seq}, "
        f"{args.precision}, {xla}"
    )
    print(
        f"step {seconds:.2f} s under the profiler; matmul work {flops / 1e9:.0f} GFLOP/step: "
        f"{flops / seconds / 1e9:.0f} GFLOP/s over the step"
    )
    if args.jit:
        print_compiled(op_times(logdir), args, flops)
    else:
        print_kernels(kernel_times(logdir), args)


def _print_shares(title, totals, busy, top=None):
    print(f"\n{title}:")
    for name, ms in collections.Counter(totals).most_common(top):
        print(f"{ms:8.0f} ms {100 * ms / busy:5.1f}%  {name}")


def print_compiled(totals, args, flops):
    totals = {name: ms / args.steps for name, ms in totals.items()}
    busy = sum(totals.values())
    kinds = collections.Counter()
    for name, ms in totals.items():
        kinds[op_kind(name)] += ms
    dot_ms = kinds["matrix products (dot)"]
    print(
        f"compiled ops busy {busy / 1000:.2f} s; {flops / dot_ms / 1e6:.0f} GFLOP/s inside "
        "the matrix products"
    )
    _print_shares("by kind", kinds, busy)
    _print_shares(f"top {args.top} ops", totals, busy, args.top)


def print_kernels(totals, args):
    totals = {key: ms / args.steps for key, ms in totals.items()}
    busy = sum(totals.values())
    kinds, parts, kernels = collections.Counter(), collections.Counter(), collections.Counter()
    for (kernel, name), ms in totals.items():
        kinds[kernel_kind(kernel)] += ms
        parts[step_part(f"{name}:{kernel}")] += ms
        kernels[kernel.removeprefix("_Mkl")] += ms
    print(f"kernels busy {busy / 1000:.2f} s of thread time per step (2 executor threads)")
    _print_shares("by kind", kinds, busy)
    _print_shares("by part of the step", parts, busy)
    _print_shares(f"top {args.top} kernel types", kernels, busy, args.top)


if __name__ == "__main__":
    main()
