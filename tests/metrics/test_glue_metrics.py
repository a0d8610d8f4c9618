"""GLUE metrics against values computed by hand."""

import numpy as np
import pytest

from albert.glue_tasks import GlueDataError
from albert.metrics import write_eval_results
from albert.metrics.glue import (
    accuracy,
    average_ranks,
    compute_metrics,
    f1_score,
    main_metric,
    matthews_corrcoef,
    pearson_correlation,
    spearman_correlation,
)

# 7 binary examples: TP at 0, 2; FP at 1, 5; FN at 3; TN at 4, 6.
PREDICTIONS = [1, 1, 1, 0, 0, 1, 0]
LABELS = [1, 0, 1, 1, 0, 0, 0]


def test_accuracy_and_f1_by_hand():
    # Correct: 0, 2, 4, 6 -> 4 / 7.
    assert accuracy(PREDICTIONS, LABELS) == pytest.approx(4 / 7, abs=1e-12)
    # Precision 2/4, recall 2/3 -> F1 = 2 TP / (2 TP + FP + FN) = 4 / 7.
    assert f1_score(PREDICTIONS, LABELS) == pytest.approx(4 / 7, abs=1e-12)
    # Precision 1/1, recall 1/2 (TP at 2, FN at 1) -> 2 / (2 + 0 + 1) = 2/3.
    assert f1_score([0, 0, 1], [0, 1, 1]) == pytest.approx(2 / 3, abs=1e-12)
    # Class 0 as positive: TP at 0, FP at 1 -> 2 / (2 + 1 + 0) = 2/3; recall 1, precision 1/2.
    assert f1_score([0, 0, 1, 1], [0, 1, 1, 1], positive=0) == pytest.approx(2 / 3, abs=1e-12)
    assert f1_score([0, 0, 0], [0, 0, 0]) == 0.0  # no positives at all


def test_matthews_by_hand():
    # (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2*2 - 2*1) / sqrt(4*3*4*3) = 1/6.
    assert matthews_corrcoef(PREDICTIONS, LABELS) == pytest.approx(1 / 6, abs=1e-12)
    assert matthews_corrcoef([1, 0, 1], [1, 0, 1]) == pytest.approx(1.0, abs=1e-12)
    assert matthews_corrcoef([0, 1, 0], [1, 0, 1]) == pytest.approx(-1.0, abs=1e-12)
    assert matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0  # one predicted class: undefined


def test_matthews_three_classes_by_hand():
    # labels [0,1,2,0,1,2], predictions [0,2,2,0,1,1]: trace c = 4, s = 6, t = p = [2, 2, 2]:
    # (4*6 - 12) / sqrt((36 - 12) * (36 - 12)) = 12 / 24.
    assert matthews_corrcoef([0, 2, 2, 0, 1, 1], [0, 1, 2, 0, 1, 2]) == pytest.approx(0.5)


def test_pearson_by_hand():
    # dx = [-1.5, -.5, .5, 1.5], dy = [-3, -1, 0, 4]: sum dx dy = 11, sum dx^2 = 5,
    # sum dy^2 = 26 -> 11 / sqrt(130).
    r = pearson_correlation([1, 2, 3, 4], [2, 4, 5, 9])
    assert r == pytest.approx(11 / np.sqrt(130), abs=1e-12)
    assert pearson_correlation([1, 1, 1], [1, 2, 3]) == 0.0  # constant: undefined


def test_spearman_with_ties_by_hand():
    # Average ranks: x [1,2,2,3,5] -> [1, 2.5, 2.5, 4, 5]; y [2,1,4,4,4] -> [2, 1, 4, 4, 4].
    # Centred (means 3): [-2,-.5,-.5,1,2] . [-1,-2,1,1,1] = 5.5; norms^2 9.5 and 8 -> 5.5/sqrt(76).
    assert average_ranks([1, 2, 2, 3, 5]).tolist() == [1, 2.5, 2.5, 4, 5]
    assert average_ranks([2, 1, 4, 4, 4]).tolist() == [2, 1, 4, 4, 4]
    rho = spearman_correlation([1, 2, 2, 3, 5], [2, 1, 4, 4, 4])
    assert rho == pytest.approx(5.5 / np.sqrt(76), abs=1e-12)
    # A monotone but non-linear relation: rho 1, r below 1.
    assert spearman_correlation([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)


def test_against_scipy_when_installed():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 6, 41), rng.integers(0, 4, 41) + rng.normal(size=41).round(1)
    assert abs(spearman_correlation(x, y) - stats.spearmanr(x, y).statistic) < 1e-12
    assert abs(pearson_correlation(x, y) - stats.pearsonr(x, y).statistic) < 1e-12


def test_compute_metrics_per_task_and_main_metric():
    assert compute_metrics("MRPC", PREDICTIONS, LABELS) == pytest.approx(
        {"accuracy": 4 / 7, "f1": 4 / 7}
    )
    cola = compute_metrics("cola", PREDICTIONS, LABELS)
    assert cola == pytest.approx({"accuracy": 4 / 7, "matthews_corr": 1 / 6})
    assert set(compute_metrics("rte", PREDICTIONS, LABELS)) == {"accuracy"}
    stsb = compute_metrics("stsb", [[2.0], [4.0], [5.0], [9.0]], [1, 2, 3, 4])
    # mse: (1 + 4 + 4 + 25) / 4 = 8.5
    assert stsb == pytest.approx({"pearson": 11 / np.sqrt(130), "spearman": 1.0, "mse": 8.5})
    assert [main_metric(t) for t in ("CoLA", "sts-b", "mrpc", "qqp", "mnli", "ax")] == [
        "matthews_corr",
        "pearson",
        "accuracy",
        "accuracy",
        "accuracy",
        "accuracy",
    ]


def test_compute_metrics_takes_logits_and_drops_padding():
    # [N, C] logits arg-maxed to [2, 0, 1]; the padding row (weight 0) would be wrong.
    logits = [[0.1, 0.2, 3.0], [2.0, 1.0, 0.0], [0.0, 5.0, 1.0], [9.0, 0.0, 0.0]]
    result = compute_metrics("mnli", logits, [2, 0, 0, 1], weights=[1, 1, 1, 0])
    assert result == pytest.approx({"accuracy": 2 / 3})
    with pytest.raises(GlueDataError, match="3 predictions for 4 labels"):
        compute_metrics("mnli", [0, 1, 2], [0, 1, 2, 0])


def test_eval_results_file(tmp_path):
    path = write_eval_results(str(tmp_path / "out"), {"f1": 0.5, "accuracy": 0.75, "loss": 1})
    assert open(path).read() == "accuracy = 0.75\nf1 = 0.5\nloss = 1\n"
    write_eval_results(str(tmp_path / "out"), {"b": 2, "a": 1}, append=True)
    assert open(path).read() == (
        "accuracy = 0.75\nf1 = 0.5\nloss = 1\n" + "a = 1\nb = 2\n" + "=" * 50 + "\n"
    )
