"""SQuAD post-processing: model outputs per window -> answer text per question, and files.

v1.1 (`compute_predictions_v1`): in every window of a question, the `n_best_size` highest
start and end logits are paired; a pair is kept when both tokens are context tokens, the
start token has its max context in this window, end >= start, and the span has at most
`max_answer_length` tokens. Pairs are ranked by start + end logit across windows.

v2.0 (`compute_predictions_v2`, the original's XLNet-style head): the beam of
`start_n_top` starts x `end_n_top` ends per window, filtered the same way and ranked by
start + end log-probability. The question's null score is the minimum of `cls_logits` over
its windows (a window that sees the answer pulls it down), as in the original:
`accumulate_predictions_v2` takes that minimum and appends it to a list per question, and
`write_predictions_v2` divides the list's sum by its length, a mean over the one entry that
run_squad_v2.py ever puts there (fresh dicts, one accumulate call per checkpoint). It is
written to `null_odds.json`; the prediction is "" when it exceeds `null_score_diff_threshold`,
which evaluation chooses on dev (`albert.metrics.squad_threshold.tune_null_threshold`).

Every answer is `context_text[first:last + 1].strip()`, the characters of its tokens in the
original context (see `albert.data.squad_alignment`); duplicates in the n-best are dropped.

Two small departures from the original, both deliberate: a v1 question with no valid span
gets "" (the original writes the word "empty", which is not in the context), and a v2 answer
is nulled when its null score is strictly above the threshold, the official evaluation's
rule (the original also nulls it at equality), so that the tuned threshold's predictions
score the `best_f1` the evaluation reports. `write_predictions` writes the same three JSON
files as the original.

Typical use by a prediction loop:

    results = {}
    for batch in data.dataset.batch(32):
        outputs = model(batch, training=False)
        results.update(results_by_unique_id(batch["unique_ids"], outputs))
    predictions, nbest, null_odds = compute_predictions_v2(data.examples, data.features, results)
    write_predictions(output_dir, predictions, nbest, null_odds)
"""

from __future__ import annotations

import collections
import dataclasses
import os

import numpy as np

from albert import fileio
from albert.errors import AlbertError


class SquadPredictionError(AlbertError):
    """Model outputs that do not match the features they should answer."""


def results_by_unique_id(unique_ids, outputs, is_real_example=None) -> dict:
    """Splits a batch of model outputs into one dict of arrays per feature.

    Args:
        unique_ids: [B] the batch's `unique_ids` input.
        outputs: dict name -> array [B, ...] (the model's output dict).
        is_real_example: [B] or None; rows with 0 (batch padding) are dropped.

    Returns:
        dict unique id (int) -> dict name -> numpy array (one row).
    """
    unique_ids = np.asarray(unique_ids).reshape(-1)
    arrays = {name: np.asarray(value) for name, value in outputs.items()}
    real = np.ones_like(unique_ids) if is_real_example is None else np.asarray(is_real_example)
    return {
        int(uid): {name: value[row] for name, value in arrays.items()}
        for row, uid in enumerate(unique_ids)
        if real[row]
    }


@dataclasses.dataclass
class _Candidate:
    feature: object
    start: int
    end: int
    start_score: float
    end_score: float


def _features_by_example(features):
    grouped = collections.defaultdict(list)
    for feature in features:
        grouped[feature.example_index].append(feature)
    return grouped


def _result(results, feature):
    if feature.unique_id not in results:
        raise SquadPredictionError(
            f"No model output for feature {feature.unique_id} (example "
            f"{feature.example_index}); predict every feature of the file before "
            "post-processing."
        )
    return results[feature.unique_id]


def _is_valid(feature, start, end, max_answer_length):
    """The original's filter: context tokens, start at its max context, a short forward span."""
    return (
        start in feature.token_to_orig_map
        and end in feature.token_to_orig_map
        and feature.token_is_max_context.get(start, False)
        and start <= end
        and end - start + 1 <= max_answer_length
    )


def answer_text(context_text, feature, start, end) -> str:
    """The original characters of tokens start..end of `feature` (whitespace stripped)."""
    first = feature.token_to_orig_map[start][0]
    last = feature.token_to_orig_map[end][1]
    return context_text[first : last + 1].strip()


def _top_indices(logits, n):
    """Indices of the n largest values, largest first (ties: lower index first)."""
    return np.argsort(-np.asarray(logits), kind="stable")[:n].tolist()


def _softmax(scores):
    scores = np.asarray(scores, np.float64)
    exp = np.exp(scores - scores.max())
    return (exp / exp.sum()).tolist()


def _nbest(example, candidates, n_best_size, score_names, empty_score):
    """Ranks candidates, keeps distinct texts, adds probabilities; never returns []."""
    candidates = sorted(candidates, key=lambda c: c.start_score + c.end_score, reverse=True)
    nbest, seen = [], set()
    for candidate in candidates:
        if len(nbest) >= n_best_size:
            break
        text = answer_text(example.context_text, candidate.feature, candidate.start, candidate.end)
        if text in seen:
            continue
        seen.add(text)
        nbest.append((text, candidate.start_score, candidate.end_score))
    if not nbest:
        nbest.append(("", empty_score, empty_score))
    probabilities = _softmax([start + end for _, start, end in nbest])
    return [
        {
            "text": text,
            "probability": probability,
            score_names[0]: float(start),
            score_names[1]: float(end),
        }
        for (text, start, end), probability in zip(nbest, probabilities, strict=True)
    ]


