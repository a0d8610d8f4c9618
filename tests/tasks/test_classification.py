"""GLUE fine-tuning end to end on synthetic, learnable data: a tiny random-init model
reaches near-perfect dev accuracy (SST-2 layout) and a high Pearson (STS-B layout); the
prediction files have the GLUE server's format; features are cached; the loss and metrics
agree with numpy."""

import csv
from pathlib import Path

import numpy as np
import pytest
import synthetic_glue as synthetic
import tensorflow as tf

from albert.config import AlbertConfig
from albert.data import glue
from albert.tasks import classification, engine
from albert.tokenization import FullTokenizer
from albert.training import loop
from albert.training.checkpointing import read_key_values
from tests.helpers import scalar_tags

STEPS = "--train_step=100"


def _rows(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.reader(f, delimiter="\t"))


@pytest.fixture(scope="module")
def sst2(tmp_path_factory):
    root = tmp_path_factory.mktemp("sst2")
    data_dir = synthetic.write_sst2(root / "glue")
    config = synthetic.write_config(root / "config.json")
    output_dir = root / "out"
    flags = synthetic.tiny_run_flags(data_dir, output_dir, config, "sst-2")
    metrics, _ = synthetic.run_classifier(
        *flags,
        STEPS,
        "--save_checkpoints_steps=50",
        "--jit_compile",  # the classifier head under XLA (the suite's runs are otherwise off)
        "--do_train",
        "--do_eval",
        "--do_predict",
        f"--cached_dir={root / 'cache'}",
        f"--export_dir={root / 'export'}",
    )
    return root, data_dir, output_dir, flags, metrics


@pytest.mark.slow
@pytest.mark.xdist_group("sst2_run")  # one worker: the `sst2` run is made once
def test_sst2_reaches_near_perfect_dev_accuracy(sst2):
    _, _, output_dir, _, metrics = sst2
    assert metrics["accuracy"] >= 0.97, metrics
    results = read_key_values(output_dir / "eval_results.txt")
    assert float(results["accuracy"]) == pytest.approx(metrics["accuracy"])
    assert results["eval_accuracy"] == results["accuracy"]  # the original's name too
    best = read_key_values(output_dir / "best_checkpoint.txt")
    assert best["metric"] == "accuracy"
    assert results["global_step"] == best["global_step"]  # the final eval is of the best
    assert {"loss", "accuracy", "learning_rate"} <= scalar_tags(output_dir)
    assert {"loss", "accuracy"} <= scalar_tags(output_dir / "eval")


@pytest.mark.slow
@pytest.mark.xdist_group("sst2_run")  # one worker: the `sst2` run is made once
def test_sst2_prediction_files_have_the_glue_format(sst2):
    _, data_dir, output_dir, _, _ = sst2
    examples = glue.read_examples("sst-2", data_dir, "test")
    submission = _rows(output_dir / "SST-2.tsv")
    assert submission[0] == ["index", "prediction"]
    assert [row[0] for row in submission[1:]] == [e.guid for e in examples]
    # The model learned the rule, so its test predictions follow it.
    expected = ["1" if synthetic.KEYWORD in e.text_a.split() else "0" for e in examples]
    assert [row[1] for row in submission[1:]] == expected
    assert _rows(output_dir / "submit_results.tsv") == submission
    probabilities = np.array(_rows(output_dir / "test_results.tsv"), dtype=np.float64)
    assert probabilities.shape == (len(examples), 2)
    assert np.max(np.abs(probabilities.sum(axis=1) - 1.0)) < 1e-5
    assert [str(i) for i in probabilities.argmax(axis=1)] == expected


@pytest.mark.slow
@pytest.mark.xdist_group("sst2_run")  # one worker: the `sst2` run is made once
def test_sst2_export_serves_the_predicted_weights(sst2):
    root, data_dir, output_dir, _, _ = sst2
    serve = tf.saved_model.load(str(root / "export")).signatures["serving_default"]
    sentences = [e.text_a for e in glue.read_examples("sst-2", data_dir, "test")]
    served = serve(sentence_a=tf.constant(sentences))
    written = np.array(_rows(output_dir / "test_results.tsv"), dtype=np.float64)
    assert np.max(np.abs(served["probabilities"].numpy() - written)) < 1e-5
    labels = [label.decode() for label in served["label"].numpy()]
    assert labels == [row[1] for row in _rows(output_dir / "SST-2.tsv")[1:]]


