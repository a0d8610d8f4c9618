"""The pretraining loss and metrics against numpy, and the split-across-replicas identity."""

import numpy as np
import tensorflow as tf

from albert.modeling.losses import is_argmax
from albert.tasks.pretraining import (
    pretraining_loss,
    pretraining_metrics,
)

B, P, V = 3, 5, 99


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    weights = np.ones((B, P), "float32")
    weights[0, 3:] = 0.0  # padding predictions
    weights[2, 1:] = 0.0
    features = {
        "masked_lm_ids": rng.integers(0, V, (B, P)).astype("int32"),
        "masked_lm_weights": weights,
        "next_sentence_labels": np.array([[1], [0], [1]], "int32"),
    }
    mlm_logits = rng.normal(size=(B, P, V)).astype("float32") * 3
    sop_logits = rng.normal(size=(B, 2)).astype("float32")
    # Make some predictions right so the accuracies are not trivially 0; two of them at
    # padding predictions, which the accuracy must not count.
    for b, p in ((0, 0), (1, 2), (2, 0), (0, 4), (2, 3)):
        mlm_logits[b, p, features["masked_lm_ids"][b, p]] = 50.0
    return features, mlm_logits, sop_logits


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _normalizers(features, rows=slice(None)):
    return {
        "masked_lm_weight": tf.constant(features["masked_lm_weights"][rows].sum()),
        "examples": tf.constant(float(len(features["masked_lm_weights"][rows]))),
    }


def test_loss_and_metrics_match_numpy():
    features, mlm_logits, sop_logits = _batch()
    loss, sums = pretraining_loss(mlm_logits, sop_logits, features, _normalizers(features))
    ids, w = features["masked_lm_ids"], features["masked_lm_weights"]
    ce = -np.take_along_axis(_log_softmax(mlm_logits), ids[..., None], -1)[..., 0]  # [B, P]
    mlm = (w * ce).sum() / (w.sum() + 1e-5)
    labels = features["next_sentence_labels"][:, 0]
    sop_ce = -_log_softmax(sop_logits)[np.arange(B), labels]
    assert abs(float(loss) - (mlm + sop_ce.mean())) < 1e-5
    metrics = pretraining_metrics({k: float(v) for k, v in sums.items()})
    hits = (mlm_logits.argmax(-1) == ids).astype("float32")
    assert abs(metrics["masked_lm_accuracy"] - (w * hits).sum() / w.sum()) < 1e-6
    assert abs(metrics["masked_lm_loss"] - (w * ce).sum() / w.sum()) < 1e-5
    assert abs(metrics["sentence_order_loss"] - sop_ce.mean()) < 1e-5
    expected = (sop_logits.argmax(-1) == labels).mean()
    assert abs(metrics["sentence_order_accuracy"] - expected) < 1e-6
    assert 0 < metrics["masked_lm_accuracy"] < 1


def test_replica_shares_sum_to_the_global_loss():
    """Each replica divides its numerator by the global totals, so the shares add up."""
    features, mlm_logits, sop_logits = _batch(1)
    total, _ = pretraining_loss(mlm_logits, sop_logits, features, _normalizers(features))
    shares = 0.0
    for rows in (slice(0, 1), slice(1, 3)):  # uneven split
        part = {k: v[rows] for k, v in features.items()}
        share, _ = pretraining_loss(
            mlm_logits[rows], sop_logits[rows], part, _normalizers(features)
        )
        shares += float(share)
    assert abs(shares - float(total)) < 1e-5
    # With local totals instead (the mistake this design avoids) the sum differs.
    wrong = 0.0
    for rows in (slice(0, 1), slice(1, 3)):
        part = {k: v[rows] for k, v in features.items()}
        share, _ = pretraining_loss(
            mlm_logits[rows], sop_logits[rows], part, _normalizers(features, rows)
        )
        wrong += float(share)
    assert abs(wrong - float(total)) > 1e-3


def test_metrics_of_an_empty_batch_are_zero_not_nan():
    sums = dict.fromkeys(
        [
            "masked_lm_loss_sum",
            "masked_lm_correct",
            "masked_lm_weight",
            "sentence_order_loss_sum",
            "sentence_order_correct",
            "sentence_order_examples",
        ],
        0.0,
    )
    assert set(pretraining_metrics(sums).values()) == {0.0}


def test_a_batch_without_masked_predictions_has_a_finite_loss():
    # All weights 0 (short records, or padding): the original's 1e-5 keeps the MLM loss 0.
    features, mlm_logits, sop_logits = _batch(2)
    features["masked_lm_weights"] = np.zeros((B, P), "float32")
    loss, sums = pretraining_loss(mlm_logits, sop_logits, features, _normalizers(features))
    assert np.isfinite(float(loss)) and float(sums["masked_lm_loss_sum"]) == 0.0


def test_padding_records_leave_the_sentence_order_sums_alone():
    # The last eval batches are filled with padding records (is_real_example 0, weights 0):
    # the sentence-order loss, accuracy and count must be those of the real records alone.
    features, mlm_logits, sop_logits = _batch(3)
    features["is_real_example"] = np.array([1, 1, 0], "int32")
    features["masked_lm_weights"][2] = 0.0
    sop_logits[2] = [-4.0, 4.0]  # the padding row's (label 1) guess is right, its CE > 0
    real = slice(0, 2)
    normalizers = _normalizers(features, real)
    loss, sums = pretraining_loss(mlm_logits, sop_logits, features, normalizers)
    real_features = {k: v[real] for k, v in features.items() if k != "is_real_example"}
    expected_loss, expected = pretraining_loss(
        mlm_logits[real], sop_logits[real], real_features, normalizers
    )
    assert abs(float(loss) - float(expected_loss)) < 1e-6
    for name in ("sentence_order_loss_sum", "sentence_order_correct", "sentence_order_examples"):
        assert abs(float(sums[name]) - float(expected[name])) < 1e-6, name
    assert float(sums["sentence_order_examples"]) == 2.0


def test_masked_lm_hits_are_numpy_s_argmax_with_ties_to_the_first_index():
    """`is_argmax` is argmax(logits) == id, first index of equal maxima included: logits of
    a few integer values tie often, at the id, before it and after it."""
    rng = np.random.default_rng(3)
    logits = rng.integers(0, 4, (6, 40, 7)).astype("float32")  # [B, P, V]: many ties
    ids = rng.integers(0, 7, (6, 40)).astype("int32")
    ids[:, :10] = logits[:, :10].argmax(-1)  # some hits
    expected = logits.argmax(-1) == ids
    eager = is_argmax(tf.constant(logits), tf.constant(ids)).numpy()
    compiled = tf.function(is_argmax, jit_compile=True)(logits, ids).numpy()
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(compiled, expected)
    assert 0 < expected.sum() < expected.size and (logits.max(-1) == logits[..., 0]).any()
