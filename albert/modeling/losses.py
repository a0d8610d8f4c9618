"""The pretraining loss (masked LM + sentence order) in `keras.ops`, for any Keras backend.

The original's `get_masked_lm_output` and `get_sentence_order_output` (run_pretraining.py)
over the GLOBAL batch: each replica divides its local numerator by the global denominator
(`loss_normalizers`, summed across replicas by the training loop), so the gradients summed
across replicas are those of one device with the whole batch.

    masked_lm_loss      = sum(w * CE) / (sum(w) + 1e-5)   over the masked positions
    sentence_order_loss = mean CE over the (real) examples

Shapes: B batch, P masked positions per sequence, V vocabulary.
"""

from __future__ import annotations

from keras import ops

# The original adds 1e-5 to the weight sum so that a batch without predictions is finite.
MLM_DENOMINATOR_EPSILON = 1e-5


def pretraining_loss(mlm_logits, sop_logits, features, normalizers):
    """The local share of the pretraining loss, and the local metric sums.

    Args:
        mlm_logits: float32 [B, P, V].
        sop_logits: float32 [B, 2].
        features: dict with `masked_lm_ids` [B, P], `masked_lm_weights` [B, P],
            `next_sentence_labels` [B, 1] (the SOP label) and optionally
            `is_real_example` [B] (0 for padding rows; every row is real without it).
        normalizers: `masked_lm_weight` and `examples` (real ones), summed over the global
            batch.

    Returns:
        (loss, sums): the scalar whose sum over replicas is the global-batch loss, and this
        replica's float sums `masked_lm_loss_sum`, `masked_lm_correct`, `masked_lm_weight`,
        `sentence_order_loss_sum`, `sentence_order_correct` and `sentence_order_examples`.
    """
    ids = ops.cast(features["masked_lm_ids"], "int32")  # [B, P]
    weights = ops.cast(features["masked_lm_weights"], "float32")  # [B, P]
    mlm_ce = ops.sparse_categorical_crossentropy(ids, mlm_logits, from_logits=True)  # [B, P]
    mlm_loss_sum = ops.sum(weights * mlm_ce)
    mlm_loss = mlm_loss_sum / (normalizers["masked_lm_weight"] + MLM_DENOMINATOR_EPSILON)
    mlm_hits = ops.cast(is_argmax(mlm_logits, ids), "float32")  # [B, P]

    labels = ops.cast(ops.reshape(features["next_sentence_labels"], [-1]), "int32")  # [B]
    real = _real_examples(features)  # [B]
    sop_ce = real * ops.sparse_categorical_crossentropy(labels, sop_logits, from_logits=True)
    # A global batch of padding only (the end of an eval set) has no example: loss 0.
    sop_loss = ops.sum(sop_ce) / ops.maximum(normalizers["examples"], 1.0)
    sop_hits = real * ops.cast(
        ops.equal(ops.cast(ops.argmax(sop_logits, -1), "int32"), labels), "float32"
    )

    sums = {
        "masked_lm_loss_sum": mlm_loss_sum,
        "masked_lm_correct": ops.sum(weights * mlm_hits),
        "masked_lm_weight": ops.sum(weights),
        "sentence_order_loss_sum": ops.sum(sop_ce),
        "sentence_order_correct": ops.sum(sop_hits),
        "sentence_order_examples": ops.sum(real),
    }
    return mlm_loss + sop_loss, sums


def is_argmax(logits, ids):
    """bool [...]: whether ids[...] is argmax(logits[..., :]), the first index of the maximum.

    No index before it has a logit >= its logit and none after has one >; one compare-and-
    reduce pass, where XLA:CPU's argmax, a (value, index) reduction, takes about 6x as long
    over [160, 30000] masked-LM logits. logits [..., V], ids int32 [...] in [0, V)."""
    label = ops.take_along_axis(logits, ids[..., None], axis=-1)  # [..., 1]
    before = ops.arange(ops.shape(logits)[-1], dtype="int32") < ids[..., None]  # [..., V]
    beaten = ops.where(before, logits >= label, logits > label)
    return ops.logical_not(ops.any(beaten, axis=-1))


def loss_normalizers(features):
    """The global-batch denominators of `pretraining_loss`, for this replica's share."""
    weights = ops.cast(features["masked_lm_weights"], "float32")
    return {"masked_lm_weight": ops.sum(weights), "examples": ops.sum(_real_examples(features))}


def _real_examples(features):
    """float32 [B]: `is_real_example`, or ones for a batch that has none (every row real)."""
    real = features.get("is_real_example")
    if real is None:
        return ops.ones(ops.shape(features["next_sentence_labels"])[:1], "float32")
    return ops.cast(real, "float32")
