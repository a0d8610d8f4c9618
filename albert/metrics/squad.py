"""The official SQuAD v1.1 and v2.0 evaluation, written from the scripts' specification.

Both scripts compare answers after `normalize_answer` (lower-case, drop punctuation, drop the
articles a/an/the, collapse whitespace) and report exact match (EM) and token F1, each the
maximum over the gold answers of a question, as percentages. They differ in details that move
scores, and each is followed here exactly:

- v1.1 (`evaluate_v1`): every gold answer counts, even one that normalises to ""; F1 is 0
  when prediction and gold share no token (so "" against "" scores F1 0, EM 1); a question
  without a prediction scores 0 and still counts in the total.
- v2.0 (`evaluate_v2`): gold answers that normalise to "" are dropped and a question with no
  gold answer has the single gold answer "" (the right prediction is ""); F1 is 1 when both
  sides have no token; the null odds (`null_odds.json`) turn a prediction into "" when above
  `na_prob_thresh` (1.0 by default), and `find_all_best_thresh` reports the threshold that
  maximises EM and F1 (`best_exact`, `best_exact_thresh`, `best_f1`, `best_f1_thresh`).
  The official script crashes on a question without a prediction; here that is a
  `SquadEvalError` naming it.

`dataset` below is always the list under the `"data"` key of a SQuAD JSON file (articles with
`paragraphs`, each with `context` and `qas`), as the official scripts take it.
"""

from __future__ import annotations

import collections
import json
import re
import string

from albert.errors import AlbertError

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


class SquadEvalError(AlbertError):
    """A dataset or prediction file that cannot be evaluated."""


