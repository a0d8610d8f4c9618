"""The official SQuAD v1.1 / v2.0 evaluation on hand-made cases, scores computed by hand."""

import json

import pytest

from albert.metrics.squad import (
    SquadEvalError,
    compute_exact,
    compute_f1,
    evaluate_files,
    evaluate_v1,
    evaluate_v2,
    f1_score_v1,
    find_best_thresh,
    normalize_answer,
)


def make_dataset(questions):
    """questions: list of (id, [gold texts]) -> the "data" list of a SQuAD file."""
    qas = [
        {"id": qid, "question": "?", "answers": [{"text": t, "answer_start": 0} for t in golds]}
        for qid, golds in questions
    ]
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


def test_normalize_answer():
    # lower -> drop punctuation -> drop articles -> collapse whitespace.
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theater") == "theater"  # Articles only as whole words.
    assert normalize_answer("Levi's") == "levis"
    # "–" is not ASCII punctuation: it stays, and it is a word boundary for the article.
    assert normalize_answer("a–b") == "–b"
    assert normalize_answer("  A  ") == ""


def test_token_f1_and_exact():
    # gold [cat, sat, on, mat], prediction [cat, on, mat, today]: 3 shared, P = R = 3/4.
    assert compute_f1("the cat sat on the mat", "cat on a mat today") == pytest.approx(0.75)
    # Repeated tokens count with multiplicity: min(2, 3) = 2 reds; P = R = 2/3.
    assert compute_f1("red red blue", "red red red") == pytest.approx(2 / 3)
    assert compute_exact("The Denver Broncos", "denver broncos!") == 1
    assert compute_exact("Denver", "Denver Broncos") == 0


def test_empty_answers_differ_between_versions():
    # v2.0: both sides without tokens is a match (the unanswerable case).
    assert compute_f1("", "") == 1.0
    assert compute_f1("", "x") == 0.0
    assert compute_f1("the", "a") == 1.0  # Both normalise to "".
    # v1.1: F1 is 0 whenever nothing is shared, even "" against "".
    assert f1_score_v1("", "") == 0.0
    assert f1_score_v1("the", "a") == 0.0


def test_evaluate_v1():
    dataset = make_dataset(
        [
            ("q1", ["Denver Broncos", "The Denver Broncos"]),
            ("q2", ["Santa Clara, California", "Levi's Stadium"]),
            ("q3", ["Super Bowl 50"]),
        ]
    )
    predictions = {"q1": "denver broncos!", "q2": "Levi's Stadium in Santa Clara"}
    result = evaluate_v1(dataset, predictions)
    # q1: EM 1, F1 1. q2: prediction [levis, stadium, in, santa, clara];
    #   vs [santa, clara, california]: 2 shared, P 2/5, R 2/3 -> F1 0.5;
    #   vs [levis, stadium]: 2 shared, P 2/5, R 1 -> F1 0.8/1.4 = 4/7; max 4/7, EM 0.
    # q3: no prediction -> 0, still counted. EM = 1/3, F1 = (1 + 4/7) / 3 = 11/21.
    assert result["exact_match"] == pytest.approx(100 / 3)
    assert result["f1"] == pytest.approx(100 * 11 / 21)


def test_evaluate_v1_scores_a_gold_answer_that_normalises_to_nothing_as_v1_does():
    # v1.1 keeps a gold answer that normalises to "" ("The"): a prediction that normalises
    # to "" too ("a") is an exact match with F1 0, where v2.0's rule would give F1 1.
    result = evaluate_v1(
        make_dataset([("q1", ["The"]), ("q2", ["Paris"])]), {"q1": "a", "q2": "Paris"}
    )
    assert result["exact_match"] == pytest.approx(100.0)
    assert result["f1"] == pytest.approx(50.0)


def test_evaluate_v1_rejects_unanswerable_questions():
    with pytest.raises(SquadEvalError, match="SQuAD 2.0"):
        evaluate_v1(make_dataset([("q1", [])]), {"q1": ""})


V2_GOLDS = [("a1", ["Paris"]), ("a2", ["the blue whale", "blue whale"]), ("n3", []), ("n4", [])]
V2_PREDICTIONS = {"a1": "Paris", "a2": "whale", "n3": "", "n4": "something"}
V2_NULL_ODDS = {"a1": 0.1, "a2": 0.6, "n4": 0.7, "n3": 0.9}


