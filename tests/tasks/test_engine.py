"""The fine-tuning engine's weight rules: --init_checkpoint from an official TF1 checkpoint,
an HF directory, a pretraining output directory (its TF1-named model.ckpt-best or a training
checkpoint) or a fine-tuning run (head kept when it fits), with clear errors otherwise."""

import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import synthetic_glue as synthetic
import tensorflow as tf

from albert.checkpoints import CheckpointError, load_any, save_checkpoint, training_format
from albert.config import AlbertConfig
from albert.modeling import AlbertBackbone, AlbertClassifier, AlbertPretrainer
from albert.tasks import engine
from albert.tasks.pretraining import PretrainingTask
from albert.training import loop
from albert.training.inputs import InputError
from tests.helpers import write_training_checkpoint

CONFIG = AlbertConfig.from_dict(synthetic.TINY_CONFIG)


def _randomized(model, seed):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
    return model


def _classifier(num_labels=3, config=CONFIG, seed=100):
    return _randomized(AlbertClassifier(AlbertBackbone(config), num_labels), seed)


def _values(weights):
    return [w.numpy().copy() for w in weights]


def _assert_equal(weights, expected):
    assert len(weights) == len(expected)
    for weight, value in zip(weights, expected, strict=True):
        assert np.max(np.abs(weight.numpy() - value)) == 0.0, weight.path


def _head(model):
    return model.classifier.weights


@pytest.fixture(scope="module")
def pretraining_dir(tmp_path_factory):
    """A run_pretraining output dir: model.ckpt-7 (training format), a TF1-named
    model.ckpt-best from other weights, the Keras export and albert_config.json."""
    directory = tmp_path_factory.mktemp("pretraining")
    latest = _randomized(AlbertPretrainer(CONFIG), seed=1)
    path = write_training_checkpoint(latest, directory, 7)
    best = _randomized(AlbertPretrainer(CONFIG), seed=2)
    task = PretrainingTask.__new__(PretrainingTask)
    task.save_best(best, path, os.path.join(directory, training_format.BEST_PREFIX))
    save_checkpoint(latest, str(directory), "keras")
    return directory, latest, best


def test_tf1_checkpoint_loads_the_encoder_and_leaves_the_head(tmp_path):
    source = _randomized(AlbertPretrainer(CONFIG), seed=3)
    prefix = save_checkpoint(source, str(tmp_path), "tf1")
    model = _classifier()
    head = _values(_head(model))
    assert engine.load_finetuning_weights(model, prefix) is False
    _assert_equal(model.backbone.weights, _values(source.backbone.weights))
    _assert_equal(_head(model), head)


def test_hf_directory_loads_the_encoder(tmp_path):
    source = _randomized(AlbertPretrainer(CONFIG), seed=4)
    save_checkpoint(source, str(tmp_path / "hf"), "hf")
    model = _classifier(num_labels=1)
    assert engine.load_finetuning_weights(model, str(tmp_path / "hf")) is False
    _assert_equal(model.backbone.weights, _values(source.backbone.weights))


def test_pretraining_directory_means_its_best_checkpoint(pretraining_dir):
    directory, latest, best = pretraining_dir
    model = _classifier()
    engine.load_finetuning_weights(model, str(directory))
    _assert_equal(model.backbone.weights, _values(best.backbone.weights))
    # A training checkpoint of the pretrainer gives its encoder only.
    model = _classifier()
    head = _values(_head(model))
    assert engine.load_finetuning_weights(model, str(directory / "model.ckpt-7")) is False
    _assert_equal(model.backbone.weights, _values(latest.backbone.weights))
    _assert_equal(_head(model), head)


def test_fine_tuned_run_keeps_its_head_when_the_shape_fits(tmp_path):
    mnli = _classifier(num_labels=3, seed=5)
    write_training_checkpoint(mnli, tmp_path, 30)
    ax = _classifier(num_labels=3)
    assert engine.load_finetuning_weights(ax, str(tmp_path), require_head=True) is True
    _assert_equal(ax.weights, _values(mnli.weights))
    # MNLI -> RTE (2 labels): the encoder transfers, the head starts afresh.
    rte = _classifier(num_labels=2)
    head = _values(_head(rte))
    assert engine.load_finetuning_weights(rte, str(tmp_path)) is False
    _assert_equal(rte.backbone.weights, _values(mnli.backbone.weights))
    _assert_equal(_head(rte), head)
    with pytest.raises(engine.FineTuningError, match="holds no AlbertClassifier head"):
        engine.load_finetuning_weights(rte, str(tmp_path), require_head=True)


