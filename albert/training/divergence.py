"""Stops a diverged run at the host call where its loss or gradient norm stops being finite.

The original trains under tf.estimator, whose `NanTensorHook(loss)` stops a run at a NaN
loss ("NaN loss during training."). Without it a run goes on with NaN weights, saves them
every --save_checkpoints_steps and prunes the good checkpoints by --keep_checkpoint_max.
The loop checks each host call's sums (all-reduced, so every worker of a multi-worker run
reads the same values and stops at the same step) after writing its progress line and
TensorBoard point, and before any checkpoint of its weights:

    without loss scaling   the loss, or the gradient norm, is not finite (NaN gradients make
                           NaN weights even while the call's mean loss is still finite)
    with loss scaling      no step of the call was applied and the loss is not finite (a
    (float16)              step with non-finite gradients is skipped by design, steps.py)

and, before each checkpoint, that the weights themselves are finite: an update that overflows
(finite gradients at an absurd learning rate) shows in no loss or norm until the next call,
and its weights would be saved as the checkpoint a rerun resumes from.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from albert.errors import TrainingDivergedError


def _steps(first, last):
    return f"step {last}" if first == last else f"steps {first}-{last}"


def what_diverged(sums, loss_scaled):
    """What of a host call's training is not finite, or None when it did not diverge.

    Args:
        sums: the call's sums (`Trainer.train`): `loss`, `gradient_norm`, `applied_steps`.
        loss_scaled: whether a `LossScaleOptimizer` skips the steps with non-finite gradients.

    Returns:
        ("loss" or "gradient norm", its value), or None.
    """
    loss = sums["loss"]
    if loss_scaled:
        if sums["applied_steps"] == 0 and not math.isfinite(loss):
            return "loss", loss
        return None
    if not math.isfinite(loss):
        return "loss", loss
    if not math.isfinite(sums["gradient_norm"]):
        return "gradient norm", sums["gradient_norm"]
    return None


def nonfinite_weight(variables):
    """The first of `variables` holding a NaN or infinite value, or None.

    Args:
        variables: the model's trainable variables (read where they live; one boolean each
            comes back to the host, so a pod's weights are not copied).

    Returns:
        ("weight <name>", a NaN or infinite value of it), or None.
    """
    for variable in variables:
        if not bool(tf.reduce_all(tf.math.is_finite(variable))):
            has_nan = bool(tf.reduce_any(tf.math.is_nan(variable)))
            name = getattr(variable, "path", None) or variable.name
            return f"weight {name}", math.nan if has_nan else np.inf
    return None


def diverged_error(found, first_step, last_step, checkpoint, schedule, advice=""):
    """The one-line error of a diverged host call.

    Args:
        found: what `what_diverged` or `nonfinite_weight` returned: (what, its value).
        first_step, last_step: the global steps the call trained (1-based, inclusive).
        checkpoint: the newest checkpoint in `output_dir` (the one a rerun resumes from), or
            None.
        schedule: the learning-rate schedule; its `initial_learning_rate` and `warmup_steps`,
            when it has them, are named in the message.
        advice: the task's own advice, appended to the message (`TrainingTask`).

    Returns:
        a `TrainingDivergedError`: what went non-finite in which steps, where a rerun
        resumes, and what to change.
    """
    what, value = found
    value = "NaN" if math.isnan(value) else "infinite"
    rate = getattr(schedule, "initial_learning_rate", None)
    warmup = getattr(schedule, "warmup_steps", None)
    rate = f" (now {rate:g})" if rate is not None else ""
    warmup = f" (now {warmup})" if warmup is not None else ""
    if checkpoint:
        resume = f"a rerun resumes from the last checkpoint saved, {checkpoint}"
    else:
        resume = "no checkpoint was saved, so a rerun starts over"
    return TrainingDivergedError(
        f"Training diverged: the {what} was {value} in {_steps(first_step, last_step)}, so "
        f"these weights were not saved; {resume}, and with the same flags it diverges again "
        f"(the same data and seed): lower --learning_rate{rate} or lengthen "
        f"--num_warmup_steps{warmup}{advice}."
    )
