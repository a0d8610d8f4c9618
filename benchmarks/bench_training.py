"""Pretraining-step throughput (MLM + SOP, forward + backward + update) beside peers.

    python benchmarks/bench_training.py [--config=albert/configs/albert_base_v2.json] [--seq=128]
        [--batch=8] [--steps=5] [--rows=ours,hf,keras_hub]

Each row runs in its own subprocess. They are started one after the other (compiling and
warming up alone), then take turns one step at a time, `--steps` rounds, so that a slow spell of
a shared machine hits every row alike; each row reports the median of its step times:
- ours: `albert.training.steps.Trainer` (the engine run_pretraining.py uses: LAMB, global-norm
  clipping, MLM gathered at 20 positions + SOP), one step per host call, XLA on.
- hf: transformers `AlbertForPreTraining` (PyTorch), AdamW, fp32 or bf16 autocast.
- keras_hub: keras-hub `AlbertMaskedLM` (MLM only, no SOP head), Adam, `train_on_batch`,
  fp32 with XLA, bf16 without (as its docs recommend on CPU).
Peak resident memory of each subprocess is reported beside its throughput. Rows whose
packages are missing are skipped; a row whose steps take over `--max_step_seconds` stops taking
turns and reports the steps it ran.
"""

import argparse
import json
import os
import resource
import select
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREDICTIONS = 20


WARMUP_STEPS = 2


def synthetic_batch(np, config, batch, seq):
    rng = np.random.RandomState(0)
    positions = np.sort(rng.choice(np.arange(1, seq - 1), (batch, PREDICTIONS)), axis=1)
    return {
        "input_ids": rng.randint(5, config["vocab_size"], (batch, seq)).astype("int32"),
        "input_mask": np.ones((batch, seq), "int32"),
        "segment_ids": (np.arange(seq)[None, :] >= seq // 2).repeat(batch, 0).astype("int32"),
        "masked_lm_positions": positions.astype("int32"),
        "masked_lm_ids": rng.randint(5, config["vocab_size"], (batch, PREDICTIONS)).astype("int32"),
        "masked_lm_weights": np.ones((batch, PREDICTIONS), "float32"),
        "next_sentence_labels": rng.randint(0, 2, (batch, 1)).astype("int32"),
    }


def run_ours(args, config_values):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, ROOT)
    from albert.config import AlbertConfig
    from albert.data import records
    from albert.training.inputs import DistributedInput
    from albert.training.optimization import create_optimizer
    from albert.training.pretraining import PretrainingTask
    from albert.training.steps import Trainer

    if args.precision == "bfloat16":
        keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    batch = synthetic_batch(np, config_values, args.batch, args.seq)
    path = os.path.join(tempfile.mkdtemp(), "train.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(args.batch):
            length = args.seq
            writer.write(
                records.serialize_instance(
                    batch["input_ids"][i],
                    batch["segment_ids"][i],
                    [1] * length,
                    batch["masked_lm_positions"][i],
                    batch["masked_lm_ids"][i],
                    int(batch["next_sentence_labels"][i, 0]),
                    args.seq,
                    PREDICTIONS,
                )
            )
    strategy = tf.distribute.get_strategy()
    task = PretrainingTask(
        AlbertConfig.from_dict(config_values), path, args.batch, args.batch, args.seq, PREDICTIONS
    )
    model = task.create_model()
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    optimizer, _ = create_optimizer(
        "lamb", 1e-4, 1000, 10, global_step=global_step, aggregate_gradients=False
    )
    optimizer.build(model.trainable_variables)
    trainer = Trainer(strategy, task, model, optimizer, global_step, jit_compile=True)
    data = DistributedInput(strategy, lambda ctx: task.train_dataset(ctx, 0), checkpointable=False)
    return lambda: trainer.train(data, 1)


def run_hf(args, config_values):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    values = dict(config_values, hidden_act="gelu_new")  # the original's "gelu"
    model = transformers.AlbertForPreTraining(transformers.AlbertConfig(**values)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    import numpy as np

    batch = synthetic_batch(np, config_values, args.batch, args.seq)
    ids = torch.tensor(batch["input_ids"], dtype=torch.long)
    labels = torch.full_like(ids, -100)
    rows = np.arange(args.batch)[:, None]
    labels[rows, batch["masked_lm_positions"]] = torch.tensor(
        batch["masked_lm_ids"], dtype=torch.long
    )
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.tensor(batch["input_mask"], dtype=torch.long),
        "token_type_ids": torch.tensor(batch["segment_ids"], dtype=torch.long),
        "labels": labels,
        "sentence_order_label": torch.tensor(batch["next_sentence_labels"][:, 0], dtype=torch.long),
    }

    def step():
        optimizer.zero_grad()
        with torch.autocast("cpu", torch.bfloat16, args.precision == "bfloat16"):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    return step


def run_keras_hub(args, config_values):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import keras_hub
    import numpy as np

    if args.precision == "bfloat16":
        keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    c = config_values
    backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=c["vocab_size"],
        num_layers=c["num_hidden_layers"],
        num_heads=c["num_attention_heads"],
        num_groups=c["num_hidden_groups"],
        num_inner_repetitions=c["inner_group_num"],
        embedding_dim=c["embedding_size"],
        hidden_dim=c["hidden_size"],
        intermediate_dim=c["intermediate_size"],
        dropout=c["hidden_dropout_prob"],
        max_sequence_length=c["max_position_embeddings"],
    )
    model = keras_hub.models.AlbertMaskedLM(backbone, preprocessor=None)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4, global_clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[],
        jit_compile=args.precision != "bfloat16",
    )
    batch = synthetic_batch(np, config_values, args.batch, args.seq)
    x = {
        "token_ids": batch["input_ids"],
        "padding_mask": batch["input_mask"].astype(bool),
        "segment_ids": batch["segment_ids"],
        "mask_positions": batch["masked_lm_positions"],
    }
    y, weights = batch["masked_lm_ids"], batch["masked_lm_weights"]
    return lambda: model.train_on_batch(x, y, weights)


