"""The loop's eval steps (`Trainer.evaluate`): each evaluation sums its own batches only, in
inference mode, and reports the mean of its steps' losses when the task gives none."""

import numpy as np
import pytest
import tensorflow as tf
from toy_tasks import EVAL_ROWS, EvalRowsTask

from albert.training import loop
from albert.training.optimization import create_optimizer


def _eval_scalars(directory):
    """{tag: {step: value}} of the run's eval/ event files."""
    values = {}
    for path in sorted(tf.io.gfile.glob(f"{directory}/eval/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                scalar = float(tf.make_ndarray(value.tensor))
                values.setdefault(value.tag, {})[event.step] = scalar
    return values


def _optimizer_fn(global_step):  # learning rate 0: every evaluation sees the same weights
    return create_optimizer("adamw", 0.0, 2, global_step=global_step)


def test_each_evaluation_sums_its_own_batches_in_inference_mode(tmp_path):
    options = loop.RunOptions(
        output_dir=str(tmp_path),
        num_train_steps=2,
        train_batch_size=1,
        eval_batch_size=1,
        do_eval=True,
        max_eval_steps=5,  # 3 real batches, then padding: the steps stop at the first
        save_checkpoints_steps=1,
        iterations_per_loop=1,
        clip_norm=None,
    )

    metrics = loop.run(EvalRowsTask(), tf.distribute.get_strategy(), options, _optimizer_fn)
    # Without dropout, the predictions are 3, 7 and 11: their mean is 7.
    expected_loss = np.mean([sum(row) for row in EVAL_ROWS])
    assert metrics["real"] == 3.0
    assert metrics["loss"] == pytest.approx(expected_loss)
    scalars = _eval_scalars(tmp_path)
    # The second evaluation counts its own 3 examples, not the first one's too.
    assert scalars["real"] == {1: 3.0, 2: 3.0}
    assert scalars["loss"] == pytest.approx({1: expected_loss, 2: expected_loss})


class _OwnLossTask(EvalRowsTask):
    """Gives its eval loss itself (as a task whose padding leaves steps without examples)."""

    def metric_results(self, sums):
        return {"real": sums["real"], "loss": 10 * sums["real"]}


def test_a_task_that_gives_its_loss_keeps_it(tmp_path):
    options = loop.RunOptions(
        output_dir=str(tmp_path),
        num_train_steps=1,
        train_batch_size=1,
        do_train=False,
        do_eval=True,
        max_eval_steps=5,
        eval_batch_size=1,
    )
    metrics = loop.run(_OwnLossTask(), tf.distribute.get_strategy(), options, _optimizer_fn)
    assert metrics["loss"] == 30.0
