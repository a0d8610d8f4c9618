"""The SQuAD 2.0 null threshold, chosen on dev data and scored as the original does.

A v2.0 prediction is "" when its question's null score (`null_odds.json`, the minimum of the
answer-class logit over the question's windows; see `albert.data.squad_postprocessing`)
exceeds `null_score_diff_threshold`. On dev, `tune_null_threshold` picks that threshold as the
official evaluation's `best_f1_thresh` and scores the thresholded predictions as the
original's `evaluate_v2` does: with the official evaluation's `na_prob_thresh` of 1.0 applied
to the null scores, which are raw answer-class logits here, not probabilities. So an answer
whose null score is above 1.0 counts as "no answer" in the reported `exact`/`f1` even when
the tuned threshold keeps it in `predictions.json`; the two differ only when the tuned
threshold is above 1.0. These are the numbers the official v2.0 script prints for our
`predictions.json` with `--na-prob-file null_odds.json`.

An answer is nulled when its null score is strictly above the threshold, the official
evaluation's rule (the original also nulls it at equality), so that the tuned predictions
score the `best_f1` the evaluation reports (exactly, unless several questions share the
threshold's null score).

Example:
    >>> answers, _, null_odds = compute_predictions_v2(examples, features, results)
    >>> tuned = tune_null_threshold(dev["data"], answers, null_odds)
    >>> tuned.threshold, tuned.evaluation["f1"]
"""

from __future__ import annotations

import collections
import dataclasses
import os

from albert import fileio
from albert.metrics import squad as squad_metrics


def apply_null_threshold(predictions, null_odds, threshold) -> dict:
    """Predictions with "" wherever the null odds exceed `threshold` (the official rule)."""
    return collections.OrderedDict(
        (qid, "" if null_odds[qid] > threshold else text) for qid, text in predictions.items()
    )


@dataclasses.dataclass
class NullThreshold:
    """What `tune_null_threshold` returns.

    Attributes:
        threshold: the chosen null score threshold.
        predictions: the predictions with it applied.
        evaluation: `albert.metrics.squad.evaluate_v2` at that threshold (with best_*).
    """

    threshold: float
    predictions: dict
    evaluation: dict


def tune_null_threshold(
    dataset, predictions, null_odds, output_dir=None, metric="f1", na_prob_thresh=1.0
):
    """Chooses the null threshold on dev data and scores it as the original's `evaluate_v2`.

    Args:
        dataset: the `"data"` list of the dev SQuAD 2.0 file.
        predictions: best non-null answers (`compute_predictions_v2` with no threshold).
        null_odds: question id -> null score.
        output_dir: when given, `predictions.json` there is rewritten with the threshold
            (the format of `albert.data.squad_postprocessing.write_predictions`).
        metric: "f1" (the original's choice, `best_f1_thresh`) or "exact".
        na_prob_thresh: the official evaluation's threshold, applied to the null scores when
            scoring the thresholded predictions (not to `predictions`): 1.0 as the original
            (an answer with a null score above 1.0 scores as "no answer"); None scores the
            predictions alone, so that `f1` equals `best_f1`.

    Returns:
        A `NullThreshold`. Its `best_*` are those of the search, which thresholding at the
        searched value does not change.
    """
    if metric not in ("f1", "exact"):
        raise ValueError(f"metric must be 'f1' or 'exact'; received {metric!r}.")
    evaluation = squad_metrics.evaluate_v2(dataset, predictions, null_odds)
    threshold = evaluation[f"best_{metric}_thresh"]
    thresholded = apply_null_threshold(predictions, null_odds, threshold)
    if na_prob_thresh is None:
        na_prob_thresh = threshold  # Nulls exactly what thresholding nulled already.
    evaluation = squad_metrics.evaluate_v2(dataset, thresholded, null_odds, na_prob_thresh)
    if output_dir:
        fileio.write_json(os.path.join(output_dir, "predictions.json"), thresholded)
    return NullThreshold(threshold, thresholded, evaluation)
