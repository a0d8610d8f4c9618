"""Correctness on a GPU: our pretraining step in bf16 with XLA there against float32 on a CPU.

    python benchmarks/gpu_loss_check.py [--steps=200] [--compare_steps=5] [--device=gpu]
    python benchmarks/gpu_loss_check.py --write_reference   # TensorFlow, here; see below

The tiny config (albert/configs/albert_tiny.json, dropout off so that every path computes the
same function), weights drawn by numpy from a seed and learnable batches
(`jax_pretraining.learnable_batches`, 4 batches of 16 taken in turn), LAMB at 0.005 with 10
warmup steps, clipping at 1.0, one loss per step:

- the accelerator run: bf16 (`mixed_bfloat16`) with XLA on the GPU. Under TensorFlow it is
  `albert.training.steps.Trainer`, the engine of run_pretraining.py; on a machine with JAX and
  no TensorFlow (the lent GPU machines) it is the same model, loss and optimizer under Keras'
  JAX backend (`jax_pretraining.make_train_step`).
- the references: float32 on the CPU through the same backend, and TensorFlow's Trainer in
  float32 on a CPU, whose first losses are stored in `gpu_reference_losses.json` (written by
  `--write_reference`; tests/benchmarks/test_jax_pretraining.py checks that the file still
  matches what the Trainer computes, and that JAX's float32 step matches it).

Passes when the accelerator's loss falls (the mean of its last 20 steps under `--fall_ratio`
times the mean of its first 5) and its first `--compare_steps` losses match both references
within bf16 tolerance (|x - ref| <= rtol * |ref| + atol). Exit status 0 or 1. `--device=cpu`
runs the "accelerator" run on the CPU (a check of this script on a machine without a GPU).
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, ROOT)

import jax_pretraining  # noqa: E402

from albert.modeling import attention_kernel  # noqa: E402

BATCH, DISTINCT_BATCHES = 16, 4
LEARNING_RATE, WARMUP_STEPS = 0.005, 10
REFERENCE_FILE = os.path.join(ROOT, "benchmarks", "gpu_reference_losses.json")
REFERENCE_STEPS = 5
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


def tiny_config():
    from albert import configs

    with open(configs.path("albert_tiny")) as f:
        config = json.load(f)
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return config


def batches(config, steps):
    distinct = jax_pretraining.learnable_batches(config["vocab_size"], DISTINCT_BATCHES, BATCH)
    return [distinct[step % DISTINCT_BATCHES] for step in range(steps)]


def _model_and_optimizer(config, steps, global_step=None):
    from albert.training.optimization import create_optimizer

    model = jax_pretraining.pretrainer(
        config, BATCH, jax_pretraining.LEARNABLE_SEQ, jax_pretraining.LEARNABLE_PREDICTIONS
    )
    jax_pretraining.set_numpy_weights(model)
    optimizer, _ = create_optimizer(
        "lamb",
        LEARNING_RATE,
        steps,
        WARMUP_STEPS,
        global_step=global_step,
        aggregate_gradients=False,
    )
    return model, optimizer


def jax_losses(config, steps, device):
    """Per-step losses of our step under Keras' JAX backend on `device` ("gpu" or "cpu")."""
    import jax

    with jax.default_device(jax.devices(device)[0]):
        model, optimizer = _model_and_optimizer(config, steps)
        step = jax_pretraining.make_train_step(model, optimizer)
        state = jax_pretraining.initial_state(model, optimizer)
        chosen = "fused" if attention_kernel.fused() else "explicit"
        found = jax_pretraining.attention_in(step, state, batches(config, 1)[0])
        print(f"attention on {device}: {chosen} kernel; the compiled step runs {found}")
        losses = []
        for batch in batches(config, steps):
            loss, state = step(state, batch)
            losses.append(float(loss))
    return losses


