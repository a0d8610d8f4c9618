"""The fine-tuning engine's weight rules: --init_checkpoint from an official TF1 checkpoint,
an HF directory, a pretraining output directory (its TF1-named model.ckpt-best or a training
checkpoint) or a fine-tuning run (head kept when it fits), with clear errors otherwise."""

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
