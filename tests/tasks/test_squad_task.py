"""run_squad.py end to end: a learnable synthetic SQuAD 1.1 set (the answer is the one
word from a set of six among filler words), the real dev-v2.0.json sample (formats and the null threshold),
the v1/v2 losses against numpy, and the QA SavedModel reloaded in a fresh process."""

import json
import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
import synthetic_glue as synthetic
import tensorflow as tf
from absl import flags

from albert.tasks import engine, squad
from albert.training.checkpointing import read_key_values

SHARED_SQUAD = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "squad"
# Single pieces of the tiny SentencePiece model, never among the filler words.
ANSWERS = ("anarchism", "capitalism", "tactics", "autonomy", "workers", "authority")


def write_marker_squad(path, num_questions, seed):
    """SQuAD 1.1 JSON whose answer is the one word of ANSWERS in a context of filler words."""
    rng = np.random.default_rng(seed)
    paragraphs = []
    for i in range(num_questions):
        words = list(rng.choice(synthetic.WORDS, size=int(rng.integers(6, 40))))
        position = int(rng.integers(0, len(words) + 1))
        answer = str(rng.choice(ANSWERS))
        words.insert(position, answer)
        context = " ".join(words)
        answer_start = len(" ".join(words[:position])) + (1 if position else 0)
        assert context[answer_start : answer_start + len(answer)] == answer
        qa = {
            "id": f"q{i}",
            "question": "which word is the odd one",
            "answers": [{"text": answer, "answer_start": answer_start}],
        }
        paragraphs.append({"context": context, "qas": [qa]})
    data = {"version": "1.1", "data": [{"title": "odd word", "paragraphs": paragraphs}]}
    Path(path).write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def write_without_answers(source, path):
    """A copy of the SQuAD file `source` whose questions have no answers (a test file)."""
    unlabeled = json.loads(Path(source).read_text(encoding="utf-8"))
    for article in unlabeled["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                del qa["answers"]
    Path(path).write_text(json.dumps(unlabeled), encoding="utf-8")
    return path


def run_squad(*args):
    """run_squad.py in this process (private FlagValues); returns (metrics, flag values)."""
    flag_values = flags.FlagValues()
    squad.define_squad_flags(flag_values)
    flag_values(["run_squad.py", f"--spm_model_file={synthetic.SPM_MODEL}", *args])
    return squad.run_from_flags(flag_values), flag_values


def tiny_flags(config, output_dir, train_file, predict_file):
    return [
        f"--albert_config_file={config}",
        f"--output_dir={output_dir}",
        f"--train_file={train_file}",
        f"--predict_file={predict_file}",
        "--max_seq_length=64",
        "--doc_stride=32",
        "--max_query_length=16",
        "--train_batch_size=16",
        "--eval_batch_size=9",
        "--predict_batch_size=7",
        "--learning_rate=2e-3",
        "--warmup_step=20",
        "--albert_dropout_prob=0",
        "--iterations_per_loop=50",
        "--max_answer_length=5",
    ]


@pytest.mark.slow
def test_synthetic_squad_is_learned_and_exported(tmp_path):
    train = write_marker_squad(tmp_path / "train.json", 400, seed=0)
    dev = write_marker_squad(tmp_path / "dev.json", 60, seed=1)
    config = synthetic.write_config(tmp_path / "config.json")
    output_dir, export_dir = tmp_path / "out", tmp_path / "export"
    metrics, _ = run_squad(
        *tiny_flags(config, output_dir, train, dev),
        "--train_step=150",
        "--save_checkpoints_steps=150",
        "--jit_compile",  # the v1 head under XLA (the suite's runs are otherwise XLA off)
        f"--export_dir={export_dir}",
        "--do_train",
        "--do_eval",
        "--do_predict",
    )
    assert metrics["f1"] > 80.0 and metrics["exact_match"] > 70.0, metrics
    results = read_key_values(output_dir / "eval_results.txt")
    assert float(results["f1"]) == pytest.approx(metrics["f1"])
    predictions = json.loads((output_dir / "predictions.json").read_text())
    assert list(predictions) == [f"q{i}" for i in range(60)]
    assert not (output_dir / "null_odds.json").exists()
    # The SavedModel, in a process that imports tensorflow_text but not albert.
    gold = json.loads(Path(dev).read_text())["data"][0]["paragraphs"][:8]
    questions = [p["qas"][0]["question"] for p in gold]
    contexts = [p["context"] for p in gold]
    script = textwrap.dedent(f"""
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # noqa: F401
        assert "albert" not in sys.modules
        serve = tf.saved_model.load({str(export_dir)!r}).signatures["serving_default"]
        out = serve(question=tf.constant({questions!r}), context=tf.constant({contexts!r}))
        print(json.dumps([a.decode() for a in out["answer"].numpy()]))
    """)
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    served = json.loads(completed.stdout.strip().splitlines()[-1])
    expected = [p["qas"][0]["answers"][0]["text"] for p in gold]
    # The answers are lower-case single pieces, so the detokenized span is the answer text.
    assert served == expected == [predictions[f"q{i}"] for i in range(8)]


@pytest.fixture(scope="module")
def v2_dev_run(tmp_path_factory):
    """Trains the v2 head 4 steps on the dev-v2.0.json sample (under XLA, which the suite's
    other runs leave off), evaluates and predicts it, and exports a SavedModel."""
    root = tmp_path_factory.mktemp("squad_v2")
    dev = str(SHARED_SQUAD / "dev-v2.0.json")
    config = synthetic.write_config(root / "config.json")
    output_dir = root / "out"
    flags_v2 = [*tiny_flags(config, output_dir, dev, dev), "--version_2_with_negative"]
    metrics, _ = run_squad(
        *flags_v2,
        "--train_step=4",
        "--save_checkpoints_steps=4",
        "--iterations_per_loop=2",
        "--jit_compile",
        f"--export_dir={root / 'export'}",
        "--do_train",
        "--do_eval",
        "--do_predict",
    )
    return root, dev, output_dir, flags_v2, metrics


needs_shared_squad = pytest.mark.skipif(
    not (SHARED_SQUAD / "dev-v2.0.json").exists(), reason="no shared SQuAD data"
)


@pytest.mark.slow
@needs_shared_squad
@pytest.mark.xdist_group("squad_v2_run")  # one worker: `v2_dev_run` is made once
def test_squad_v2_on_the_dev_sample(v2_dev_run):
    _, dev, output_dir, _, metrics = v2_dev_run
    gold = json.loads(Path(dev).read_text())["data"]
    qids = [qa["id"] for a in gold for p in a["paragraphs"] for qa in p["qas"]]
    predictions = json.loads((output_dir / "predictions.json").read_text())
    null_odds = json.loads((output_dir / "null_odds.json").read_text())
    nbest = json.loads((output_dir / "nbest_predictions.json").read_text())
    assert list(predictions) == qids and list(null_odds) == qids and list(nbest) == qids
    assert all(isinstance(v, float) for v in null_odds.values())
    assert all(
        {"text", "probability", "start_log_prob", "end_log_prob"} <= set(n[0])
        for n in nbest.values()
    )
    results = read_key_values(output_dir / "eval_results.txt")
    for key in (
        "exact",
        "f1",
        "total",
        "HasAns_exact",
        "HasAns_f1",
        "NoAns_exact",
        "NoAns_f1",
        "best_exact",
        "best_f1",
        "best_f1_thresh",
        "null_score_diff_threshold",
        "global_step",
    ):
        assert key in results, key
    assert int(results["total"]) == len(qids) and int(results["global_step"]) == 4
    # The tuned threshold is applied: F1 at it is the best F1, and predictions.json agrees.
    assert metrics["f1"] == pytest.approx(metrics["best_f1"])
    threshold = metrics["null_score_diff_threshold"]
    assert all((predictions[q] == "") or null_odds[q] <= threshold for q in qids)


@pytest.mark.slow
@needs_shared_squad
@pytest.mark.xdist_group("squad_v2_run")  # one worker: `v2_dev_run` is made once
def test_squad_v2_is_exported_with_the_null_threshold_of_predictions_json(v2_dev_run):
    # run_squad_v2 refused --export_dir: SQuAD 2.0 models could not be served. The SavedModel
    # must null answers as predictions.json does, with the threshold tuned on dev, also when
    # a later run only exports the weights that run evaluated.
    root, dev, output_dir, flags_v2, metrics = v2_dev_run
    threshold = metrics["null_score_diff_threshold"]
    predictions = json.loads((output_dir / "predictions.json").read_text())
    null_odds = json.loads((output_dir / "null_odds.json").read_text())
    # The export-only run reads the threshold from eval_results.txt; made unmistakable here
    # (4 steps of training tune 0.0, the default's value): one amid the null scores.
    odds = sorted(null_odds.values())
    edited = (odds[len(odds) // 2 - 1] + odds[len(odds) // 2]) / 2
    results_file = output_dir / "eval_results.txt"
    original_results = results_file.read_text()
    results_file.write_text(
        re.sub(
            r"null_score_diff_threshold = \S+",
            f"null_score_diff_threshold = {edited!r}",
            original_results,
        )
    )
    try:
        run_squad(*flags_v2, f"--export_dir={root / 'export_only'}")
    finally:
        results_file.write_text(original_results)  # as the fixture made it, for other tests
    pairs = [
        (qa["id"], qa["question"], p["context"])
        for a in json.loads(Path(dev).read_text())["data"]
        for p in a["paragraphs"]
        for qa in p["qas"]
    ]
    qids, questions, contexts = zip(*pairs, strict=True)
    served = {}
    for export in ("export", "export_only"):
        serve = tf.saved_model.load(str(root / export)).signatures["serving_default"]
        out = serve(question=tf.constant(questions), context=tf.constant(contexts))
        served[export] = {name: value.numpy() for name, value in out.items()}
        served_odds = served[export]["null_score"]
        assert np.max(np.abs(served_odds - [null_odds[q] for q in qids])) < 1e-4
    out = served["export"]
    assert out["null_score_diff_threshold"].tolist() == [threshold] * len(qids)
    answers = [a.decode() for a in out["answer"]]
    # Null scores at the threshold may round either way in another batch of windows.
    decided = [i for i, q in enumerate(qids) if abs(null_odds[q] - threshold) > 1e-4]
    assert [answers[i] for i in decided] == [predictions[qids[i]] for i in decided]
    out = served["export_only"]
    assert out["null_score_diff_threshold"].tolist() == [edited] * len(qids)
    is_null = out["null_score"] > edited
    assert 0 < is_null.sum() < len(qids)
    assert out["answer"].tolist() == np.where(is_null, b"", out["best_answer"]).tolist()


def _task(version_2):
    from albert.config import AlbertConfig

    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    return squad.SquadTask(None, None, None, config, version_2)


def test_eval_and_predict_features_of_one_file_are_written_once(tmp_path):
    from albert.config import AlbertConfig
    from albert.tokenization import FullTokenizer

    dev = write_marker_squad(tmp_path / "dev.json", 5, seed=1)
    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    tokenizer = FullTokenizer(spm_model_file=synthetic.SPM_MODEL)
    window = dict(max_seq_length=64, doc_stride=32, max_query_length=16)
    task = squad.SquadTask(None, dev, tokenizer, config, False, **window)
    task.feature_dir = str(tmp_path / "features")
    assert task.features(engine.PREDICT) is task.features(engine.EVAL)
    assert len(list((tmp_path / "features").glob("*.tfrecord"))) == 1


def test_losses_match_numpy():
    rng = np.random.default_rng(3)
    batch, length = 3, 7
    starts, ends = np.array([0, 2, 5]), np.array([0, 4, 6])
    features = {
        "start_positions": starts,
        "end_positions": ends,
        "is_impossible": np.array([1, 0, 0]),
        "is_real_example": np.array([1, 1, 0]),
    }
    normalizers = {"examples": tf.constant(2.0)}
    logits = rng.normal(size=(2, batch, length)).astype("float32")

    def log_softmax(x):
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    rows = np.arange(batch)
    loss, _ = _task(False).loss(
        {"start_logits": logits[0], "end_logits": logits[1]}, features, normalizers
    )
    per_row = -(log_softmax(logits[0])[rows, starts] + log_softmax(logits[1])[rows, ends]) / 2
    assert abs(float(loss) - per_row[:2].sum() / 2) < 1e-5
    cls = rng.normal(size=batch).astype("float32")
    outputs = {
        "start_log_probs": log_softmax(logits[0]),
        "end_log_probs": log_softmax(logits[1]),
        "cls_logits": cls,
    }
    loss, _ = _task(True).loss(outputs, features, normalizers)
    labels = features["is_impossible"]
    sigmoid_ce = np.maximum(cls, 0) - cls * labels + np.log1p(np.exp(-np.abs(cls)))
    per_row = per_row + 0.5 * sigmoid_ce
    assert abs(float(loss) - per_row[:2].sum() / 2) < 1e-5


def test_missing_predict_file_is_one_clear_error(tmp_path):
    config = synthetic.write_config(tmp_path / "config.json")
    with pytest.raises(ValueError, match="predict_file"):
        run_squad(f"--albert_config_file={config}", f"--output_dir={tmp_path}", "--do_eval")


def test_evaluating_a_file_without_answers_is_refused_before_training(tmp_path, monkeypatch):
    # It was refused at the first evaluation, after training to the first checkpoint.
    config = synthetic.write_config(tmp_path / "config.json")
    train_file = write_marker_squad(tmp_path / "train.json", 4, seed=0)
    predict_file = write_without_answers(train_file, tmp_path / "test.json")
    monkeypatch.setattr(engine, "run_with_flags", lambda *args: pytest.fail("ran the task"))
    with pytest.raises(ValueError, match="test.json holds no answers to evaluate against"):
        run_squad(
            *tiny_flags(config, tmp_path / "out", train_file, predict_file),
            "--do_train",
            "--do_eval",
        )


def test_v2_predictions_take_the_threshold_of_the_final_evaluation():
    # The final evaluation is of the weights that predict (model.ckpt-best), which need not
    # be the last checkpoint the training loop evaluated.
    task = _task(True)
    task.final_evaluation = {"global_step": 4, "null_score_diff_threshold": -1.5}
    assert task.null_threshold_for_predictions(predictions=None) == -1.5
    task.null_score_diff_threshold = 0.25  # --null_score_diff_threshold wins
    assert task.null_threshold_for_predictions(predictions=None) == 0.25
    task.null_score_diff_threshold = 0.0  # given as 0.0: still the flag's
    assert task.null_threshold_for_predictions(predictions=None) == 0.0


def test_a_v2_export_of_an_evaluation_without_a_threshold_uses_zero(absl_caplog):
    # An eval_results.txt block of these weights without a tuned threshold (a SQuAD 1.1
    # evaluation, --version_2_with_negative=false) has none to serve.
    task = _task(True)
    task.final_evaluation = {"global_step": 4, "exact_match": 50.0, "f1": 60.0}
    assert task.export_null_threshold() == 0.0
    assert "it nulls answers above 0.0" in absl_caplog.text


def test_a_v2_export_without_a_threshold_says_why_it_uses_zero(absl_caplog):
    # An export-only run has no predictions to tune on: the warning said "the predict file
    # has no answers", also when it has and an earlier --do_predict tuned on it.
    task = _task(True)
    assert task.export_null_threshold() == 0.0
    assert "it nulls answers above 0.0; pass --null_score_diff_threshold" in absl_caplog.text
    assert "the predict file has no answers" not in absl_caplog.text


def _checkpoint(directory, step):
    """(path, step) of a training checkpoint of `directory` (its index file only)."""
    directory.mkdir(exist_ok=True)
    path = directory / f"model.ckpt-{step}"
    Path(f"{path}.index").write_text("")
    return str(path), step


def _export_only(output_dir, weights, **settings):
    """The SQuAD 2.0 task of a run that only exports `weights` from `output_dir`."""
    task = _task(True)
    for name, value in settings.items():
        setattr(task, name, value)
    task.output_dir, task.final_weights = str(output_dir), weights
    return task


def _predict_with(output_dir, weights, monkeypatch, flag=None, tuned=None):
    """write_predictions of a --do_predict run of `weights` in `output_dir`, with the
    threshold `flag` (--null_score_diff_threshold), else `tuned` on a --predict_file with
    answers, else none (a test file); the model's outputs are not needed to choose it."""
    task = _export_only(output_dir, weights, null_score_diff_threshold=flag)
    monkeypatch.setattr(task, "answers", lambda *args: ({}, {}, {}))
    monkeypatch.setattr(task, "gold_dataset", lambda role: [{}] if tuned is not None else None)
    monkeypatch.setattr(
        task, "evaluate_predictions", lambda predictions: {"null_score_diff_threshold": tuned}
    )
    task.write_predictions({}, str(output_dir))
    return task


@pytest.mark.parametrize("chosen", ["flag", "tuned"])
def test_a_v2_export_alone_serves_the_threshold_of_predictions_json(
    tmp_path, monkeypatch, absl_caplog, chosen
):
    # Run 1 --do_predict (threshold tuned on a --predict_file with answers, or given), run 2
    # --export_dir alone, of the same weights: run 2 served 0.0, not predictions.json's.
    weights = _checkpoint(tmp_path, 4)
    _predict_with(tmp_path, weights, monkeypatch, **{chosen: -0.75})
    record = json.loads((tmp_path / "predictions_null_threshold.json").read_text())
    assert record["null_score_diff_threshold"] == -0.75
    assert (record["checkpoint"], record["global_step"]) == weights
    absl_caplog.clear()
    assert _export_only(tmp_path, weights).export_null_threshold() == -0.75
    source = "--null_score_diff_threshold" if chosen == "flag" else "tuned on --predict_file"
    assert f"Null threshold -0.75, as predictions.json of these weights ({source}" in (
        absl_caplog.text
    )
    # predictions.json rewritten with none (a test file): 0.0 and the warning, as it.
    _predict_with(tmp_path, weights, monkeypatch)
    absl_caplog.clear()
    assert _export_only(tmp_path, weights).export_null_threshold() == 0.0
    assert "it nulls answers above 0.0" in absl_caplog.text


def test_the_export_of_a_predicting_run_serves_its_own_threshold(tmp_path, monkeypatch):
    # The run that wrote predictions.json exports with the threshold it used, not by
    # reading its record back (gone here: a chief-only file, another run's rewrite).
    task = _predict_with(tmp_path, _checkpoint(tmp_path, 4), monkeypatch, tuned=-0.75)
    (tmp_path / "predictions_null_threshold.json").unlink()
    assert task.export_null_threshold() == -0.75


def test_squad_1_1_predictions_record_no_threshold(tmp_path, monkeypatch):
    task = _task(False)
    task.output_dir, task.final_weights = str(tmp_path), _checkpoint(tmp_path, 4)
    monkeypatch.setattr(task, "answers", lambda *args: ({}, {}, None))
    task.write_predictions({}, str(tmp_path))
    assert (tmp_path / "predictions.json").exists()
    assert not (tmp_path / "predictions_null_threshold.json").exists()


@pytest.mark.parametrize("version_2", [False, True])
def test_the_saved_model_is_given_the_v2_threshold_only(monkeypatch, version_2):
    from albert import export_qa

    exported = {}
    monkeypatch.setattr(export_qa, "export_question_answering", lambda *a, **k: exported.update(k))
    task = _task(version_2)
    task.tokenizer = types.SimpleNamespace(spm_model_file="spm.model", do_lower_case=True)
    monkeypatch.setattr(task, "check_export", lambda: None)
    task.null_score_diff_threshold = -0.5
    task.export_saved_model(None, "export")
    assert exported["null_score_diff_threshold"] == (-0.5 if version_2 else 0.0)


def test_a_v2_export_takes_the_recorded_threshold_of_its_weights_only(
    tmp_path, monkeypatch, absl_caplog
):
    weights = _checkpoint(tmp_path, 4)
    _predict_with(tmp_path, weights, monkeypatch, flag=-0.75)
    assert _export_only(tmp_path, weights).export_null_threshold() == -0.75
    for other in (
        _checkpoint(tmp_path, 8),
        (weights[0], 8),
        _checkpoint(tmp_path / "other_run", 4),
    ):
        absl_caplog.clear()
        assert _export_only(tmp_path, other).export_null_threshold() == 0.0, other
        assert "it nulls answers above 0.0" in absl_caplog.text
    # The same file rewritten after predicting (training went on with --nodo_eval).
    later = (tmp_path / "predictions_null_threshold.json").stat().st_mtime_ns + 10**9
    os.utime(f"{weights[0]}.index", ns=(later, later))
    assert _export_only(tmp_path, weights).export_null_threshold() == 0.0


def test_the_flag_and_an_evaluation_win_over_the_recorded_threshold(
    tmp_path, monkeypatch, absl_caplog
):
    weights = _checkpoint(tmp_path, 4)
    _predict_with(tmp_path, weights, monkeypatch, flag=-0.75)
    evaluation = {"global_step": 4, "null_score_diff_threshold": 1.5}
    task = _export_only(tmp_path, weights, null_score_diff_threshold=0.25)
    assert task.export_null_threshold() == 0.25
    task.final_evaluation = evaluation
    assert task.export_null_threshold() == 0.25
    assert "predictions.json of these weights was written" not in absl_caplog.text
    # An evaluation of these weights (eval_results.txt) wins, saying what predictions.json used.
    assert (
        _export_only(tmp_path, weights, final_evaluation=evaluation).export_null_threshold() == 1.5
    )
    assert (
        "predictions.json of these weights was written with null threshold -0.75 "
        "(--null_score_diff_threshold), not their evaluation's 1.5" in absl_caplog.text
    )


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        '{"checkpoint": "model.ckpt-4"}',
        '{"null_score_diff_threshold": "-1"}',
        '{"null_score_diff_threshold": -1}',  # names no checkpoint
        # Of these weights, but no number: JSON's true, and NaN (json.dumps writes it).
        '{"checkpoint": "model.ckpt-4", "global_step": 4, "null_score_diff_threshold": true}',
        '{"checkpoint": "model.ckpt-4", "global_step": 4, "null_score_diff_threshold": NaN}',
    ],
)
def test_a_damaged_threshold_record_is_one_warning_and_not_served(
    tmp_path, monkeypatch, absl_caplog, text
):
    weights = _checkpoint(tmp_path, 4)
    _predict_with(tmp_path, weights, monkeypatch, flag=-0.75)
    record = tmp_path / "predictions_null_threshold.json"
    record.write_text(text)
    absl_caplog.clear()
    assert _export_only(tmp_path, weights).export_null_threshold() == 0.0
    warnings = [r.getMessage() for r in absl_caplog.records if r.levelname == "WARNING"]
    ignored = [
        w for w in warnings if w.startswith(f"Ignoring {record}: not a readable threshold record")
    ]
    assert len(ignored) == 1 and "\n" not in ignored[0], warnings
    assert any("it nulls answers above 0.0" in w for w in warnings)


def test_no_threshold_record_is_no_warning_about_one(tmp_path, absl_caplog):
    # Exporting weights that no --do_predict run recorded is the usual case, not a damage.
    assert _export_only(tmp_path, _checkpoint(tmp_path, 4)).export_null_threshold() == 0.0
    assert "it nulls answers above 0.0" in absl_caplog.text
    assert "not a readable threshold record" not in absl_caplog.text


def test_earlier_evaluation_is_of_the_same_weights(tmp_path):
    from albert.metrics import write_eval_results
    from albert.tasks.weights import earlier_evaluation, written_after

    best = tmp_path / "model.ckpt-best"
    (tmp_path / "model.ckpt-best.index").write_text("")
    assert earlier_evaluation(str(tmp_path), str(best), 4) is None  # no eval_results.txt
    results = {"global_step": 4, "null_score_diff_threshold": -1.5, "checkpoint": str(best)}
    write_eval_results(str(tmp_path), results)
    assert earlier_evaluation(str(tmp_path), str(best), 4) == results
    # Evaluated again (another --predict_file, the same weights): the newest block is theirs.
    again = {**results, "null_score_diff_threshold": -0.5}
    (tmp_path / "eval_results.txt").unlink()
    for block in (results, again):
        write_eval_results(str(tmp_path), block, append=True)
    assert earlier_evaluation(str(tmp_path), str(best), 4) == again
    # Written by a run whose --output_dir was named another way (relative, from another
    # directory), read by one that names it with a trailing slash: the same checkpoint.
    renamed = {**again, "checkpoint": "elsewhere/out/model.ckpt-best"}
    write_eval_results(str(tmp_path), renamed, append=True)
    assert earlier_evaluation(f"{tmp_path}/", str(best), 4) == renamed
    # Predicting from another directory path of the same checkpoint (a relative output_dir).
    assert earlier_evaluation(str(tmp_path), "model.ckpt-best", 4) is None  # no such file
    assert earlier_evaluation(str(tmp_path), str(tmp_path / "model.ckpt-8"), 8) is None
    assert earlier_evaluation(str(tmp_path), str(best), 8) is None  # another step
    # --init_checkpoint=<another run>: its model.ckpt-best of the same step is other weights.
    other = tmp_path / "other_run" / "model.ckpt-best"
    other.parent.mkdir()
    (tmp_path / "other_run" / "model.ckpt-best.index").write_text("")
    os.utime(tmp_path / "other_run" / "model.ckpt-best.index", ns=(0, 0))
    assert earlier_evaluation(str(tmp_path), str(other), 4) is None
    # model.ckpt-best rewritten after the evaluation (training went on with --nodo_eval).
    later = (tmp_path / "eval_results.txt").stat().st_mtime_ns + 10**9
    os.utime(tmp_path / "model.ckpt-best.index", ns=(later, later))
    assert earlier_evaluation(str(tmp_path), str(best), 4) is None
    # Weights that are not there (deleted) were not evaluated by it.
    assert not written_after(str(tmp_path / "eval_results.txt"), str(tmp_path / "gone"))


def test_earlier_evaluation_of_weights_without_a_step(tmp_path, monkeypatch):
    # --init_checkpoint=<run>/model.weights.h5 (or an HF directory) has no global step: its
    # evaluation is written as `global_step = 0` (`None` by earlier versions) and must still
    # be found for --do_predict.
    from albert.metrics import write_eval_results
    from albert.tasks.weights import earlier_evaluation

    weights = tmp_path / "model.weights.h5"
    weights.write_text("")
    for written_step in (None, 0):
        results = {"global_step": written_step, "null_score_diff_threshold": -1.5}
        write_eval_results(str(tmp_path), {**results, "checkpoint": str(weights)})
        found = earlier_evaluation(str(tmp_path), str(weights), None)
        assert found is not None and found["null_score_diff_threshold"] == -1.5
    assert earlier_evaluation(str(tmp_path), str(weights), 4) is None
    # Another run's Keras file, of the same name (convert_checkpoint always writes
    # model.weights.h5): its predictions must not take this evaluation's threshold.
    other = tmp_path / "other" / "model.weights.h5"
    other.parent.mkdir()
    other.write_text("")
    os.utime(other, ns=(0, 0))  # written before the evaluation, as weights usually are
    assert earlier_evaluation(str(tmp_path), str(other), None) is None
    # The same file named by a relative path is the same weights.
    monkeypatch.chdir(tmp_path)
    assert earlier_evaluation(str(tmp_path), "./model.weights.h5", None) is not None


@pytest.mark.slow
def test_v2_test_file_predictions_take_the_threshold_tuned_on_dev(tmp_path):
    # Train and evaluate on dev, then predict a test file without answers in another run: the
    # threshold is the one eval_results.txt holds for those weights (it was 0 with a warning).
    config = synthetic.write_config(tmp_path / "config.json")
    dev = write_marker_squad(tmp_path / "dev.json", 12, seed=1)
    test_file = write_without_answers(dev, tmp_path / "test.json")
    output_dir = tmp_path / "out"
    v2 = "--version_2_with_negative"
    run_squad(
        *tiny_flags(config, output_dir, dev, dev),
        v2,
        "--train_step=2",
        "--save_checkpoints_steps=2",
        "--do_train",
        "--do_eval",
    )
    results_file = output_dir / "eval_results.txt"
    tuned = read_key_values(results_file)["null_score_diff_threshold"]
    for threshold, all_null in ((-1e9, True), (1e9, False)):
        # Every null score is far from these, so the predictions show which one was used.
        results_file.write_text(
            results_file.read_text().replace(
                f"null_score_diff_threshold = {tuned}", f"null_score_diff_threshold = {threshold}"
            )
        )
        tuned = threshold
        run_squad(*tiny_flags(config, output_dir, dev, test_file), v2, "--do_predict")
        predictions = json.loads((output_dir / "predictions.json").read_text())
        assert len(predictions) == 12
        assert all((text == "") == all_null for text in predictions.values()), predictions


@pytest.mark.slow
def test_v2_export_alone_serves_the_threshold_an_earlier_predict_used(tmp_path, monkeypatch):
    # Trained without an evaluation, then --do_predict of a test file with the threshold as
    # a flag, then --export_dir alone: the SavedModel served 0.0, not predictions.json's.
    from albert import export_qa

    config = synthetic.write_config(tmp_path / "config.json")
    dev = write_marker_squad(tmp_path / "dev.json", 12, seed=1)
    test_file = write_without_answers(dev, tmp_path / "test.json")
    common = [*tiny_flags(config, tmp_path / "out", dev, test_file), "--version_2_with_negative"]
    run_squad(*common, "--train_step=2", "--save_checkpoints_steps=2", "--do_train")
    run_squad(*common, "--null_score_diff_threshold=-1e9", "--do_predict")
    predictions = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert set(predictions.values()) == {""}  # every null score is above -1e9
    served = []
    monkeypatch.setattr(
        export_qa,
        "export_question_answering",
        lambda *args, **settings: served.append(settings["null_score_diff_threshold"]),
    )
    run_squad(*common, f"--export_dir={tmp_path / 'export'}")
    assert served == [-1e9]


@pytest.mark.slow
def test_predict_reuses_the_final_eval_of_the_same_file_and_batch(tmp_path, monkeypatch):
    # EVAL and PREDICT both read --predict_file: at one batch size, the predict pass of the
    # final weights is their final eval's (minutes for a large model over SQuAD 2.0 dev).
    train = write_marker_squad(tmp_path / "train.json", 12, seed=0)
    dev = write_marker_squad(tmp_path / "dev.json", 9, seed=1)
    config = synthetic.write_config(tmp_path / "config.json")
    passes = []
    predict = engine.FineTuningTask.predict

    def counting_predict(self, model, strategy, role, steps_per_call=1):
        passes.append(role)
        return predict(self, model, strategy, role, steps_per_call)

    monkeypatch.setattr(engine.FineTuningTask, "predict", counting_predict)
    output_dir = tmp_path / "out"
    common = [*tiny_flags(config, output_dir, train, dev), "--predict_batch_size=4"]
    steps = ["--train_step=4", "--save_checkpoints_steps=2"]
    run_squad(*common, "--eval_batch_size=4", *steps, "--do_train", "--do_predict")
    assert passes == [engine.EVAL, engine.EVAL]  # steps 2 and 4; no PREDICT pass
    # The features of --predict_file are written once, not once per role.
    written = [p.name for p in (output_dir / "features").glob("*.tfrecord")]
    assert not [name for name in written if name.startswith("predict")], written
    reused = (output_dir / "predictions.json").read_bytes()
    # A predict pass of the same weights at the same batch writes the same file.
    (output_dir / "predictions.json").unlink()
    passes.clear()
    run_squad(*common, "--eval_batch_size=3", "--do_predict")
    assert passes == [engine.EVAL, engine.PREDICT]
    assert (output_dir / "predictions.json").read_bytes() == reused
