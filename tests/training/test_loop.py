"""`albert.training.loop.run` on a toy task: what a run evaluates, and what a resumed run
keeps (its weights, its evaluation records)."""

import math

import tensorflow as tf
from toy_tasks import EvalRowsTask, LinearInputTask

from albert.training import checkpointing, loop
from albert.training.optimization import create_optimizer


def _run(task, output_dir, num_train_steps, **changes):
    values = dict(
        output_dir=str(output_dir),
        num_train_steps=num_train_steps,
        train_batch_size=1,
        eval_batch_size=1,
        do_eval=True,
        max_eval_steps=5,
        save_checkpoints_steps=1,
        iterations_per_loop=1,
        clip_norm=None,
    )
    options = loop.RunOptions(**{**values, **changes})

    def optimizer_fn(global_step):
        return create_optimizer("adamw", 0.0, num_train_steps, global_step=global_step)

    return loop.run(task, tf.distribute.get_strategy(), options, optimizer_fn)


def test_each_saved_checkpoint_is_evaluated_once(tmp_path):
    task = EvalRowsTask()
    _run(task, tmp_path, 2)
    assert task.evaluated == [1, 2]


def test_a_resumed_run_keeps_its_weights_and_its_evaluation_records(tmp_path):
    first = EvalRowsTask()
    _run(first, tmp_path, 2, init_checkpoint="pretrained/model.ckpt")
    assert first.initialised_from == ["pretrained/model.ckpt"]
    # Resumed from step 2 (evaluated): its records are its own, not an earlier run's; the
    # weights are the checkpoint's, not --init_checkpoint's again.
    resumed = EvalRowsTask()
    _run(resumed, tmp_path, 3, init_checkpoint="pretrained/model.ckpt")
    assert resumed.initialised_from == []
    assert resumed.evaluated == [3]


def test_checkpoints_at_every_multiple_of_the_cadence_and_at_the_end(tmp_path):
    # Host calls of 2 steps end at the saves (3, 6) and at the last step (7), never past it.
    task = LinearInputTask([[1.0, 1.0]])
    _run(
        task,
        tmp_path,
        7,
        do_eval=False,
        save_checkpoints_steps=3,
        iterations_per_loop=2,
        keep_checkpoint_max=0,
    )
    saved = checkpointing.saved_checkpoints(str(tmp_path))
    assert [checkpointing.checkpoint_step(path) for path in saved] == [3, 6, 7]


class _PairsTask(LinearInputTask):
    """Batches of 2 rows; the loss is the batch's mean of x @ w."""

    def train_dataset(self, input_context, seed):
        return tf.data.Dataset.from_tensor_slices(self.inputs).repeat().batch(2)

    def compute_loss(self, model, features, normalizers, training):
        return tf.reduce_sum(model(features, training=training)) / normalizers["examples"], {}


def test_the_training_loss_is_the_mean_of_the_steps_losses(tmp_path):
    # w = [1, 1] (learning rate 0): each step's loss is (2 + 6) / 2 = 4; one host call of 2.
    task = _PairsTask([[1.0, 1.0], [3.0, 3.0]])
    _run(
        task,
        tmp_path,
        2,
        do_eval=False,
        train_batch_size=2,
        iterations_per_loop=2,
        save_checkpoints_steps=2,
    )
    (path,) = tf.io.gfile.glob(f"{tmp_path}/events.out.tfevents.*")
    losses = {
        event.step: float(tf.make_ndarray(value.tensor))
        for event in tf.compat.v1.train.summary_iterator(path)
        for value in event.summary.value
        if value.tag == "loss"
    }
    assert losses == {2: 4.0}


class _BestTask:
    best_metric = "accuracy"

    def __init__(self):
        self.saved = []

    def save_best(self, model, checkpoint_path, best_prefix):
        self.saved.append(checkpointing.checkpoint_step(checkpoint_path))


def test_the_best_checkpoint_is_the_first_with_the_highest_finite_metric(tmp_path):
    task, directory = _BestTask(), str(tmp_path)
    for step, accuracy in ((1, math.nan), (2, 0.5), (3, 0.5), (4, math.nan), (5, 0.75)):
        loop.keep_best(task, None, directory, {"accuracy": accuracy}, f"{directory}/ckpt-{step}")
    # Weights never saved (evaluated from --init_checkpoint) are no checkpoint to keep.
    loop.keep_best(task, None, directory, {"accuracy": 0.9}, None)
    assert task.saved == [2, 5]
    assert checkpointing.best_value(directory) == 0.75