def tensorflow_losses(config, steps, jit_compile=False):
    """Per-step losses of `albert.training.steps.Trainer` (TensorFlow, default strategy)."""
    import tensorflow as tf

    from albert.config import AlbertConfig
    from albert.tasks.pretraining import PretrainingTask
    from albert.training.inputs import DistributedInput
    from albert.training.steps import Trainer

    strategy = tf.distribute.get_strategy()
    seq, predictions = jax_pretraining.LEARNABLE_SEQ, jax_pretraining.LEARNABLE_PREDICTIONS
    # The task's loss and metrics; its records are never read (the batches come from numpy).
    unused_records = tempfile.NamedTemporaryFile(suffix=".tfrecord")
    task = PretrainingTask(
        AlbertConfig.from_dict(config), unused_records.name, BATCH, BATCH, seq, predictions
    )
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    model, optimizer = _model_and_optimizer(config, steps, global_step)
    optimizer.build(model.trainable_variables)
    trainer = Trainer(strategy, task, model, optimizer, global_step, jit_compile=jit_compile)
    stacked = {
        name: np.concatenate([batch[name] for batch in batches(config, steps)])
        for name in batches(config, 1)[0]
    }
    dataset = lambda context: tf.data.Dataset.from_tensor_slices(stacked).batch(BATCH)  # noqa: E731
    data = DistributedInput(strategy, dataset, checkpointable=False)
    return [trainer.train(data, 1)["loss"] for _ in range(steps)]


def write_reference():
    """Stores TensorFlow's float32 CPU losses for the first REFERENCE_STEPS steps."""
    import keras

    if keras.backend.backend() != "tensorflow":
        sys.exit("--write_reference needs KERAS_BACKEND=tensorflow.")
    losses = tensorflow_losses(tiny_config(), REFERENCE_STEPS)
    note = (
        "albert.training.steps.Trainer, float32, CPU, no XLA; "
        "python benchmarks/gpu_loss_check.py --write_reference"
    )
    with open(REFERENCE_FILE, "w") as f:
        json.dump({"losses": losses, "written_by": note}, f, indent=1)
        f.write("\n")
    print(f"{REFERENCE_FILE}: {losses}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--compare_steps", type=int, default=REFERENCE_STEPS)
    parser.add_argument("--fall_ratio", type=float, default=0.8)
    parser.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    parser.add_argument("--write_reference", action="store_true")
    args = parser.parse_args()
    if args.write_reference:
        return write_reference()
    import keras

    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    config = tiny_config()
    backend = keras.backend.backend()
    print(
        f"tiny config, {args.steps} steps, batch {BATCH}, seq {jax_pretraining.LEARNABLE_SEQ}, "
        f"Keras backend {backend}"
    )
    if backend == "jax":
        import jax

        if args.device == "gpu" and not any(d.platform == "gpu" for d in jax.devices()):
            sys.exit("No GPU visible to JAX.")
        losses = jax_losses(config, args.steps, args.device)
        keras.mixed_precision.set_dtype_policy("float32")
        references = {"JAX float32 CPU": jax_losses(config, args.compare_steps, "cpu")}
    else:
        import tensorflow as tf

        if args.device == "gpu" and not tf.config.list_physical_devices("GPU"):
            sys.exit("No GPU visible to TensorFlow.")
        with tf.device("/GPU:0" if args.device == "gpu" else "/CPU:0"):
            losses = tensorflow_losses(config, args.steps, jit_compile=args.device == "gpu")
        keras.mixed_precision.set_dtype_policy("float32")
        with tf.device("/CPU:0"):
            references = {"TF float32 CPU": tensorflow_losses(config, args.compare_steps)}
    with open(REFERENCE_FILE) as f:
        references["stored TF float32 CPU"] = json.load(f)["losses"]
    name = f"{backend} bf16 {args.device}" + (" XLA" if args.device == "gpu" else "")
    passed = True
    for label, reference in references.items():
        rows = compare_losses(reference, losses, args.compare_steps)
        print(f"\n{'step':>4s} {label:>22s} {name:>18s}")
        for step, r, x, ok in rows:
            print(f"{step:4d} {r:22.4f} {x:18.4f}  {'ok' if ok else 'OUTSIDE bf16 tolerance'}")
        passed = passed and all(ok for *_, ok in rows)
    falls = loss_falls(losses, args.fall_ratio)
    print(
        f"\nloss: first 5 steps {np.mean(losses[:5]):.3f}, last 20 {np.mean(losses[-20:]):.3f} "
        f"({'falls' if falls else 'does NOT fall'} below {args.fall_ratio}x)"
    )
    passed = passed and falls
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