@pytest.mark.slow
@pytest.mark.xdist_group("sst2_run")  # one worker: the `sst2` run is made once
def test_second_run_reads_the_feature_cache(sst2, monkeypatch):
    root, _, output_dir, flags, metrics = sst2
    assert len(list((root / "cache").glob("sst-2_dev_seq32_*.tfrecord"))) == 1

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("tokenized again although the cache holds the features")

    monkeypatch.setattr(glue, "convert_examples_to_features", no_tokenizing)
    again, _ = synthetic.run_classifier(
        *flags, STEPS, "--do_eval", f"--cached_dir={root / 'cache'}"
    )
    assert again["accuracy"] == metrics["accuracy"]
    assert again["global_step"] == metrics["global_step"]


@pytest.mark.slow
def test_a_rerun_in_the_output_dir_reads_its_features(tmp_path, monkeypatch):
    # Without --cached_dir the features are cached in --output_dir/features, as the original
    # caches in --output_dir: a resumed or later run does not tokenize MNLI's 393k again.
    data_dir = synthetic.write_sst2(tmp_path / "glue")
    config = synthetic.write_config(tmp_path / "config.json")
    flags = synthetic.tiny_run_flags(data_dir, tmp_path / "out", config, "sst-2")
    first, _ = synthetic.run_classifier(*flags, "--train_step=2", "--do_train", "--do_eval")
    cached = list((tmp_path / "out" / "features").glob("sst-2_*_seq32_*.tfrecord"))
    assert sorted(path.name.split("_")[1] for path in cached) == ["dev", "train"]

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("tokenized again although --output_dir caches the features")

    monkeypatch.setattr(glue, "convert_examples_to_features", no_tokenizing)
    again, _ = synthetic.run_classifier(*flags, "--do_eval")
    assert again == first


def _task(data_dir, task_name, config=None):
    tokenizer = FullTokenizer(spm_model_file=synthetic.SPM_MODEL, do_lower_case=True)
    config = config or AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    return classification.GlueTask(task_name, data_dir, tokenizer, config, 32, 16, 10, 7)


@pytest.mark.slow
def test_stsb_pearson_rises_from_chance(tmp_path):
    data_dir = synthetic.write_stsb(tmp_path / "glue")
    config = synthetic.write_config(tmp_path / "config.json")
    task = _task(data_dir, "sts-b")
    tf.keras.utils.set_random_seed(12345)  # the run's --random_seed: the same initial weights
    before = task.evaluate(task.create_model(), tf.distribute.get_strategy())
    flags = synthetic.tiny_run_flags(data_dir, tmp_path / "out", config, "sts-b")
    after, _ = synthetic.run_classifier(
        *flags,
        "--train_step=150",
        "--save_checkpoints_steps=150",
        "--do_train",
        "--do_eval",
        "--do_predict",
    )
    assert abs(before["pearson"]) < 0.5 and after["pearson"] > 0.95, (before, after)
    assert {"pearson", "spearman", "mse", "loss"} <= after.keys()
    submission = _rows(tmp_path / "out" / "STS-B.tsv")
    assert submission[0] == ["index", "prediction"] and len(submission) == 24
    scores = [float(row[1]) for row in submission[1:]]
    assert all(
        0.0 <= s <= 5.0 and len(row[1].split(".")[1]) == 3
        for s, row in zip(scores, submission[1:], strict=True)
    )
    raw = np.array(_rows(tmp_path / "out" / "test_results.tsv"), dtype=np.float64)
    assert raw.shape == (23, 1)
    assert np.max(np.abs(np.clip(raw[:, 0], 0, 5) - scores)) <= 5e-4


