"""The rows of the training benchmark (`bench_training.py`): each row's step and its setup.

- ours: `albert.training.steps.Trainer` (the engine run_pretraining.py uses: LAMB, global-norm
  clipping, MLM gathered at 20 positions + SOP), one step per host call; under Keras' JAX
  backend (`jax_pretraining`) on a machine without TensorFlow.
- hf: transformers `AlbertForPreTraining` (PyTorch), AdamW, fp32 or bf16 autocast.
- keras_hub: keras-hub `AlbertMaskedLM` (MLM only, no SOP head), Adam, `train_on_batch`.

A runner builds its model on one synthetic batch and returns `step()`, which runs one whole
training step and returns when it is done (not merely queued).
"""

import importlib.util
import os
import sys
import tempfile

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
    from albert.tasks.pretraining import PretrainingTask
    from albert.training.inputs import DistributedInput
    from albert.training.optimization import create_optimizer
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
    trainer = Trainer(strategy, task, model, optimizer, global_step, jit_compile=args.jit == 1)
    data = DistributedInput(strategy, lambda ctx: task.train_dataset(ctx, 0), checkpointable=False)
    return lambda: trainer.train(data, 1)


def run_ours_jax(args, config_values):
    """Ours under Keras' JAX backend (`jax_pretraining`): for a GPU machine without TensorFlow."""
    import jax
    import keras
    import numpy as np

    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import jax_pretraining

    from albert.training.optimization import create_optimizer

    if args.precision == "bfloat16":
        keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    device = jax.devices("gpu" if args.device == "gpu" else "cpu")[0]
    batch = synthetic_batch(np, config_values, args.batch, args.seq)
    with jax.default_device(device):
        model = jax_pretraining.pretrainer(config_values, args.batch, args.seq, PREDICTIONS)
        optimizer, _ = create_optimizer("lamb", 1e-4, 1000, 10, aggregate_gradients=False)
        train_step = jax_pretraining.make_train_step(model, optimizer)
        state = [jax_pretraining.initial_state(model, optimizer)]
        batch = jax.device_put(batch, device)

    def step():
        loss, state[0] = train_step(state[0], batch)
        loss.block_until_ready()  # the step is queued, not done

    return step


def run_hf(args, config_values):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count())
    device = "cuda" if args.device == "gpu" else "cpu"
    values = dict(config_values, hidden_act="gelu_new")  # the original's "gelu"
    model = transformers.AlbertForPreTraining(transformers.AlbertConfig(**values)).train()
    model = model.to(device)
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
    inputs = {name: value.to(device) for name, value in inputs.items()}

    def step():
        optimizer.zero_grad()
        with torch.autocast(device, torch.bfloat16, args.precision == "bfloat16"):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()  # the step's kernels are queued, not done

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
        # XLA on GPU; on CPU only in float32 (bfloat16 XLA:CPU dots are slow).
        jit_compile=args.device == "gpu" or args.precision != "bfloat16",
    )
    batch = synthetic_batch(np, config_values, args.batch, args.seq)
    x = {
        "token_ids": batch["input_ids"],
        "padding_mask": batch["input_mask"].astype(bool),
        "segment_ids": batch["segment_ids"],
        "mask_positions": batch["masked_lm_positions"],
    }
    y, weights = batch["masked_lm_ids"], batch["masked_lm_weights"]

    def step():
        model.train_on_batch(x, y, weights)
        # On JAX the step is queued when train_on_batch returns: wait for its update, or it
        # runs during the next row's turn.
        keras.ops.convert_to_numpy(model.optimizer.iterations)

    return step


# ours: (precision, XLA) paths; peers: (label, precision).
ROWS = {
    "ours": [("float32", True), ("bfloat16", True), ("bfloat16", False)],
    "hf": [("HF transformers (PyTorch)", "float32"), ("HF transformers (autocast)", "bfloat16")],
    "keras_hub": [
        ("keras-hub AlbertMaskedLM (XLA)", "float32"),
        ("keras-hub AlbertMaskedLM (no XLA)", "bfloat16"),
    ],
}


OURS_ALL = [("float32", True), ("float32", False), ("bfloat16", True), ("bfloat16", False)]


def ours_label(jit, backend="tensorflow"):
    engine = "Trainer" if backend == "tensorflow" else "Keras on JAX"
    return f"ours ({engine}, LAMB, {'XLA' if jit else 'no XLA'})"


def auto_path(device):
    """(precision, XLA) that run_pretraining.py picks on this machine, and why."""
    sys.path.insert(0, ROOT)
    from albert.training import hardware

    if device == "gpu":  # without importing TensorFlow, which may hold the GPU
        choice = hardware.choose(hardware.DeviceDescription("gpu", compute_capability=None))
    elif importlib.util.find_spec("tensorflow") is None:  # the same choice from /proc/cpuinfo
        choice = hardware.choose(hardware.DeviceDescription("cpu", hardware.read_cpu_flags()))
    else:
        choice = hardware.choose(hardware.describe_machine("default"))
    precision = "float32" if choice.precision == "none" else choice.precision
    return precision, choice.jit_compile, choice.reason


def planned_rows(args):
    """[(which, label, precision, jit)] for `--rows`, `--precisions` and `--ours_paths`,
    with run_pretraining's default path among ours."""
    precisions = args.precisions.split(",")
    planned = []
    for which in args.rows.split(","):
        if which == "ours":
            paths = {"all": OURS_ALL, "main": ROWS["ours"], "default": []}[args.ours_paths]
            if args.device == "gpu":
                paths = []  # the auto path: bfloat16 with XLA
            paths = [p for p in paths if p[0] in precisions]
            if args.ours_backend == "jax":  # jax.jit: always XLA
                paths = [(p, True) for p in precisions]
                args.auto_path = (args.auto_path[0], True, args.auto_path[2])
            if args.auto_path[:2] not in paths:
                paths.append(args.auto_path[:2])
            which = "ours" if args.ours_backend == "tensorflow" else "ours_jax"
            planned += [
                (which, ours_label(jit, args.ours_backend), p, int(jit)) for p, jit in paths
            ]
        else:
            for label, p in ROWS[which]:
                if p in precisions:
                    if which == "keras_hub" and args.device == "gpu":
                        label = label.replace("no XLA", "XLA")  # compiled on a GPU
                    planned.append((which, label, p, -1))
    return planned


RUNNERS = {"ours": run_ours, "ours_jax": run_ours_jax, "hf": run_hf, "keras_hub": run_keras_hub}
