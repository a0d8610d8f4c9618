"""Our pretraining step under Keras 3's JAX backend, for machines without TensorFlow.

The lent GPU machines hold JAX with CUDA but no TensorFlow (and cannot fetch it), so the GPU
check runs our model there as the same Keras code under JAX: `AlbertPretrainer`,
`albert.modeling.losses.pretraining_loss`, our LAMB (`albert.training.optimization`, written
in `keras.ops`) and global-norm clipping at 1.0, the steps `albert.training.steps.Trainer`
takes under TensorFlow, compiled by `jax.jit` (XLA) into one program per step:

    normalizers = loss_normalizers(batch)
    loss, grads = value_and_grad(pretraining_loss(model(batch)))
    grads       = grads * clip / max(global_norm(grads), clip)
    variables   = lamb.stateless_apply(grads)

Only the step differs from TensorFlow's (`stateless_call` + `jax.value_and_grad` instead of a
`GradientTape`); tests/benchmarks/test_jax_pretraining.py checks that both give the same
losses. Set KERAS_BACKEND=jax before importing this module's callers' Keras.
"""

from __future__ import annotations

import numpy as np

MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
LEARNABLE_SEQ, LEARNABLE_PREDICTIONS = 32, 5


def learnable_batches(vocab_size, steps, batch_size, seed=0):
    """`steps` batches (dicts of numpy arrays) a model can learn quickly: each sequence counts
    up from a random start, so a masked token is its left neighbour plus one.

    Shapes: input_ids, input_mask, segment_ids [B, S]; masked_lm_* [B, P];
    next_sentence_labels [B, 1] (S = 32, P = 5).
    """
    rng = np.random.RandomState(seed)
    seq, predictions = LEARNABLE_SEQ, LEARNABLE_PREDICTIONS
    batches = []
    for _ in range(steps):
        starts = rng.randint(5, vocab_size - seq, batch_size)
        ids = starts[:, None] + np.arange(seq)[None, :]  # [B, S]
        ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
        draws = [rng.choice(np.arange(1, seq - 1), predictions, replace=False) for _ in ids]
        positions = np.sort(np.stack(draws), axis=1)  # [B, P]
        rows = np.arange(batch_size)[:, None]
        targets = ids[rows, positions].copy()
        ids[rows, positions] = 4  # [MASK]
        segments = np.broadcast_to(np.arange(seq) >= seq // 2, (batch_size, seq))
        batches.append(
            {
                "input_ids": ids.astype("int32"),
                "input_mask": np.ones((batch_size, seq), "int32"),
                "segment_ids": segments.astype("int32"),
                "masked_lm_positions": positions.astype("int32"),
                "masked_lm_ids": targets.astype("int32"),
                "masked_lm_weights": np.ones((batch_size, predictions), "float32"),
                "next_sentence_labels": np.zeros((batch_size, 1), "int32"),
            }
        )
    return batches


def set_numpy_weights(model, seed=0, stddev=0.02):
    """Gives `model` weights drawn by numpy from `seed`, the same under every Keras backend:
    kernels and embeddings N(0, stddev), LayerNorm gammas 1, biases and betas 0."""
    rng = np.random.RandomState(seed)
    for weight in sorted(model.weights, key=lambda w: w.path):
        name = weight.path.rsplit("/", 1)[-1]
        shape = tuple(weight.shape)
        if name == "gamma":
            value = np.ones(shape)
        elif name in ("bias", "beta"):
            value = np.zeros(shape)
        else:
            value = rng.normal(0.0, stddev, shape)
        weight.assign(value.astype("float32"))


def make_loss_fn(model):
    """`loss_fn(trainable, non_trainable, batch) -> (loss, non_trainable)`: the pretraining
    loss of `model` run statelessly on those variable values (JAX differentiates it)."""
    from albert.modeling.losses import loss_normalizers, pretraining_loss

    def loss_fn(trainable, non_trainable, batch):
        inputs = {name: batch[name] for name in MODEL_INPUTS}
        outputs, non_trainable = model.stateless_call(
            trainable, non_trainable, inputs, training=True, masked_positions_only=True
        )
        loss, _ = pretraining_loss(
            outputs["mlm_logits"], outputs["sop_logits"], batch, loss_normalizers(batch)
        )
        return loss, non_trainable

    return loss_fn


def make_train_step(model, optimizer, clip_norm=1.0):
    """A jitted `step(state, batch) -> (loss, state)`, where `state = initial_state(...)`."""
    import jax
    from keras import ops

    grad_fn = jax.value_and_grad(make_loss_fn(model), has_aux=True)

    def step(state, batch):
        trainable, non_trainable, optimizer_variables = state
        (loss, non_trainable), grads = grad_fn(trainable, non_trainable, batch)
        # tf.clip_by_global_norm, as the Trainer: g * clip / max(norm, clip).
        norm = ops.sqrt(sum(ops.sum(ops.square(g)) for g in grads))
        grads = [g * (clip_norm / ops.maximum(norm, clip_norm)) for g in grads]
        trainable, optimizer_variables = optimizer.stateless_apply(
            optimizer_variables, grads, trainable
        )
        return loss, (trainable, non_trainable, optimizer_variables)

    return jax.jit(step, donate_argnums=0)


def attention_in(step, state, batch):
    """Which attention kernel the compiled `step` runs: "cuDNN fused attention" when XLA's
    program calls cuDNN's fused multi-head attention, else "XLA ops"."""
    text = step.lower(state, batch).compile().as_text()
    return "cuDNN fused attention" if "cudnn$fmha" in text else "XLA ops"


def initial_state(model, optimizer):
    """The (trainable, non-trainable, optimizer) values `make_train_step`'s step takes."""
    optimizer.build(model.trainable_variables)
    return (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in optimizer.variables],
    )


def pretrainer(config_values, batch_size, seq_length, predictions):
    """Our `AlbertPretrainer` for a config dict, built on a batch of the given shape."""
    from albert.config import AlbertConfig
    from albert.modeling import AlbertPretrainer

    model = AlbertPretrainer(AlbertConfig.from_dict(config_values))
    model(
        {
            "input_ids": np.zeros((batch_size, seq_length), "int32"),
            "input_mask": np.ones((batch_size, seq_length), "int32"),
            "segment_ids": np.zeros((batch_size, seq_length), "int32"),
            "masked_lm_positions": np.zeros((batch_size, predictions), "int32"),
        },
        masked_positions_only=True,
    )
    return model