def test_evaluate_v2_without_null_odds():
    result = evaluate_v2(make_dataset(V2_GOLDS), V2_PREDICTIONS)
    # Raw scores: a1 EM 1 F1 1; a2 EM 0, F1 vs [blue, whale]: P 1, R 1/2 -> 2/3;
    # n3 "" vs "": EM 1 F1 1; n4 "something" vs "": 0.
    assert result["exact"] == pytest.approx(50.0)
    assert result["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1 + 0) / 4)
    assert result["total"] == 4
    assert result["HasAns_total"] == result["NoAns_total"] == 2
    assert result["HasAns_exact"] == pytest.approx(50.0)
    assert result["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert result["NoAns_exact"] == result["NoAns_f1"] == pytest.approx(50.0)
    assert "best_f1" not in result


def test_evaluate_v2_gold_answer_that_normalises_to_nothing():
    # The official script drops a gold answer that normalises to "" ("the"), so "" is the
    # right prediction; but the question still counts as HasAns (it has an answer).
    result = evaluate_v2(make_dataset([("q", ["  The "])]), {"q": ""})
    assert result["exact"] == result["f1"] == 100.0
    assert result["HasAns_total"] == 1 and "NoAns_total" not in result


def test_evaluate_v2_with_null_odds_and_best_thresholds():
    dataset = make_dataset(V2_GOLDS)
    result = evaluate_v2(dataset, V2_PREDICTIONS, V2_NULL_ODDS)
    # Threshold 1.0 nulls nothing: EM (1 + 0 + 1 + 0) / 4, F1 (1 + 2/3 + 1 + 0) / 4.
    assert result["exact"] == pytest.approx(50.0)
    assert result["f1"] == pytest.approx(100 * (8 / 3) / 4)
    assert list(result) == [
        "exact",
        "f1",
        "total",
        "HasAns_exact",
        "HasAns_f1",
        "HasAns_total",
        "NoAns_exact",
        "NoAns_f1",
        "NoAns_total",
        "best_exact",
        "best_exact_thresh",
        "best_f1",
        "best_f1_thresh",
    ]
    # Walk by null odds from "all null" (score = 2 unanswerable, threshold 0.0):
    #   a1 (0.1) +1 -> 3 | a2 (0.6) EM +0 -> 3, F1 +2/3 -> 3.667 | n4 (0.7) -1 -> 2, 2.667
    #   | n3 (0.9) "" -> +0.
    assert result["best_exact"] == pytest.approx(75.0)
    assert result["best_exact_thresh"] == 0.1
    assert result["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4)
    assert result["best_f1_thresh"] == 0.6
    # Threshold 0.5 nulls a2 (answerable: 0), n4 and n3 (unanswerable: 1); a1 keeps 1.
    at_half = evaluate_v2(dataset, V2_PREDICTIONS, V2_NULL_ODDS, na_prob_thresh=0.5)
    assert at_half["exact"] == at_half["f1"] == pytest.approx(75.0)
    # At the best F1 threshold (0.6) a2 keeps its answer (nulled only when odds > threshold):
    # F1 (1 + 2/3 + 1 + 1) / 4, which is best_f1.
    at_best = evaluate_v2(dataset, V2_PREDICTIONS, V2_NULL_ODDS, na_prob_thresh=0.6)
    assert at_best["f1"] == pytest.approx(result["best_f1"])


def test_find_best_thresh_keeps_all_null_when_answering_never_helps():
    qid_to_has_ans = {"n1": False, "a1": True}
    # Answering a1 (score 0) and n1 (wrong non-empty answer) never beats "all null" = 1/2.
    score, thresh = find_best_thresh(
        {"n1": "x", "a1": "y"}, {"n1": 0, "a1": 0}, {"n1": -3.0, "a1": 2.0}, qid_to_has_ans
    )
    assert (score, thresh) == (50.0, 0.0)


def test_find_best_thresh_charges_wrong_answers_to_unanswerable_questions():
    # All null: 1 right (n). Answering n ("x" instead of "") costs 1 -> 0; answering a (right)
    # gains 1 -> 1, not above the start: best stays 50% at threshold 0.0.
    score, thresh = find_best_thresh(
        {"n": "x", "a": "y"}, {"n": 0, "a": 1}, {"n": 0.1, "a": 0.2}, {"n": False, "a": True}
    )
    assert (score, thresh) == (50.0, 0.0)


def test_evaluate_v2_requires_every_prediction_and_null_odds():
    dataset = make_dataset(V2_GOLDS)
    with pytest.raises(SquadEvalError, match="no prediction"):
        evaluate_v2(dataset, {"a1": "Paris"})
    with pytest.raises(SquadEvalError, match="no null odds"):
        evaluate_v2(dataset, V2_PREDICTIONS, {"a1": 0.0})


def test_evaluate_files(tmp_path):
    data_file = tmp_path / "dev.json"
    data_file.write_text(json.dumps({"version": "v2.0", "data": make_dataset(V2_GOLDS)}))
    predictions_file = tmp_path / "predictions.json"
    predictions_file.write_text(json.dumps(V2_PREDICTIONS))
    odds_file = tmp_path / "null_odds.json"
    odds_file.write_text(json.dumps(V2_NULL_ODDS))
    result = evaluate_files(str(data_file), str(predictions_file), str(odds_file))
    assert result["best_f1_thresh"] == 0.6
    v1_file = tmp_path / "dev1.json"
    v1_file.write_text(json.dumps({"version": "1.1", "data": make_dataset([("a1", ["Paris"])])}))
    assert evaluate_files(str(v1_file), str(predictions_file)) == {
        "exact_match": 100.0,
        "f1": 100.0,
    }
    with pytest.raises(SquadEvalError, match="does not exist"):
        evaluate_files(str(tmp_path / "missing.json"), str(predictions_file))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SquadEvalError, match="not valid JSON"):
        evaluate_files(str(data_file), str(tmp_path / "bad.json"))