def test_pretrained_weights_cannot_predict_without_training(pretraining_dir):
    directory, _, _ = pretraining_dir
    with pytest.raises(engine.FineTuningError, match="fine-tune first"):
        engine.load_finetuning_weights(_classifier(), str(directory), require_head=True)


def test_mismatched_config_is_a_clear_error(pretraining_dir, tmp_path):
    directory, _, _ = pretraining_dir
    other = CONFIG.replace(hidden_size=48, intermediate_size=40)
    with pytest.raises(CheckpointError, match="hidden_size=48 vs 32"):
        engine.load_finetuning_weights(_classifier(config=other), str(directory))
    with pytest.raises(CheckpointError, match="does not fit this model"):
        engine.load_finetuning_weights(_classifier(config=other), str(directory / "model.ckpt-7"))
    with pytest.raises(CheckpointError, match="No checkpoint found"):
        engine.load_finetuning_weights(_classifier(), str(tmp_path / "missing"))


def test_final_weights_prefer_the_best_checkpoint(tmp_path):
    options = loop.RunOptions(output_dir=str(tmp_path), num_train_steps=1, train_batch_size=1)
    with pytest.raises(engine.FineTuningError, match="holds no checkpoint"):
        engine.load_final_weights(_classifier(), options)
    last = _classifier(seed=6)
    write_training_checkpoint(_classifier(seed=7), tmp_path, 10)
    path = write_training_checkpoint(last, tmp_path, 20)
    model = _classifier()
    assert engine.load_final_weights(model, options) == (path, 20)
    _assert_equal(model.weights, _values(last.weights))
    best = os.path.join(tmp_path, training_format.BEST_PREFIX)
    training_format.copy_checkpoint(os.path.join(tmp_path, "model.ckpt-10"), best)
    model = _classifier()
    assert engine.load_final_weights(model, options) == (best, 10)
    _assert_equal(model.weights, _values(_classifier(seed=7).weights))


def test_final_weights_without_a_step_say_so(tmp_path, absl_caplog):
    # Keras weights (and HF directories) hold no global step: eval_results.txt reports 0,
    # and the console says there is none rather than "global step None".
    weights = save_checkpoint(_classifier(seed=8), str(tmp_path / "keras"), "keras")
    options = loop.RunOptions(
        output_dir=str(tmp_path / "out"),
        num_train_steps=1,
        train_batch_size=1,
        init_checkpoint=weights,
    )
    assert engine.load_final_weights(_classifier(), options) == (weights, None)
    assert f"Final weights: {weights} (no global step)." in absl_caplog.text
    assert "None" not in absl_caplog.text


def test_a_run_directory_logs_the_checkpoint_it_reads(tmp_path, absl_caplog):
    # run_pretraining --init_checkpoint=<run dir> reads its newest checkpoint, the fine-tuning
    # scripts its model.ckpt-best: the log names the file, not only the directory.
    write_training_checkpoint(_classifier(seed=9), tmp_path, 10)
    newest = write_training_checkpoint(_classifier(seed=10), tmp_path, 20)
    load_any(_classifier(), str(tmp_path))
    assert f"from the training checkpoint {newest}." in absl_caplog.text


def test_the_exported_weights_are_named_by_their_step(absl_caplog):
    # A fine-tuning run exports its last step's weights, then evaluates and predicts with
    # model.ckpt-best ("Final weights: ... (global step 2)"): the export line must not
    # read as a second, different set of final weights.
    task = types.SimpleNamespace(export=lambda model, output_dir: f"{output_dir}/model.weights.h5")
    options = types.SimpleNamespace(output_dir="out")
    loop._export(types.SimpleNamespace(task=task, model=None, options=options, step=6))
    assert "Weights of the last step (6) written to out/model.weights.h5." in absl_caplog.text
    assert "Final weights" not in absl_caplog.text