def test_loss_matches_numpy_and_ignores_padding(tmp_path):
    data_dir = synthetic.write_mnli(tmp_path)
    task = _task(data_dir, "mnli")
    logits = np.array([[2.0, -1.0, 0.5], [0.1, 0.2, 0.3], [5.0, 5.0, 5.0]], np.float32)
    features = {"label_ids": np.array([0, 2, 1]), "is_real_example": np.array([1, 1, 0])}
    loss, sums = task.loss({"logits": tf.constant(logits)}, features, {"examples": 4.0})
    cross_entropy = -np.log(classification.softmax(logits))[[0, 1], [0, 2]]
    # Divided by the GLOBAL count of real examples (4 across replicas), padding left out.
    assert abs(float(loss) - cross_entropy.sum() / 4.0) < 1e-6
    assert float(sums["correct"]) == 2.0 and float(sums["real_examples"]) == 2.0
    assert task.metric_results({"correct": 2.0, "real_examples": 2.0}) == {"accuracy": 1.0}
    expected = float(np.mean(-np.log(classification.softmax(logits[:2]))[[0, 1], [0, 2]]))
    assert abs(classification.mean_loss(logits[:2], [0, 2], False) - expected) < 1e-9

    stsb = _task(synthetic.write_stsb(tmp_path), "sts-b")
    scores = {"logits": tf.constant([[1.0], [3.0]])}
    loss, sums = stsb.loss(
        scores,
        {"label_ids": np.array([2.0, 3.5]), "is_real_example": np.array([1, 1])},
        {"examples": 2.0},
    )
    assert abs(float(loss) - (1.0 + 0.25) / 2.0) < 1e-6
    assert float(sums["squared_error"]) == pytest.approx(1.25)


@pytest.mark.parametrize(
    "task_name, num_labels, best_metric, pair",
    [
        ("cola", 2, "matthews_corr", False),
        ("sst-2", 2, "accuracy", False),
        ("mrpc", 2, "accuracy", True),
        ("sts-b", 1, "pearson", True),
        ("qqp", 2, "accuracy", True),
        ("mnli", 3, "accuracy", True),
        ("mismnli", 3, "accuracy", True),
        ("qnli", 2, "accuracy", True),
        ("rte", 2, "accuracy", True),
        ("wnli", 2, "accuracy", True),
        ("ax", 3, "accuracy", True),
    ],
)
def test_every_glue_task_has_its_head_and_metric(
    tmp_path, task_name, num_labels, best_metric, pair
):
    task = _task(tmp_path, task_name)
    assert task.create_model().num_labels == num_labels
    assert task.best_metric == best_metric
    assert (task.glue.test_columns.text_b is not None) == pair  # sentence_b in the SavedModel


def test_export_needs_a_sentencepiece_model(tmp_path):
    task = _task(tmp_path, "sst-2")
    task.tokenizer = FullTokenizer(vocab_file=str(Path(synthetic.SPM_MODEL).with_suffix(".vocab")))
    with pytest.raises(engine.FineTuningError, match="--export_dir needs --spm_model_file"):
        task.export_saved_model(task.create_model(), str(tmp_path / "export"))


def test_an_export_that_cannot_be_written_stops_the_run_before_training(tmp_path, monkeypatch):
    # Found only after training, the error cost the whole run; it is a start-up check now.
    from albert.training import loop

    task = _task(tmp_path, "sst-2")
    task.tokenizer = FullTokenizer(vocab_file=str(Path(synthetic.SPM_MODEL).with_suffix(".vocab")))

    def no_training(*args, **kwargs):
        raise AssertionError("trained before checking --export_dir")

    monkeypatch.setattr(loop, "run", no_training)
    options = loop.RunOptions(
        output_dir=str(tmp_path / "out"), num_train_steps=1, train_batch_size=2
    )
    with pytest.raises(engine.FineTuningError, match="--export_dir needs --spm_model_file"):
        engine.run(
            task,
            tf.distribute.get_strategy(),
            options,
            optimizer_fn=None,
            export_dir=str(tmp_path / "export"),
        )
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("where", ["output_dir", "its_parent", "a_folder_of_other_files"])
def test_an_export_dir_over_other_files_stops_the_run_before_training(tmp_path, monkeypatch, where):
    # The export replaces export_dir whole: over the output_dir it deleted the run's
    # checkpoints and results; over any other folder, that folder's files.
    from albert.training import loop

    def no_training(*args, **kwargs):
        raise AssertionError("trained before checking --export_dir")

    monkeypatch.setattr(loop, "run", no_training)
    output_dir = tmp_path / "out" / "sst2"
    export_dir = {
        "output_dir": output_dir,
        "its_parent": output_dir.parent,
        "a_folder_of_other_files": tmp_path / "notes",
    }[where]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    options = loop.RunOptions(output_dir=str(output_dir), num_train_steps=1, train_batch_size=2)
    with pytest.raises(engine.FineTuningError, match="--export_dir"):
        engine.run(
            _task(tmp_path, "sst-2"),
            tf.distribute.get_strategy(),
            options,
            optimizer_fn=None,
            export_dir=str(export_dir) + "/",
        )
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"


