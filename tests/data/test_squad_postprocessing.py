"""SQuAD post-processing on hand-made windows with hand-ranked candidates."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from albert.data.squad import SquadExample
from albert.data.squad_postprocessing import (
    SquadPredictionError,
    compute_predictions_v1,
    compute_predictions_v2,
    results_by_unique_id,
    write_predictions,
)
from albert.metrics.squad_threshold import tune_null_threshold

#          0    5    10   15   20
CONTEXT = "Alpha beta gamma delta"
EXAMPLE = SquadExample("q", "which?", CONTEXT, "delta", 17)
# Two windows: [CLS] question [SEP] alpha beta gamma [SEP] and [CLS] question [SEP] gamma delta
# [SEP]. "gamma" has its max context in the second window only.
WINDOW_A = SimpleNamespace(
    unique_id=1,
    example_index=0,
    token_to_orig_map={3: (0, 4), 4: (6, 9), 5: (11, 15)},
    token_is_max_context={3: True, 4: True, 5: False},
)
WINDOW_B = SimpleNamespace(
    unique_id=2,
    example_index=0,
    token_to_orig_map={3: (11, 15), 4: (17, 21)},
    token_is_max_context={3: True, 4: True},
)
V1_RESULTS = {
    # Highest start is the question token 1, then "gamma" (5), not max context here: both
    # invalid. Highest end is [SEP] (6): invalid.
    1: {
        "start_logits": np.array([5.0, 9, 0, 1, 2, 8, 0]),
        "end_logits": np.array([0.0, 0, 0, 0, 3, 1, 7]),
    },
    2: {
        "start_logits": np.array([0.0, 0, 0, 4, 1, 0]),
        "end_logits": np.array([0.0, 0, 0, 2, 6, 0]),
    },
}


def test_v1_ranks_valid_spans_across_windows():
    predictions, nbest = compute_predictions_v1([EXAMPLE], [WINDOW_A, WINDOW_B], V1_RESULTS)
    # Valid (start, end) scores: A: alpha-alpha 1+0, alpha-beta 1+3, alpha-gamma 1+1,
    # beta-beta 2+3, beta-gamma 2+1; B: gamma-gamma 4+2, gamma-delta 4+6, delta-delta 1+6.
    texts = [entry["text"] for entry in nbest["q"]]
    assert texts == [
        "gamma delta",
        "delta",
        "gamma",
        "beta",
        "Alpha beta",
        "beta gamma",
        "Alpha beta gamma",
        "Alpha",
    ]
    assert predictions == {"q": "gamma delta"}
    scores = np.array([10.0, 7, 6, 5, 4, 3, 2, 1])
    expected = np.exp(scores) / np.exp(scores).sum()
    assert np.max(np.abs([e["probability"] for e in nbest["q"]] - expected)) < 1e-9
    # The original's v1 nbest_predictions.json names the logits start/end_log_prob.
    assert set(nbest["q"][0]) == {"text", "probability", "start_log_prob", "end_log_prob"}
    assert (nbest["q"][0]["start_log_prob"], nbest["q"][0]["end_log_prob"]) == (4.0, 6.0)


def test_v1_limits():
    windows = [WINDOW_A, WINDOW_B]
    # One-token answers only: alpha 1, beta 5, gamma 6, delta 7.
    predictions, nbest = compute_predictions_v1([EXAMPLE], windows, V1_RESULTS, max_answer_length=1)
    assert [e["text"] for e in nbest["q"]] == ["delta", "gamma", "beta", "Alpha"]
    # n_best_size 2: window A's top-2 starts (question token, "gamma") are both invalid.
    predictions, nbest = compute_predictions_v1([EXAMPLE], windows, V1_RESULTS, n_best_size=2)
    assert [e["text"] for e in nbest["q"]] == ["gamma delta", "delta"]


def test_v1_drops_duplicate_texts_and_falls_back_to_empty():
    twin = SimpleNamespace(**{**vars(WINDOW_B), "unique_id": 3})
    results = {**V1_RESULTS, 3: V1_RESULTS[2]}
    _, nbest = compute_predictions_v1([EXAMPLE], [WINDOW_B, twin], results, n_best_size=3)
    assert [e["text"] for e in nbest["q"]] == ["gamma delta", "delta", "gamma"]
    only_question = {
        2: {
            "start_logits": np.array([0.0, 9, 0, -1, -1, 0]),
            "end_logits": np.array([0.0, 9, 0, -1, -1, 0]),
        }
    }
    predictions, nbest = compute_predictions_v1([EXAMPLE], [WINDOW_B], only_question, 2)
    assert predictions == {"q": ""} and nbest["q"][0]["probability"] == 1.0


V2_RESULTS = {
    1: {
        "start_top_log_probs": np.array([-0.1, -1.0]),
        "start_top_index": np.array([5, 3]),  # "gamma" is not max context in window A.
        # Ends of start i are entries i * end_n_top + j.
        "end_top_log_probs": np.array([-0.2, -0.3, -0.5, -2.0]),
        "end_top_index": np.array([5, 4, 4, 3]),
        "cls_logits": np.array(3.0),
    },
    2: {
        "start_top_log_probs": np.array([-0.3, -0.9]),
        "start_top_index": np.array([4, 3]),
        "end_top_log_probs": np.array([-0.2, -0.4, -0.1, -5.0]),
        "end_top_index": np.array([4, 3, 4, 3]),
        "cls_logits": np.array(-1.0),
    },
}


def test_v2_beam_null_score_and_threshold():
    windows = [WINDOW_A, WINDOW_B]
    predictions, nbest, null_odds = compute_predictions_v2([EXAMPLE], windows, V2_RESULTS)
    # A: start alpha (-1.0) with ends beta (-0.5) and alpha (-2.0). B: start delta (-0.3)
    # with end delta (-0.2) (its other end is before it); start gamma (-0.9) with ends
    # delta (-0.1) and gamma (-5.0).
    ranked = [(e["text"], e["start_log_prob"] + e["end_log_prob"]) for e in nbest["q"]]
    assert [text for text, _ in ranked] == ["delta", "gamma delta", "Alpha beta", "Alpha", "gamma"]
    assert np.max(np.abs(np.array([s for _, s in ranked]) - [-0.5, -1.0, -1.5, -3.0, -5.9])) < 1e-9
    assert predictions == {"q": "delta"}
    assert null_odds == {"q": -1.0}  # min(3.0, -1.0) over the windows.
    predictions, _, _ = compute_predictions_v2(
        [EXAMPLE], windows, V2_RESULTS, null_score_diff_threshold=-2.0
    )
    assert predictions == {"q": ""}  # -1.0 > -2.0: no answer.


def test_v2_no_valid_span():
    results = {2: {**V2_RESULTS[2], "start_top_index": np.array([0, 1])}}
    predictions, nbest, _ = compute_predictions_v2([EXAMPLE], [WINDOW_B], results)
    assert predictions == {"q": ""}
    assert nbest["q"] == [
        {"text": "", "probability": 1.0, "start_log_prob": -1e6, "end_log_prob": -1e6}
    ]


def test_missing_output_is_an_error():
    with pytest.raises(SquadPredictionError, match="No model output for feature 2"):
        compute_predictions_v1([EXAMPLE], [WINDOW_A, WINDOW_B], {1: V1_RESULTS[1]})


def test_results_by_unique_id_drops_batch_padding():
    logits = np.arange(12.0).reshape(3, 4)
    results = results_by_unique_id(np.array([7, 8, 0]), {"start_logits": logits}, [1, 1, 0])
    assert sorted(results) == [7, 8]
    assert results[8]["start_logits"].tolist() == [4.0, 5.0, 6.0, 7.0]


def test_tune_null_threshold_and_files(tmp_path):
    dataset = [
        {
            "title": "t",
            "paragraphs": [
                {
                    "context": CONTEXT,
                    "qas": [
                        {
                            "id": "a",
                            "question": "?",
                            "answers": [{"text": "delta", "answer_start": 17}],
                        },
                        {"id": "n", "question": "?", "answers": []},
                    ],
                }
            ],
        }
    ]
    predictions, null_odds = {"a": "delta", "n": "gamma"}, {"a": -1.0, "n": 2.0}
    # Walk from all-null (1 right, threshold 0.0): answer "a" (-1.0) -> 2 right; answer "n"
    # (2.0) -> 1. Best: threshold -1.0, 100%.
    tuned = tune_null_threshold(dataset, predictions, null_odds, output_dir=str(tmp_path))
    assert tuned.threshold == -1.0
    assert tuned.predictions == {"a": "delta", "n": ""}
    assert tuned.evaluation["exact"] == tuned.evaluation["best_f1"] == 100.0
    assert json.loads((tmp_path / "predictions.json").read_text()) == tuned.predictions
    paths = write_predictions(str(tmp_path / "out"), predictions, {"a": [], "n": []}, null_odds)
    assert sorted(p.rsplit("/", 1)[1] for p in paths.values()) == [
        "nbest_predictions.json",
        "null_odds.json",
        "predictions.json",
    ]
    assert json.loads(open(paths["null_odds"]).read()) == null_odds


def test_v2_null_score_is_the_minimum_over_windows_not_the_mean():
    # The original's accumulate_predictions_v2 keeps min(cls_logits) over a question's
    # windows; write_predictions_v2's sum/len is over the one-element list of that minimum.
    third = SimpleNamespace(**{**vars(WINDOW_B), "unique_id": 3})
    results = {**V2_RESULTS, 3: {**V2_RESULTS[2], "cls_logits": np.array(0.5)}}
    _, _, null_odds = compute_predictions_v2([EXAMPLE], [WINDOW_A, WINDOW_B, third], results)
    assert null_odds == {"q": -1.0}  # min(3.0, -1.0, 0.5); the mean would be 2.5 / 3.
    # At threshold -1.0 the answer stays (nulled strictly above); at -1.5 it goes.
    for threshold, expected in ((-1.0, "delta"), (-1.5, "")):
        predictions, _, _ = compute_predictions_v2(
            [EXAMPLE], [WINDOW_A, WINDOW_B, third], results, null_score_diff_threshold=threshold
        )
        assert predictions == {"q": expected}


def _dataset(qas):
    return [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]


def test_tuned_threshold_scored_with_the_originals_na_prob_thresh_of_one():
    dataset = _dataset(
        [
            {"id": "a", "question": "?", "answers": [{"text": "delta", "answer_start": 17}]},
            {"id": "b", "question": "?", "answers": [{"text": "beta", "answer_start": 6}]},
            {"id": "n", "question": "?", "answers": []},
        ]
    )
    predictions = {"a": "delta", "b": "beta", "n": "gamma"}
    null_odds = {"a": 2.0, "b": 0.5, "n": 5.0}
    # Walk from all-null (1 right): answer b (0.5) -> 2, a (2.0) -> 3, n (5.0) -> 2. The best
    # threshold is 2.0 (100%), above 1.0: "a" keeps its answer in the predictions, but its
    # null score 2.0 > 1.0 makes the original's evaluate_v2 score it as "no answer" (0).
    tuned = tune_null_threshold(dataset, predictions, null_odds)
    assert tuned.threshold == 2.0
    assert tuned.predictions == {"a": "delta", "b": "beta", "n": ""}
    assert tuned.evaluation["best_f1"] == tuned.evaluation["best_exact"] == 100.0
    assert tuned.evaluation["best_f1_thresh"] == 2.0
    assert tuned.evaluation["exact"] == tuned.evaluation["f1"] == pytest.approx(200 / 3)
    assert tuned.evaluation["HasAns_exact"] == 50.0 and tuned.evaluation["NoAns_exact"] == 100.0
    # Without the 1.0 rule the thresholded predictions score best_f1.
    plain = tune_null_threshold(dataset, predictions, null_odds, na_prob_thresh=None)
    assert plain.predictions == tuned.predictions
    assert plain.evaluation["exact"] == plain.evaluation["f1"] == 100.0
    # Below 1.0 the rule changes nothing: the tuned threshold already nulls those answers.
    low = {"a": -2.0, "b": -3.0, "n": 0.25}
    assert tune_null_threshold(dataset, predictions, low).evaluation["f1"] == 100.0


def test_the_threshold_is_tuned_on_f1_unless_exact_match_is_asked_for():
    dataset = _dataset(
        [
            {"id": "a", "question": "?", "answers": [{"text": "delta", "answer_start": 17}]},
            {"id": "n", "question": "?", "answers": []},
        ]
    )
    predictions = {"a": "delta epsilon", "n": "gamma"}  # "a": EM 0, F1 2/3
    null_odds = {"a": 0.5, "n": 1.0}
    # Walk from all-null (n right): answering a adds EM 0 (no gain: EM's best stays at
    # threshold 0.0) but F1 2/3 (F1's best moves to 0.5); answering n then loses 1.
    tuned = tune_null_threshold(dataset, predictions, null_odds)
    assert tuned.evaluation["best_exact_thresh"] == 0.0
    assert tuned.threshold == tuned.evaluation["best_f1_thresh"] == 0.5
    assert tuned.predictions == {"a": "delta epsilon", "n": ""}
    assert tuned.evaluation["f1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    by_exact = tune_null_threshold(dataset, predictions, null_odds, metric="exact")
    assert by_exact.threshold == 0.0 and by_exact.predictions == {"a": "", "n": ""}


def test_v2_a_threshold_of_zero_is_a_threshold_not_none():
    # 0.0 (the original's default flag value) must null an answer whose null score is above it.
    results = {key: {**value, "cls_logits": np.array(0.5)} for key, value in V2_RESULTS.items()}
    predictions, _, _ = compute_predictions_v2(
        [EXAMPLE], [WINDOW_A, WINDOW_B], results, null_score_diff_threshold=0.0
    )
    assert predictions == {"q": ""}


def test_v2_an_empty_null_odds_is_still_written(tmp_path):
    paths = write_predictions(str(tmp_path), {}, {}, {})
    assert json.loads(open(paths["null_odds"]).read()) == {}