ROWS = {
    "ours": [("ours (Trainer, LAMB, XLA)", "float32"), ("ours (Trainer, LAMB, XLA)", "bfloat16")],
    "hf": [("HF transformers (PyTorch)", "float32"), ("HF transformers (autocast)", "bfloat16")],
    "keras_hub": [("keras-hub AlbertMaskedLM (XLA)", "float32"), ("keras-hub", "bfloat16")],
}
RUNNERS = {"ours": run_ours, "hf": run_hf, "keras_hub": run_keras_hub}


def serve(args, config_values):
    """The row process: build, warm up, then run one step per `step` line on stdin."""
    step = RUNNERS[args.one](args, config_values)
    for _ in range(WARMUP_STEPS):
        step()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "step":
            break
        start = time.perf_counter()
        step()
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_mib": peak_mib}), flush=True)


class Row:
    """One row's subprocess, spoken to one JSON line at a time."""

    def __init__(self, which, label, precision, args):
        self.which, self.label, self.precision = which, label, precision
        self.times, self.error, self.peak_mib = [], None, None
        self.log = tempfile.TemporaryFile("w+")
        command = [sys.executable, __file__, f"--one={which}", f"--precision={precision}"]
        command += [f"--config={args.config}", f"--seq={args.seq}", f"--batch={args.batch}"]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True
        )

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

    def finish(self):
        if self.process.poll() is None:
            self.process.stdin.write("quit\n")
            self.process.stdin.flush()
            reply = self.read(60)
            self.peak_mib = reply and reply["peak_mib"]
        self.process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", default=os.path.join(ROOT, "albert/configs/albert_base_v2.json")
    )
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5, help="Timed steps (turns) per row.")
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
    parser.add_argument("--precisions", default="float32,bfloat16")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="float32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    with open(args.config) as f:
        config_values = json.load(f)
    if args.one:
        return serve(args, config_values)

    print(f"Training step, {os.path.basename(args.config)}, global batch {args.batch}, ")
    print(f"seq {args.seq}, {os.cpu_count()} cores, median of {args.steps} interleaved steps\n")
    rows = []
    for which in args.rows.split(","):
        for label, precision in ROWS[which]:
            if precision not in args.precisions.split(","):
                continue
            row = Row(which, label, precision, args)
            if row.read(args.row_timeout):
                rows.append(row)
            else:
                print(f"{label:34s} {precision:10s} {row.error}")
    for _ in range(args.steps):
        for row in rows:
            slow = row.times and row.times[-1] > args.max_step_seconds
            if not row.error and not slow:
                time.sleep(args.settle_seconds)  # the previous row's threads go idle
                row.step(args.max_step_seconds * 5)
    print(f"{'implementation':34s} {'precision':10s} {'seq/s':>7s} {'peak RSS':>10s}")
    results = {}
    for row in rows:
        row.finish()
        if not row.times:
            print(f"{row.label:34s} {row.precision:10s} {row.error}")
            continue
        rate = args.batch / sorted(row.times)[len(row.times) // 2]
        if args.verbose:
            print(" ".join(f"{t:.2f}" for t in row.times))
        results[(row.which, row.precision)] = rate
        note = f"  ({len(row.times)} steps)" if len(row.times) < args.steps else ""
        peak = f"{row.peak_mib:7.0f} MiB" if row.peak_mib else "    n/a"
        print(f"{row.label:34s} {row.precision:10s} {rate:7.2f} {peak}{note}")
    print()
    ours = max((v for (w, _), v in results.items() if w == "ours"), default=None)
    peers = {k: v for k, v in results.items() if k[0] != "ours"}
    if ours and peers:
        best_key = max(peers, key=peers.get)
        print(f"best ours / best peer ({best_key[0]} {best_key[1]}): {ours / peers[best_key]:.2f}x")


if __name__ == "__main__":
    main()
