"""GLUE metrics (numpy only).

Metrics by task, as `compute_metrics` returns them:

    cola                      matthews_corr (main), accuracy
    sts-b                     pearson (main), spearman (ties get average ranks), mse
    mrpc, qqp                 accuracy (main), f1 (positive class "1")
    every other task          accuracy (main)

The main metric picks the best checkpoint. It follows the original `run_classifier.py`
(Matthews correlation for CoLA, Pearson for STS-B, accuracy otherwise) and the dev scores the
paper reports; the GLUE leaderboard scores MRPC and QQP by the mean of F1 and accuracy, and
both are reported. Correlations of a constant input are undefined; they are 0.0 here (as
scikit-learn does for Matthews), so a collapsed model is never the best checkpoint by NaN.
Task names resolve through `albert.glue_tasks`; the test-set files are written by
`albert.tasks.glue_submission`.
"""

from __future__ import annotations

import numpy as np

from albert.glue_tasks import GlueDataError, get_task


def accuracy(predictions, labels):
    """Fraction of predictions equal to the labels. predictions, labels: [N] class ids."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float(np.mean(predictions == labels))


def f1_score(predictions, labels, positive=1):
    """F1 of the class `positive`: 2 TP / (2 TP + FP + FN); 0.0 when there are no positives.

    Args:
        predictions, labels: [N] class ids.
        positive: the class whose precision and recall are combined.
    """
    predicted = np.asarray(predictions) == positive
    actual = np.asarray(labels) == positive
    true_positives = np.sum(predicted & actual)
    denominator = np.sum(predicted) + np.sum(actual)  # 2 TP + FP + FN
    return float(2 * true_positives / denominator) if denominator else 0.0


def matthews_corrcoef(predictions, labels):
    """Matthews correlation of class ids; for K > 2 classes Gorodkin's R_K (GLUE's AX metric).

    With the confusion matrix C (rows: labels, columns: predictions), c = trace(C),
    s = N, t = row sums and p = column sums:
        MCC = (c s - p.t) / sqrt((s^2 - p.p) (s^2 - t.t)),
    which for two classes is (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)).
    0.0 when the denominator is 0 (all labels or all predictions are one class).

    Args:
        predictions, labels: [N] non-negative class ids.
    """
    predictions, labels = np.asarray(predictions, np.int64), np.asarray(labels, np.int64)
    num_classes = int(max(predictions.max(initial=0), labels.max(initial=0))) + 1
    confusion = np.zeros([num_classes, num_classes], np.float64)  # [labels, predictions]
    np.add.at(confusion, (labels, predictions), 1.0)
    correct, total = np.trace(confusion), confusion.sum()
    true_counts, predicted_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    numerator = correct * total - predicted_counts @ true_counts
    denominator = np.sqrt(
        (total**2 - predicted_counts @ predicted_counts) * (total**2 - true_counts @ true_counts)
    )
    return float(numerator / denominator) if denominator else 0.0


def pearson_correlation(x, y):
    """Pearson's r of two [N] float arrays; 0.0 when either is constant."""
    x = np.asarray(x, np.float64) - np.mean(x)
    y = np.asarray(y, np.float64) - np.mean(y)
    denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
    return float(np.sum(x * y) / denominator) if denominator else 0.0


def average_ranks(values):
    """1-based ranks of [N] values; tied values share the mean of the ranks they span.

    Example: [10, 20, 20, 30] -> [1, 2.5, 2.5, 4].
    """
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts_group = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    group = np.cumsum(starts_group) - 1  # [N] tie group of each sorted position
    starts = np.flatnonzero(starts_group)
    ends = np.append(starts[1:], len(values))  # exclusive
    # Positions start..end-1 hold ranks start+1..end, whose mean is (start + 1 + end) / 2.
    group_rank = (starts + 1 + ends) / 2.0
    ranks = np.empty(len(values), np.float64)
    ranks[order] = group_rank[group]
    return ranks


def spearman_correlation(x, y):
    """Spearman's rho: Pearson's r of the average ranks (so ties are handled)."""
    return pearson_correlation(average_ranks(x), average_ranks(y))


def main_metric(task_name):
    """The metric whose highest value marks a task's best checkpoint (see the module doc)."""
    name = get_task(task_name).name
    return {"cola": "matthews_corr", "sts-b": "pearson"}.get(name, "accuracy")


def class_predictions(task, outputs):
    """[N] class ids (or [N, C] scores, arg-maxed), or [N] / [N, 1] scores for regression."""
    outputs = np.asarray(outputs)
    if task.is_regression:
        return outputs.reshape(len(outputs), -1)[:, 0].astype(np.float64)
    return outputs.argmax(axis=-1) if outputs.ndim == 2 else outputs.astype(np.int64)


def compute_metrics(task_name, predictions, labels, weights=None):
    """The task's metrics (see the module doc) of predictions against labels.

    Args:
        task_name: a `--task_name`.
        predictions: [N] class ids or [N, C] logits / probabilities; for STS-B [N] or [N, 1]
            predicted scores.
        labels: [N] class ids (`label_ids`), or scores for STS-B.
        weights: optional [N] `is_real_example`; examples with weight 0 (padding) are left
            out.

    Returns:
        dict of metric name -> float; `main_metric(task_name)` is one of its keys.
    """
    task = get_task(task_name)
    predictions = class_predictions(task, predictions)
    labels = np.asarray(labels)
    if weights is not None:
        keep = np.asarray(weights) > 0
        predictions, labels = predictions[keep], labels[keep]
    if len(predictions) != len(labels):
        raise GlueDataError(f"{len(predictions)} predictions for {len(labels)} labels.")
    if task.is_regression:
        labels = labels.astype(np.float64)
        return {
            "pearson": pearson_correlation(predictions, labels),
            "spearman": spearman_correlation(predictions, labels),
            "mse": float(np.mean((predictions - labels) ** 2)),
        }
    results = {"accuracy": accuracy(predictions, labels)}
    if task.name == "cola":
        results["matthews_corr"] = matthews_corrcoef(predictions, labels)
    if task.name in ("mrpc", "qqp"):
        results["f1"] = f1_score(predictions, labels)
    return results