def compute_predictions_v1(
    examples, features, results, n_best_size=20, max_answer_length=30
) -> tuple:
    """SQuAD v1.1 answers from start/end logits.

    Args:
        examples: the `SquadExample`s.
        features: their `SquadFeature`s (from `albert.data.squad.load_features`).
        results: dict unique id -> {"start_logits": [T], "end_logits": [T]}.
        n_best_size: candidates per question (and starts/ends tried per window).
        max_answer_length: longest answer, in tokens.

    Returns:
        (predictions, nbest): OrderedDicts question id -> text, and question id -> list of
        {"text", "probability", "start_log_prob", "end_log_prob"} (the original's names,
        though they hold logits), best first. A question with no valid span gets "".
    """
    grouped = _features_by_example(features)
    predictions, all_nbest = collections.OrderedDict(), collections.OrderedDict()
    for example_index, example in enumerate(examples):
        candidates = []
        for feature in grouped[example_index]:
            result = _result(results, feature)
            start_logits, end_logits = result["start_logits"], result["end_logits"]
            for start in _top_indices(start_logits, n_best_size):
                for end in _top_indices(end_logits, n_best_size):
                    if _is_valid(feature, start, end, max_answer_length):
                        candidates.append(
                            _Candidate(feature, start, end, start_logits[start], end_logits[end])
                        )
        nbest = _nbest(example, candidates, n_best_size, ("start_log_prob", "end_log_prob"), 0.0)
        predictions[example.qas_id] = nbest[0]["text"]
        all_nbest[example.qas_id] = nbest
    return predictions, all_nbest


def compute_predictions_v2(
    examples,
    features,
    results,
    n_best_size=20,
    max_answer_length=30,
    null_score_diff_threshold=None,
) -> tuple:
    """SQuAD v2.0 answers and null odds from the v2 head's beam outputs.

    Args:
        examples, features: as `compute_predictions_v1`.
        results: dict unique id -> {"start_top_log_probs", "start_top_index" [start_n_top],
            "end_top_log_probs", "end_top_index" [start_n_top * end_n_top], "cls_logits"}.
        n_best_size, max_answer_length: as `compute_predictions_v1`.
        null_score_diff_threshold: predict "" when the null score exceeds it; None always
            predicts the best non-null answer (what
            `albert.metrics.squad_threshold.tune_null_threshold` needs).

    Returns:
        (predictions, nbest, null_odds): OrderedDicts question id -> text; -> list of
        {"text", "probability", "start_log_prob", "end_log_prob"}; -> null score (float).
    """
    grouped = _features_by_example(features)
    predictions, all_nbest = collections.OrderedDict(), collections.OrderedDict()
    null_odds = collections.OrderedDict()
    for example_index, example in enumerate(examples):
        candidates, score_null = [], None
        for feature in grouped[example_index]:
            result = _result(results, feature)
            cls_logit = float(np.asarray(result["cls_logits"]).reshape(()))
            score_null = cls_logit if score_null is None else min(score_null, cls_logit)
            start_index = np.asarray(result["start_top_index"]).tolist()
            end_index = np.asarray(result["end_top_index"]).tolist()
            end_n_top = len(end_index) // len(start_index)
            for i, start in enumerate(start_index):
                for j in range(i * end_n_top, (i + 1) * end_n_top):
                    end = end_index[j]
                    if _is_valid(feature, start, end, max_answer_length):
                        candidates.append(
                            _Candidate(
                                feature,
                                start,
                                end,
                                result["start_top_log_probs"][i],
                                result["end_top_log_probs"][j],
                            )
                        )
        if score_null is None:
            raise SquadPredictionError(f"Question {example.qas_id} has no feature.")
        nbest = _nbest(example, candidates, n_best_size, ("start_log_prob", "end_log_prob"), -1e6)
        null_odds[example.qas_id] = score_null
        predictions[example.qas_id] = nbest[0]["text"]
        if null_score_diff_threshold is not None and score_null > null_score_diff_threshold:
            predictions[example.qas_id] = ""
        all_nbest[example.qas_id] = nbest
    return predictions, all_nbest, null_odds


def write_predictions(output_dir, predictions, nbest, null_odds=None) -> dict:
    """Writes `predictions.json`, `nbest_predictions.json` and (v2) `null_odds.json`.

    Each file is written whole or not at all (`albert.fileio`), on any tf.io.gfile path
    (local, gs://); `output_dir` is created if needed.

    Returns:
        dict file kind ("predictions", "nbest", "null_odds") -> path written.
    """
    contents = {"predictions": predictions, "nbest": nbest}
    if null_odds is not None:
        contents["null_odds"] = null_odds
    names = {
        "predictions": "predictions.json",
        "nbest": "nbest_predictions.json",
        "null_odds": "null_odds.json",
    }
    paths = {}
    for kind, content in contents.items():
        paths[kind] = os.path.join(output_dir, names[kind])
        fileio.write_json(paths[kind], content)
    return paths
