"""A fine-tuning run (run_classifier's flags) whose loss goes NaN stops at that host call,
keeps the checkpoints before it, and says what to change, the original README's advice for
the v2 models included; an evaluation whose predictions are all one class warns."""

import types

import numpy as np
import pytest
import synthetic_glue as synthetic
import tensorflow as tf

from albert.errors import TrainingDivergedError
from albert.tasks import classification, engine
from albert.tasks.race import RaceTask

NAN = float("nan")


@pytest.mark.slow  # fine-tunes the tiny classifier (~5 s)
def test_a_classifier_whose_loss_goes_nan_stops_before_saving(tmp_path, monkeypatch):
    steps = tf.Variable(0, trainable=False)
    compute_loss = classification.GlueTask.compute_loss

    def poisoned(self, model, features, normalizers, training):
        # NaN from the 4th training step on.
        loss, sums = compute_loss(self, model, features, normalizers, training)
        if training:
            steps.assign_add(1)
            loss += tf.where(steps >= 4, NAN, 0.0)
        return loss, sums

    monkeypatch.setattr(classification.GlueTask, "compute_loss", poisoned)
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=24, num_dev=9, num_test=5)
    config = synthetic.write_config(tmp_path / "config.json")
    output_dir = tmp_path / "out"
    flags = synthetic.tiny_run_flags(data_dir, output_dir, config, "sst-2")
    with pytest.raises(TrainingDivergedError) as error:
        synthetic.run_classifier(
            *flags,
            "--train_step=9",
            "--save_checkpoints_steps=3",
            "--iterations_per_loop=3",
            "--do_train",
            "--do_eval",
        )
    message = str(error.value)
    assert message.startswith("Training diverged: the loss was NaN in steps 4-6, ")
    assert f"last checkpoint saved, {output_dir / 'model.ckpt-3'}," in message
    assert "lower --learning_rate (now 0.001) or lengthen --num_warmup_steps (now 10)" in message
    assert message.endswith(
        "; for large or xlarge v2 models, the original README's --learning_rate=1e-5 with "
        "--albert_dropout_prob=0."
    )
    assert sorted(p.name for p in output_dir.glob("model.ckpt-*.index")) == [
        "model.ckpt-3.index",
        "model.ckpt-best.index",
    ]


STUCK = "the model is stuck at chance"


@pytest.mark.parametrize(
    "predicted, labels, warned",
    [
        (["b", "b", "b"], ["a", "b", "a"], True),
        (["a", "b", "b"], ["a", "b", "a"], False),  # two classes predicted
        (["a", "a", "a"], ["a", "a", "a"], False),  # one class to predict
    ],
)
def test_one_predicted_class_warns(predicted, labels, warned, absl_caplog):
    engine.warn_if_one_class((np.asarray(predicted), np.asarray(labels)))
    assert (STUCK in absl_caplog.text) is warned
    if warned:
        assert (
            "Every one of the 3 evaluated predictions is class b, although the labels hold "
            "2 classes"
        ) in absl_caplog.text
        assert "--learning_rate=1e-5 with --albert_dropout_prob=0" in absl_caplog.text


def test_race_classes_are_the_answer_letters():
    task = RaceTask.__new__(RaceTask)
    examples = [types.SimpleNamespace(label=label) for label in (0, 3, 1)]
    task.race_features = lambda role: types.SimpleNamespace(examples=examples)
    logits = np.asarray([[0.0, 1.0, 0.0, 0.0]] * 3)  # [N, 4]
    predicted, labels = task.predicted_classes({"logits": logits})
    assert predicted.tolist() == ["B", "B", "B"] and labels.tolist() == ["A", "D", "B"]


@pytest.mark.slow  # fine-tunes and evaluates the tiny classifier (~5 s)
def test_a_classifier_stuck_on_one_class_warns_at_evaluation(tmp_path, monkeypatch, absl_caplog):
    create_model = classification.GlueTask.create_model

    def stuck_on_class_1(self):
        # The head's bias favours class 1 by far more than a few steps of 1e-3 move it.
        model = create_model(self)
        (bias,) = [w for w in model.classifier.weights if "bias" in w.path]
        bias.assign([0.0, 100.0])
        return model

    monkeypatch.setattr(classification.GlueTask, "create_model", stuck_on_class_1)
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=24, num_dev=9, num_test=5)
    config = synthetic.write_config(tmp_path / "config.json")
    flags = synthetic.tiny_run_flags(data_dir, tmp_path / "out", config, "sst-2")
    synthetic.run_classifier(*flags, "--train_step=3", "--do_train", "--do_eval")
    assert (
        "Every one of the 9 evaluated predictions is class 1, although the labels hold 2 "
        "classes: if later evaluations say so too, the model is stuck at chance;"
    ) in absl_caplog.text