def normalize_answer(text: str) -> str:
    """Lower-cases, removes punctuation and the articles a/an/the, collapses whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def get_tokens(text: str) -> list:
    """The normalised answer split on whitespace ([] for an empty answer)."""
    return normalize_answer(text).split() if text else []


def compute_exact(gold: str, prediction: str) -> int:
    """1 if the normalised strings are equal, else 0."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def _token_f1(gold_tokens, prediction_tokens):
    common = collections.Counter(gold_tokens) & collections.Counter(prediction_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def compute_f1(gold: str, prediction: str) -> float:
    """Token F1 as v2.0 computes it: 1.0 when both sides normalise to no token."""
    gold_tokens, prediction_tokens = get_tokens(gold), get_tokens(prediction)
    if not gold_tokens or not prediction_tokens:
        return float(gold_tokens == prediction_tokens)
    return _token_f1(gold_tokens, prediction_tokens)


def f1_score_v1(prediction: str, gold: str) -> float:
    """Token F1 as v1.1 computes it: 0.0 whenever no token is shared (even "" vs "")."""
    return _token_f1(normalize_answer(gold).split(), normalize_answer(prediction).split())


def _questions(dataset):
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def evaluate_v1(dataset, predictions) -> dict:
    """The official SQuAD v1.1 evaluation.

    Args:
        dataset: the `"data"` list of a SQuAD JSON file.
        predictions: dict question id -> predicted answer text.

    Returns:
        dict with `exact_match` and `f1` (percentages over every question of `dataset`).

    Raises:
        SquadEvalError: a question has no gold answer (a v2.0 file; use `evaluate_v2`).
    """
    exact_match = f1 = 0.0
    total = 0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            continue  # The official script prints a warning; the question scores 0.
        golds = [answer["text"] for answer in qa["answers"]]
        if not golds:
            raise SquadEvalError(
                f"Question {qa['id']} has no gold answer, so this is a SQuAD 2.0 file; "
                "evaluate it with version 2 (evaluate_v2)."
            )
        prediction = predictions[qa["id"]]
        exact_match += max(
            float(normalize_answer(prediction) == normalize_answer(g)) for g in golds
        )
        f1 += max(f1_score_v1(prediction, g) for g in golds)
    if total == 0:
        raise SquadEvalError("The SQuAD dataset holds no question to evaluate.")
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def make_qid_to_has_ans(dataset) -> dict:
    """dict question id -> True when the question has at least one gold answer."""
    return {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}


def get_raw_scores(dataset, predictions):
    """Per-question EM and F1 before any null threshold (v2.0 rules).

    Returns:
        (exact_scores, f1_scores): dicts question id -> score in [0, 1].

    Raises:
        SquadEvalError: a question of `dataset` has no prediction.
    """
    exact_scores, f1_scores = {}, {}
    missing = []
    for qa in _questions(dataset):
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
        if not golds:
            golds = [""]  # Unanswerable: the only right answer is the empty string.
        if qa["id"] not in predictions:
            missing.append(qa["id"])
            continue
        prediction = predictions[qa["id"]]
        exact_scores[qa["id"]] = max(compute_exact(g, prediction) for g in golds)
        f1_scores[qa["id"]] = max(compute_f1(g, prediction) for g in golds)
    if missing:
        raise SquadEvalError(
            f"{len(missing)} question(s) have no prediction (first: {missing[0]}); predict "
            "every question of the dataset (the empty string means no answer)."
        )
    return exact_scores, f1_scores


def apply_no_ans_threshold(scores, na_probs, qid_to_has_ans, na_prob_thresh):
    """Scores after predicting "" for every question whose null odds exceed the threshold."""
    new_scores = {}
    for qid, score in scores.items():
        if na_probs[qid] > na_prob_thresh:
            new_scores[qid] = float(not qid_to_has_ans[qid])
        else:
            new_scores[qid] = score
    return new_scores


def make_eval_dict(exact_scores, f1_scores, qid_list=None) -> dict:
    """Percent EM/F1 and the count, over `qid_list` or every scored question."""
    qids = list(exact_scores) if qid_list is None else list(qid_list)
    total = len(qids)
    return collections.OrderedDict(
        [
            ("exact", 100.0 * sum(exact_scores[k] for k in qids) / total),
            ("f1", 100.0 * sum(f1_scores[k] for k in qids) / total),
            ("total", total),
        ]
    )


def find_best_thresh(predictions, scores, na_probs, qid_to_has_ans):
    """The official search: walk questions by increasing null odds, answering one more each.

    The walk starts from "every question null" (score = number of unanswerable questions,
    threshold 0.0, as the official script) and at each question adds its score (answerable)
    or subtracts 1 if its non-empty prediction replaces a right "" (unanswerable).

    Returns:
        (best score in percent, the null odds threshold that gives it).
    """
    cur_score = best_score = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def find_all_best_thresh(main_eval, predictions, exact_raw, f1_raw, na_probs, qid_to_has_ans):
    """Adds best_exact, best_exact_thresh, best_f1, best_f1_thresh to `main_eval`."""
    best_exact, exact_thresh = find_best_thresh(predictions, exact_raw, na_probs, qid_to_has_ans)
    best_f1, f1_thresh = find_best_thresh(predictions, f1_raw, na_probs, qid_to_has_ans)
    main_eval["best_exact"] = best_exact
    main_eval["best_exact_thresh"] = exact_thresh
    main_eval["best_f1"] = best_f1
    main_eval["best_f1_thresh"] = f1_thresh
    return main_eval


def evaluate_v2(dataset, predictions, na_probs=None, na_prob_thresh=1.0) -> dict:
    """The official SQuAD v2.0 evaluation.

    Args:
        dataset: the `"data"` list of a SQuAD JSON file.
        predictions: dict question id -> predicted text ("" = no answer).
        na_probs: dict question id -> null odds (`null_odds.json`); when given, the best
            thresholds are searched too. None means 0.0 for every question.
        na_prob_thresh: predict "" when the null odds exceed this.

    Returns:
        OrderedDict with `exact`, `f1`, `total`, then `HasAns_*` and `NoAns_*` (when the
        dataset has such questions), then `best_exact`, `best_exact_thresh`, `best_f1`,
        `best_f1_thresh` when `na_probs` is given.

    Raises:
        SquadEvalError: a question has no prediction or no null odds.
    """
    qid_to_has_ans = make_qid_to_has_ans(dataset)
    exact_raw, f1_raw = get_raw_scores(dataset, predictions)
    given_na_probs = na_probs is not None
    if not given_na_probs:
        na_probs = {k: 0.0 for k in predictions}
    missing = [k for k in exact_raw if k not in na_probs]
    if missing:
        raise SquadEvalError(
            f"{len(missing)} question(s) have no null odds (first: {missing[0]}); the null "
            "odds file must hold every question id."
        )
    exact = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    f1 = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
    out_eval = make_eval_dict(exact, f1)
    for name, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [k for k, has_ans in qid_to_has_ans.items() if has_ans == wanted]
        if qids:
            for key, value in make_eval_dict(exact, f1, qid_list=qids).items():
                out_eval[f"{name}_{key}"] = value
    if given_na_probs:
        find_all_best_thresh(out_eval, predictions, exact_raw, f1_raw, na_probs, qid_to_has_ans)
    return out_eval


def load_json(path: str, what: str):
    """Reads a JSON file (any tf.io.gfile path), raising SquadEvalError naming `what` and it."""
    import tensorflow as tf  # here: the evaluation itself needs no TensorFlow

    if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
        raise SquadEvalError(f"The {what} {path!r} does not exist; check the path.")
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            # "utf-8-sig": as the readers, a byte-order mark is not a JSON error.
            return json.loads(f.read().decode("utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SquadEvalError(f"The {what} {path!r} is not valid JSON ({e}).") from None


def evaluate_files(dataset_file, prediction_file, null_odds_file=None, version_2=None) -> dict:
    """Evaluates prediction files as the official scripts' command lines do.

    Args:
        dataset_file: SQuAD JSON (dev-v1.1.json or dev-v2.0.json).
        prediction_file: `predictions.json`.
        null_odds_file: `null_odds.json` (v2 only).
        version_2: evaluate with v2.0 rules; None decides from the file's `version` field.

    Returns:
        The dict of `evaluate_v1` or `evaluate_v2`.
    """
    dataset_json = load_json(dataset_file, "SQuAD dataset file")
    if not isinstance(dataset_json, dict) or "data" not in dataset_json:
        raise SquadEvalError(f"The SQuAD dataset file {dataset_file!r} has no 'data' list.")
    predictions = load_json(prediction_file, "prediction file")
    if version_2 is None:
        version_2 = str(dataset_json.get("version", "")).startswith("v2")
    if not version_2:
        return evaluate_v1(dataset_json["data"], predictions)
    na_probs = load_json(null_odds_file, "null odds file") if null_odds_file else None
    return evaluate_v2(dataset_json["data"], predictions, na_probs)