# The engine under MirroredStrategy over 2 logical CPUs (set before TensorFlow starts).
_MIRRORED_SCRIPT = """
import json, sys
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import synthetic_glue
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
metrics, probabilities = synthetic_glue.brief_engine_run(strategy, sys.argv[1], sys.argv[2])
print(json.dumps({"metrics": metrics, "probabilities": probabilities.tolist()}))
"""


@pytest.mark.slow
def test_two_replicas_give_the_one_device_result(tmp_path):
    """The same global batches, so the same training, dev metrics and test predictions as
    one device: per-replica batching, padding and the order of gathered rows are right."""
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=48, num_dev=29, num_test=11)
    here = Path(__file__).resolve().parent
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join([str(here.parents[1]), str(here)]),
    )
    run = subprocess.run(
        [sys.executable, "-c", _MIRRORED_SCRIPT, data_dir, str(tmp_path / "mirrored")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    mirrored = json.loads(run.stdout.strip().splitlines()[-1])
    metrics, expected = synthetic.brief_engine_run(
        tf.distribute.get_strategy(), data_dir, tmp_path / "default"
    )
    assert mirrored["metrics"]["global_step"] == metrics["global_step"]  # the best, 3 or 6
    for key in ("accuracy", "loss"):
        assert abs(mirrored["metrics"][key] - metrics[key]) < 1e-5, key
    assert expected.shape == (11, 2)
    assert np.max(np.abs(np.array(mirrored["probabilities"]) - expected)) < 1e-5


class _StubTask:
    """What `engine`'s helpers read of a task, without a model or data."""

    best_metric = "accuracy"

    def __init__(self, eval_batch=8, predict_batch=8, shared_features=False):
        self.batch_sizes = {engine.EVAL: eval_batch, engine.PREDICT: predict_batch}
        self._features = {engine.EVAL: object()}
        self._features[engine.PREDICT] = (
            self._features[engine.EVAL] if shared_features else object()
        )
        self.predicted = []

    @property
    def eval_batch_size(self):
        return self.batch_sizes[engine.EVAL]

    @eval_batch_size.setter
    def eval_batch_size(self, value):
        self.batch_sizes[engine.EVAL] = value

    def features(self, role):
        return self._features[role]

    def predict(self, model, strategy, role, steps_per_call=1):
        self.predicted.append(role)
        return {"from": role}

    def check_export(self):
        pass


def test_eval_predictions_stand_for_predict_ones_only_over_the_same_features_and_batches():
    evaluated = {"from": engine.EVAL}
    # GLUE: dev and test are other examples, whatever the batch sizes.
    task = _StubTask()
    assert engine._final_predictions(task, None, None, 1, evaluated) == {"from": engine.PREDICT}
    # SQuAD's --predict_file: the same features; at another batch size, a pass of its own.
    task = _StubTask(predict_batch=4, shared_features=True)
    assert engine._final_predictions(task, None, None, 1, evaluated) == {"from": engine.PREDICT}
    task = _StubTask(shared_features=True)
    assert engine._final_predictions(task, None, None, 1, evaluated) is evaluated
    assert task.predicted == []


def test_batches_left_at_their_defaults_fit_the_replicas_and_given_ones_must_divide():
    options = loop.RunOptions(
        output_dir="out",
        num_train_steps=1,
        train_batch_size=4,
        eval_batch_size=3,
        do_eval=True,
        defaulted_batch_flags=("eval_batch_size", "predict_batch_size"),
    )
    task = _StubTask(eval_batch=3, predict_batch=3)
    fitted = engine.fit_batch_sizes(task, 2, options, do_predict=True)
    assert fitted.eval_batch_size == 4 and task.batch_sizes == {"eval": 4, "predict": 4}
    given = dataclasses.replace(options, defaulted_batch_flags=("eval_batch_size",))
    with pytest.raises(InputError, match="--predict_batch_size=3 must be a positive multiple"):
        engine.fit_batch_sizes(_StubTask(predict_batch=3), 2, given, do_predict=True)
    # Without --do_predict the predict batch is not used, so not checked.
    engine.fit_batch_sizes(_StubTask(predict_batch=3), 2, given, do_predict=False)


def test_an_export_dir_beside_the_output_dir_is_not_inside_it(tmp_path):
    task = _StubTask()
    engine.check_export_target(task, str(tmp_path / "run_export"), str(tmp_path / "run_export2"))
    with pytest.raises(engine.FineTuningError, match="holds --output_dir"):
        engine.check_export_target(task, str(tmp_path / "run"), str(tmp_path / "run" / "out"))


@pytest.mark.parametrize(
    "keep_checkpoint_max, best_metric, pruned",
    [(5, "accuracy", True), (0, "accuracy", False), (5, None, False)],
)
def test_eval_alone_prunes_unless_every_checkpoint_is_kept_or_there_is_no_best(
    tmp_path, monkeypatch, keep_checkpoint_max, best_metric, pruned
):
    calls = []
    monkeypatch.setattr(
        engine.pruning, "remove_evaluated_checkpoints", lambda *args: calls.append(args)
    )
    task = _StubTask()
    task.best_metric = best_metric
    options = loop.RunOptions(
        output_dir=str(tmp_path),
        num_train_steps=1,
        train_batch_size=1,
        do_train=False,
        do_eval=True,
        keep_checkpoint_max=keep_checkpoint_max,
    )
    engine._evaluate_saved_checkpoints(task, None, tf.distribute.get_strategy(), options)
    assert bool(calls) == pruned


@pytest.mark.parametrize("do_train, evaluated_again", [(True, False), (False, True)])
def test_saved_checkpoints_are_evaluated_and_pruned_by_eval_alone_only(
    tmp_path, monkeypatch, do_train, evaluated_again
):
    # After --do_train --do_eval the loop has evaluated every checkpoint it saved, and the
    # run keeps them as --keep_checkpoint_max says: no second evaluation pass, no pruning.
    calls = []
    monkeypatch.setattr(engine.loop, "run", lambda *args: {"accuracy": 0.5})
    monkeypatch.setattr(engine, "_evaluate_saved_checkpoints", lambda *args: calls.append(1))
    monkeypatch.setattr(engine, "load_final_weights", lambda *args: ("model.ckpt-2", 2))
    monkeypatch.setattr(engine, "_final_metrics", lambda *args: ({"accuracy": 0.5}, None))
    task = _StubTask()
    task.create_model = lambda: None
    task.head_labels = ()
    task.eval_results_entries = lambda metrics: metrics
    options = loop.RunOptions(
        output_dir=str(tmp_path),
        num_train_steps=2,
        train_batch_size=1,
        do_train=do_train,
        do_eval=True,
    )
    results = engine._run_locked(task, tf.distribute.get_strategy(), options, None, False, None)
    assert results == {"global_step": 2, "accuracy": 0.5}
    assert calls == ([1] if evaluated_again else [])


def test_the_predict_step_runs_the_model_in_inference_mode():
    # Every evaluation and prediction goes through it: with dropout, a pass in training mode
    # would score a different random model each time.
    import keras

    from albert.training import predict

    inputs = keras.Input((4,))
    dropped = keras.layers.Dropout(0.5, seed=1)(inputs)
    model = keras.Model(inputs, {"logits": keras.layers.Dense(2, name="dense")(dropped)})
    stub = types.SimpleNamespace(
        kept_features=("label_ids",), prediction_keys=("logits",), _inputs=lambda f: f["x"]
    )
    step = engine.FineTuningTask._predict_step(stub, model)
    x = tf.reshape(tf.range(12, dtype=tf.float32), [3, 4])
    features = {
        "x": x,
        "label_ids": tf.constant([0, 1, 0]),
        predict.EXAMPLE_INDEX: tf.constant([0, 1, 2]),
        predict.IS_REAL_EXAMPLE: tf.constant([1, 1, 0]),
    }
    outputs = step(features)
    np.testing.assert_allclose(outputs["logits"], model(x, training=False)["logits"], rtol=1e-6)
    kept = ["logits", "label_ids", predict.EXAMPLE_INDEX, predict.IS_REAL_EXAMPLE]
    assert sorted(outputs) == sorted(kept)
