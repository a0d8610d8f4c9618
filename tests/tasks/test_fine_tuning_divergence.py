"""A fine-tuning run (run_classifier's flags) whose loss goes NaN stops at that host call,
keeps the checkpoints before it, and says what to change, the original README's advice for
the v2 models included."""

import pytest
import synthetic_glue as synthetic
import tensorflow as tf

from albert.errors import TrainingDivergedError
from albert.tasks import classification

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