def test_a_diverged_stsb_checkpoint_never_becomes_the_best(tmp_path, monkeypatch):
    # NaN scores (a run that diverged) give a NaN Pearson; it must not replace the best
    # checkpoint, nor make every later checkpoint the best (the original compares with >).
    task = _task(tmp_path, "sts-b")
    kept = []
    monkeypatch.setattr(task, "save_best", lambda model, path, prefix: kept.append(path))
    labels = np.array([0.5, 2.0, 3.0, 4.5], np.float32)
    good = task.evaluate_predictions({"logits": labels[:, None] + 0.1, "label_ids": labels})
    nan = task.evaluate_predictions({"logits": np.full([4, 1], np.nan), "label_ids": labels})
    worse = task.evaluate_predictions({"logits": labels[::-1, None], "label_ids": labels})
    for step, metrics in ((1, good), (2, nan), (3, worse)):
        loop.keep_best(task, None, str(tmp_path), metrics, str(tmp_path / f"model.ckpt-{step}"))
    assert kept == [str(tmp_path / "model.ckpt-1")]


def test_eval_results_hold_the_original_names_too():
    # Scripts that read the original's eval_results.txt look for its metric_fn keys.
    labels = np.array([0, 1, 1, 0, 1])
    logits = np.eye(2, dtype=np.float32)[[0, 1, 0, 0, 1]]
    cola = _task(None, "cola")
    entries = cola.eval_results_entries(
        {"global_step": 3, **cola.evaluate_predictions({"logits": logits, "label_ids": labels})}
    )
    assert entries["eval_accuracy"] == entries["accuracy"] == pytest.approx(0.8)
    assert entries["matthew_corr"] == entries["matthews_corr"]
    assert entries["eval_loss"] == entries["loss"] and entries["global_step"] == 3
    scores = np.array([0.5, 2.0, 3.0], np.float32)
    stsb = _task(None, "sts-b")
    entries = stsb.eval_results_entries(
        stsb.evaluate_predictions({"logits": scores[:, None] + 0.5, "label_ids": scores})
    )
    assert entries["MSE"] == entries["mse"] == pytest.approx(0.25)
    assert "eval_accuracy" not in entries  # the original has none for STS-B either


def test_eval_loss_is_finite_for_confident_wrong_logits():
    # log(softmax) underflowed to -inf beyond a logit gap of ~745 (a diverged head).
    logits = np.array([[1000.0, 0.0], [0.0, 3.0]])
    loss = classification.mean_loss(logits, np.array([1, 1]), regression=False)
    expected = (1000.0 + np.log1p(np.exp(-3.0))) / 2
    assert loss == pytest.approx(expected)


def test_predicted_classes_are_the_predictions_then_the_labels():
    # warn_if_one_class warns when every prediction is one class and the labels hold several.
    task = classification.GlueTask("mrpc", "glue", None, None, 8, 8, 8, 8)
    logits = np.array([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]])
    predicted, true = task.predicted_classes({"logits": logits, "label_ids": [0, 1, 0]})
    assert list(predicted) == ["1", "1", "1"] and list(true) == ["0", "1", "0"]


@pytest.mark.parametrize("args, threshold", [([], None), (["--threshold_to_export=0.25"], 0.25)])
def test_threshold_to_export_is_none_unless_given(monkeypatch, args, threshold):
    from types import SimpleNamespace

    from absl import flags

    setup = SimpleNamespace(
        task_key="mrpc", tokenizer=None, config=None, strategy=None, options=None
    )
    monkeypatch.setattr(classification.finetuning_flags, "setup_from_flags", lambda *args: setup)
    monkeypatch.setattr(classification.engine, "run_with_flags", lambda task, *args: task)
    flag_values = flags.FlagValues()
    classification.define_classifier_flags(flag_values)
    flag_values(
        ["run_classifier", "--task_name=mrpc", "--output_dir=out", "--max_seq_length=8", *args]
    )
    task = classification.run_from_flags(flag_values)
    assert task.threshold_to_export == threshold
