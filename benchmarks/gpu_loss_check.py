"""Correctness on a GPU: run_pretraining.py with XLA and bf16 there against float32 on the CPU.

    python benchmarks/gpu_loss_check.py [--steps=200] [--compare_steps=5] [--device=gpu]

Writes small learnable pretraining records for the tiny config (albert/configs/albert_tiny.json,
dropout off: XLA on the GPU and TensorFlow on the CPU draw different masks),
runs `python -m albert.run_pretraining` twice on them, one loss per step
(`--iterations_per_loop=1`): on the GPU with `--jit_compile --mixed_precision=bfloat16`, and on
the CPU (CUDA_VISIBLE_DEVICES=-1) with `--nojit_compile --mixed_precision=none` as the
reference. Passes when the GPU run's loss falls (the mean of its last 20 steps under
`--fall_ratio` times the mean of its first 5) and its first `--compare_steps` losses match the
CPU's within bf16 tolerance (|gpu - cpu| <= rtol * |cpu| + atol). Exit status 0 or 1.

`--device=cpu` runs the "accelerator" run on the CPU too (bf16 without XLA, the path a bf16 CPU
takes by default): a check of this script itself on a machine with no GPU.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, PREDICTIONS, EXAMPLES = 32, 5, 64
# Relative and absolute tolerance of a bf16 loss against float32 over the first steps: bf16
# keeps 8 bits of mantissa (0.4%), and a few steps of updates compound it.
RTOL, ATOL = 0.03, 0.02


def compare_losses(reference, losses, steps, rtol=RTOL, atol=ATOL):
    """[(step, reference, loss, within tolerance)] for the first `steps` steps (1-based)."""
    if len(reference) < steps or len(losses) < steps:
        raise ValueError(
            f"need {steps} losses from each run; got {len(reference)} and {len(losses)}"
        )
    return [
        (step + 1, r, x, abs(x - r) <= rtol * abs(r) + atol)
        for step, (r, x) in enumerate(zip(reference[:steps], losses[:steps], strict=True))
    ]


def loss_falls(losses, ratio, first=5, last=20):
    """Whether the mean of the last `last` losses is below `ratio` x the mean of the first."""
    if len(losses) < first + last:
        return False
    return float(np.mean(losses[-last:])) < ratio * float(np.mean(losses[:first]))


def write_records(directory, vocab_size):
    """EXAMPLES learnable records: each sequence counts up from a random start, so a masked
    token is its left neighbour plus one; sentence order follows the segment ranges."""
    sys.path.insert(0, ROOT)
    from albert.data import records

    rng = np.random.RandomState(0)
    path = os.path.join(directory, "train.tfrecord")
    import tensorflow as tf

    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(EXAMPLES):
            start = rng.randint(5, vocab_size - SEQ)
            ids = np.arange(start, start + SEQ)
            ids[0], ids[-1] = 2, 3  # [CLS] ... [SEP]
            positions = np.sort(rng.choice(np.arange(1, SEQ - 1), PREDICTIONS, replace=False))
            targets = ids[positions].copy()
            ids[positions] = 4  # [MASK]
            segments = (np.arange(SEQ) >= SEQ // 2).astype(int)
            writer.write(
                records.serialize_instance(
                    ids, segments, [1] * SEQ, positions, targets, 0, SEQ, PREDICTIONS
                )
            )
    return path


def run_pretraining(config_path, records_path, output_dir, steps, accelerator, device):
    """Runs run_pretraining.py; returns its per-step training losses."""
    command = [
        sys.executable, "-m", "albert.run_pretraining", f"--albert_config_file={config_path}",
        f"--input_file={records_path}", f"--output_dir={output_dir}", "--do_train",
        "--train_batch_size=16", f"--max_seq_length={SEQ}",
        f"--max_predictions_per_seq={PREDICTIONS}", f"--num_train_steps={steps}",
        "--num_warmup_steps=10", "--learning_rate=0.005", "--iterations_per_loop=1",
        f"--save_checkpoints_steps={steps}", "--strategy=default",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    if accelerator:
        command += ["--mixed_precision=bfloat16"]
        command += ["--jit_compile"] if device == "gpu" else ["--nojit_compile"]
    else:
        command += ["--mixed_precision=none", "--nojit_compile"]
        env["CUDA_VISIBLE_DEVICES"] = "-1"
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode:
        sys.exit(f"run_pretraining failed:\n{done.stderr[-3000:]}")
    chosen = [line for line in done.stderr.splitlines() if "Strategy default" in line]
    print(f"  {chosen[-1].split('] ')[-1] if chosen else '(no strategy line)'}")
    return read_losses(output_dir)


def read_losses(output_dir):
    """The `loss` scalar of each step from the run's TensorBoard events, in step order."""
    import glob

    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # summary_iterator's deprecation notice
    values = {}
    for path in sorted(glob.glob(os.path.join(output_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "loss":
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return [values[step] for step in sorted(values)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--compare_steps", type=int, default=5)
    parser.add_argument("--fall_ratio", type=float, default=0.8)
    parser.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    args = parser.parse_args()
    import tensorflow as tf

    if args.device == "gpu" and not tf.config.list_physical_devices("GPU"):
        sys.exit("No GPU visible to TensorFlow (pip install 'tensorflow[and-cuda]').")
    sys.path.insert(0, ROOT)
    from albert import configs

    with open(configs.path("albert_tiny")) as f:
        config = json.load(f)
    # Without dropout: XLA on the GPU and TensorFlow's CPU kernels draw different masks.
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    directory = tempfile.mkdtemp(prefix="gpu_loss_check_")
    config_path = os.path.join(directory, "albert_tiny_no_dropout.json")
    with open(config_path, "w") as f:
        json.dump(config, f)
    records_path = write_records(directory, config["vocab_size"])
    name = "GPU (XLA, bf16)" if args.device == "gpu" else "CPU (bf16, no XLA)"
    print(f"tiny config, {args.steps} steps, batch 16, seq {SEQ}")
    print(f"{name}:")
    runs = (config_path, records_path)
    losses = run_pretraining(*runs, f"{directory}/accelerator", args.steps, True, args.device)
    print("CPU reference (float32, no XLA):")
    reference = run_pretraining(*runs, f"{directory}/cpu", args.steps, False, args.device)
    rows = compare_losses(reference, losses, args.compare_steps)
    print(f"\n{'step':>4s} {'cpu fp32':>9s} {name:>9s}")
    for step, r, x, ok in rows:
        print(f"{step:4d} {r:9.4f} {x:9.4f}  {'ok' if ok else 'OUTSIDE bf16 tolerance'}")
    falls = loss_falls(losses, args.fall_ratio)
    print(f"loss: first 5 steps {np.mean(losses[:5]):.3f}, last 20 {np.mean(losses[-20:]):.3f} "
          f"({'falls' if falls else 'does NOT fall'} below {args.fall_ratio}x)")  # fmt: skip
    passed = falls and all(ok for *_, ok in rows)
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
