"""The GLUE test-set files (`albert.tasks.glue_submission`), byte for byte."""

import numpy as np
import pytest

from albert.data.glue import GlueDataError, InputExample
from albert.tasks.glue_submission import write_submission, write_test_results


def test_test_results_tsv(tmp_path):
    probabilities = np.array([[0.25, 0.75], [0.1, 0.9], [1.0, 0.0]], np.float32)
    path = write_test_results(str(tmp_path), probabilities)
    assert path.endswith("test_results.tsv")
    assert open(path).read() == "0.25\t0.75\n0.1\t0.9\n1.0\t0.0\n"
    write_test_results(str(tmp_path), np.array([[4.5], [-0.25]]))
    assert open(path).read() == "4.5\n-0.25\n"


def test_submission_files(tmp_path):
    examples = [InputExample(str(i), "a", "b") for i in (0, 1, 2)]
    path = write_submission(str(tmp_path), "mismnli", examples, [[0, 1, 0], [3, 1, 0], [0, 0, 2]])
    assert path.endswith("MNLI-mm.tsv")
    assert open(path).read() == ("index\tprediction\n0\tentailment\n1\tcontradiction\n2\tneutral\n")
    path = write_submission(str(tmp_path), "rte", examples, [1, 0, 1])
    assert path.endswith("RTE.tsv")
    assert open(path).read() == (
        "index\tprediction\n0\tnot_entailment\n1\tentailment\n2\tnot_entailment\n"
    )
    path = write_submission(str(tmp_path), "sts-b", examples, [[5.4321], [-0.2], [2.71828]])
    assert path.endswith("STS-B.tsv")
    assert open(path).read() == "index\tprediction\n0\t5.000\n1\t0.000\n2\t2.718\n"
    names = {
        t: write_submission(str(tmp_path), t, examples[:1], [1]) for t in ("cola", "ax", "qqp")
    }
    assert [p.rsplit("/", 1)[1] for p in names.values()] == ["CoLA.tsv", "AX.tsv", "QQP.tsv"]
    assert open(names["cola"]).read() == "index\tprediction\n0\t1\n"
    with pytest.raises(GlueDataError, match="4 predictions for 3 rte test examples"):
        write_submission(str(tmp_path), "rte", examples, [0, 1, 0, 0])


def test_submit_results_tsv_is_the_submission(tmp_path):
    # The original's name for the server's file: the same lines, not test_results.tsv's.
    from albert.tasks.glue_submission import write_glue_predictions

    examples = [InputExample(str(i), "a", "b") for i in (0, 1)]
    probabilities = np.array([[0.25, 0.75], [0.9, 0.1]], np.float32)
    paths = write_glue_predictions(str(tmp_path), "rte", examples, probabilities)
    assert [p.rsplit("/", 1)[1] for p in paths] == [
        "test_results.tsv",
        "RTE.tsv",
        "submit_results.tsv",
    ]
    submission = "index\tprediction\n0\tnot_entailment\n1\tentailment\n"
    assert open(paths[1]).read() == submission
    assert open(paths[2]).read() == submission
