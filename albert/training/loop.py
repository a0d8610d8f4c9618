"""The generic training engine: any `TrainingTask` under any strategy.

`run(task, strategy, options, optimizer_fn)` builds the model and optimizer in the strategy's
scope, resumes from `output_dir` (or initialises from `init_checkpoint`), trains in host calls
of `iterations_per_loop` steps, saves every `save_checkpoints_steps`, evaluates after each save
when asked (keeping the best checkpoint), and exports the final weights. The pretraining job
and the fine-tuning tasks share it. A host call whose loss or gradient norm is not finite
stops the run before its weights are saved (`albert.training.divergence`).

Order of a (re)started run: take the output directory's lock, build and restore (or
initialise), and only then write into `output_dir` (`albert_config.json`, summaries), so a
rerun that fails on a mismatched checkpoint leaves the directory as it was. A checkpoint
saved but not yet evaluated when the previous run died is evaluated before training goes on.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from albert.checkpoints import CheckpointError
from albert.checkpoints.training_format import BEST_PREFIX
from albert.metrics import write_eval_results
from albert.training import checkpointing, divergence
from albert.training import strategy as strategy_lib
from albert.training.inputs import (
    DistributedInput,
    InputError,
    fit_batch_size,
    per_replica_batch_size,
)
from albert.training.run_lock import output_dir_lock
from albert.training.steps import Trainer
from albert.training.summaries import ProgressLogger, ScalarWriter, eager_scalar


@dataclasses.dataclass
class RunOptions:
    """The run's shared flags (see `albert.training.flags`)."""

    output_dir: str
    num_train_steps: int
    train_batch_size: int
    eval_batch_size: int = 8
    do_train: bool = True
    do_eval: bool = False
    max_eval_steps: int = 100
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    iterations_per_loop: int = 1000
    init_checkpoint: str | None = None
    seed: int = 12345  # initial weights and data order
    clip_norm: float | None = 1.0
    jit_compile: bool = False
    # Micro-batches per replica batch (`--gradient_accumulation_steps`): the same global
    # batch and update, with activations for a k-th of it at a time.
    gradient_accumulation_steps: int = 1
    # Feed from a saveable iterator (exact resume); None: every strategy but TPU.
    checkpoint_input: bool | None = None
    # Batch-size flags left at their defaults: rounded up to a multiple of the replicas
    # instead of refused (`albert.training.inputs.fit_batch_size`).
    defaulted_batch_flags: tuple = ()


@dataclasses.dataclass
class _Run:
    """What one run holds: strategy, task, model, optimizer, step, checkpoints, writers."""

    strategy: object
    task: object
    options: RunOptions
    model: object
    optimizer: object
    schedule: object
    global_step: object
    trainer: Trainer
    checkpoints: checkpointing.TrainingCheckpoints
    chief: bool
    write_dir: str
    eval_writer: ScalarWriter

    @property
    def step(self):
        return int(self.global_step.numpy())


def run(task, strategy, options, optimizer_fn):
    """Trains and/or evaluates `task`; returns the last eval metrics (or {}).

    Args:
        task: a `TrainingTask`.
        strategy: a `tf.distribute.Strategy`.
        options: `RunOptions`.
        optimizer_fn: `optimizer_fn(global_step) -> (optimizer, schedule)`, an optimizer that
            leaves gradient aggregation to the loop (`aggregate_gradients=False`).
    """
    sizes = batch_sizes(options, strategy.num_replicas_in_sync)
    if "eval_batch_size" in sizes:
        task.eval_batch_size = sizes["eval_batch_size"]
        options = dataclasses.replace(options, eval_batch_size=sizes["eval_batch_size"])
    with output_dir_lock(options.output_dir, enabled=strategy_lib.is_chief(strategy)):
        return _run_locked(task, strategy, options, optimizer_fn)


def _refuse_earlier_records(output_dir):
    """A new run (no checkpoint to resume) refuses an output_dir that holds an earlier run's
    evaluation records: its checkpoints would be judged against them (one at or below the
    evaluated step taken as evaluated, a best kept only if it beat the old run's), so
    `model.ckpt-best` could stay the old run's weights and report and predict with them.

    Raises:
        CheckpointError: such records exist.
    """
    names = (checkpointing.BEST_INFO_FILE, checkpointing.EVALUATED_FILE)
    found = [name for name in names if tf.io.gfile.exists(os.path.join(output_dir, name))]
    if found:
        raise CheckpointError(
            f"--output_dir={output_dir} holds an earlier run's evaluation records "
            f"({', '.join(found)}) but no checkpoint to resume from; use a new --output_dir, "
            f"or remove them and {BEST_PREFIX}.* to start a new run there."
        )


def batch_sizes(options, num_replicas):
    """The global batches a run uses, checked against the replica count at start-up.

    Training needs `--train_batch_size` to split evenly across the replicas; evaluation
    `--eval_batch_size`, rounded up instead when it was left at its default
    (`options.defaulted_batch_flags`, see `inputs.fit_batch_size`). A batch the run does not
    use is not checked, so a pod slice of 512 replicas trains with the default eval batch.

    Args:
        options: `RunOptions`.
        num_replicas: `strategy.num_replicas_in_sync`.

    Returns:
        dict of flag name -> global batch, for `train_batch_size` (with `do_train`) and
        `eval_batch_size` (with `do_eval`).

    Raises:
        InputError: a batch the run uses that does not split evenly, in one sentence
            naming the flag.
    """
    sizes = {}
    if options.do_train:
        replica_batch = per_replica_batch_size(options.train_batch_size, num_replicas)
        micro_batches = options.gradient_accumulation_steps
        if micro_batches < 1 or replica_batch % micro_batches:
            raise InputError(
                f"--gradient_accumulation_steps={micro_batches} must be a positive divisor of "
                f"each replica's batch (--train_batch_size={options.train_batch_size} over "
                f"{num_replicas} replica(s): {replica_batch})."
            )
        sizes["train_batch_size"] = options.train_batch_size
    if options.do_eval:
        derive = "eval_batch_size" in options.defaulted_batch_flags
        sizes["eval_batch_size"] = fit_batch_size(
            options.eval_batch_size, num_replicas, "eval_batch_size", derive
        )
    return sizes


def _run_locked(task, strategy, options, optimizer_fn):
    state = _build(task, strategy, options, optimizer_fn)
    try:
        strategy_lib.check_shared_dir(state.strategy, options.output_dir)
        restored = state.checkpoints.restore_latest()
        strategy_lib.check_same_step(state.strategy, state.step, options.output_dir)
        if restored is None and options.do_train:
            _refuse_earlier_records(options.output_dir)
        if restored is None and options.init_checkpoint:
            logging.info("Initialising the model from %s.", options.init_checkpoint)
            task.load_initial_weights(state.model, options.init_checkpoint)
        # Validated: the first write into output_dir.
        state.checkpoints.remove_unfinished_writes()
        if state.chief:
            task.prepare_output_dir(options.output_dir)
        results = {}
        if options.do_train:
            results = _train(state)
        if options.do_eval and not options.do_train:
            latest = state.checkpoints.latest()
            if latest is None and not options.init_checkpoint:
                logging.warning(
                    "No checkpoint in %s and no --init_checkpoint: evaluating untrained weights.",
                    options.output_dir,
                )
            results = _evaluate(state, checkpoint_path=latest)
        return results
    finally:
        state.eval_writer.close()
        strategy_lib.remove_worker_dir(state.write_dir, options.output_dir)


def _build(task, strategy, options, optimizer_fn):
    worker_index, num_workers, chief = strategy_lib.worker_info(strategy)
    if chief:
        tf.io.gfile.makedirs(options.output_dir)
    write_dir = strategy_lib.writable_dir(options.output_dir, strategy)
    keras.utils.set_random_seed(options.seed)  # the same initial weights on every run
    with strategy.scope():
        model = task.create_model()
        global_step = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            name="global_step",
        )
        optimizer, schedule = optimizer_fn(global_step)
        if keras.mixed_precision.global_policy().name == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
    checkpoints = checkpointing.TrainingCheckpoints(
        options.output_dir,
        write_dir,
        model,
        optimizer,
        global_step,
        max_to_keep=options.keep_checkpoint_max,
        worker_index=worker_index,
        wait_for_workers=strategy_lib.worker_barrier(strategy),
        num_workers=num_workers,
    )
    micro_batches = options.gradient_accumulation_steps
    if options.do_train and micro_batches > 1:
        replica_batch = options.train_batch_size // strategy.num_replicas_in_sync
        logging.info(
            "Each replica's batch of %d runs as %d micro-batches of %d "
            "(--gradient_accumulation_steps), their gradients summed into one update.",
            replica_batch,
            micro_batches,
            replica_batch // micro_batches,
        )
    trainer = Trainer(
        strategy,
        task,
        model,
        optimizer,
        global_step,
        clip_norm=options.clip_norm,
        jit_compile=options.jit_compile,
        accumulation_steps=options.gradient_accumulation_steps,
    )
    eval_writer = ScalarWriter(
        os.path.join(options.output_dir, "eval"), enabled=chief and options.do_eval
    )
    return _Run(
        strategy,
        task,
        options,
        model,
        optimizer,
        schedule,
        global_step,
        trainer,
        checkpoints,
        chief,
        write_dir,
        eval_writer,
    )


def _training_input(state):
    """The training `DistributedInput`, positioned where the restored checkpoint left it."""
    options, step = state.options, state.step
    checkpointable = options.checkpoint_input
    if checkpointable is None:
        checkpointable = not isinstance(state.strategy, tf.distribute.TPUStrategy)

    def make(seed):
        dataset_fn = lambda context: state.task.train_dataset(context, seed)  # noqa: E731
        return DistributedInput(state.strategy, dataset_fn, checkpointable=checkpointable)

    # A resumed TPU run has no position to restore: its first pass is not built at all (on a
    # pod slice that would start every host's input pipeline, only to drop it).
    data = make(options.seed) if checkpointable or not step else None
    if step and not (data is not None and _restore_input(state, data.iterator, step)):
        # Nothing to restore the data position from: a new pass, reshuffled, rather than
        # replaying the examples the first steps already saw.
        logging.warning("No saved input position for step %d; reshuffling the data.", step)
        data = make(options.seed + step)
    state.checkpoints.input_iterator = data.iterator
    return data


def _restore_input(state, iterator, step):
    try:
        return state.checkpoints.restore_input(iterator, step)
    except (tf.errors.OpError, IndexError, ValueError, AssertionError) as e:
        logging.warning(
            "The saved input position of step %d cannot be read (%s).",
            step,
            checkpointing.first_line(e),
        )
        return False


def _evaluate_pending(state):
    """Evaluates the restored checkpoint when the previous run died before evaluating it."""
    if not (state.options.do_eval and state.step):
        return {}
    evaluated = state.checkpoints.evaluated_step()
    if evaluated is not None and evaluated >= state.step:
        return {}
    path = state.checkpoints.latest()
    logging.info("Evaluating %s, saved but not evaluated before the previous run ended.", path)
    return _evaluate_and_record(state, path)


def _evaluate_and_record(state, path):
    results = _evaluate(state, checkpoint_path=path)
    if state.chief:
        state.checkpoints.record_evaluated(state.step, path)
    return results


def _warn_negative_rates(schedule, step, total):
    """The original's warmup is negative before --start_warmup_step (meant for a run resumed
    past it); a run that trains there ascends the gradient, so say so."""
    start = getattr(schedule, "start_warmup_step", 0)
    if getattr(schedule, "warmup_steps", 0) and step < min(start, total):
        logging.warning(
            "Steps %d to %d run at negative learning rates: they come before "
            "--start_warmup_step=%d (as in the original, whose warmup counts from it).",
            step,
            min(start, total) - 1,
            start,
        )


def _train(state):
    options, task = state.options, state.task
    # A resumed run trains again the steps after its checkpoint's: TensorBoard drops the
    # points a killed run wrote there (`ScalarWriter`).
    writer = ScalarWriter(options.output_dir, enabled=state.chief, start_step=state.step + 1)
    total = options.num_train_steps
    shown = ("loss", *task.logged_metrics, "gradient_norm", "learning_rate")
    progress = ProgressLogger(total, shown)
    data = _training_input(state) if state.step < total else None
    _warn_negative_rates(state.schedule, state.step, total)
    save_every = options.save_checkpoints_steps if options.save_checkpoints_steps > 0 else total
    results = _evaluate_pending(state)
    first_call = True
    while state.step < total:
        step = state.step
        num_steps = min(options.iterations_per_loop, save_every - step % save_every, total - step)
        start = time.time()
        sums = state.trainer.train(data, num_steps)
        # The first call of a process also traces and compiles the step and fills the input
        # pipeline's buffers (seconds, against milliseconds a step): no rate from it.
        seconds = None if first_call else time.time() - start
        first_call = False
        metrics = _train_metrics(state, sums, num_steps, seconds)
        step = state.step
        progress.log(step, metrics)
        writer.write(metrics, step)
        first_step = step - num_steps + 1
        loss_scaled = state.trainer.loss_scaled
        _stop_if_diverged(state, divergence.what_diverged(sums, loss_scaled), first_step, writer)
        checkpointing.fault_point("train_step", step)
        if step % save_every == 0 or step == total:
            weights = divergence.nonfinite_weight(state.model.trainable_variables)
            _stop_if_diverged(state, weights, first_step, writer)
            path = state.checkpoints.save(step)
            checkpointing.fault_point("before_eval", step)
            if options.do_eval:
                results = _evaluate_and_record(state, path)
    writer.close()
    if state.chief:
        _export(state)
    if options.do_eval and not results:
        results = _evaluate_and_record(state, state.checkpoints.latest())
    return results


def _stop_if_diverged(state, found, first_step, writer):
    """Raises `TrainingDivergedError` for what `found` (`divergence.what_diverged` of the
    call's sums, or `divergence.nonfinite_weight` before a save) names, if anything, before
    those weights are saved; the call's TensorBoard point is written first, so the NaN shows
    there too."""
    if found is None:
        return
    writer.close()
    latest = state.checkpoints.latest()
    advice = state.task.divergence_advice
    raise divergence.diverged_error(found, first_step, state.step, latest, state.schedule, advice)


def _train_metrics(state, sums, num_steps, seconds):
    metrics = state.task.metric_results(sums)
    metrics["loss"] = sums["loss"] / num_steps
    # Over the steps applied: none when the loss scaler skipped every step of the call.
    if sums["applied_steps"]:
        metrics["gradient_norm"] = sums["gradient_norm"] / sums["applied_steps"]
    # The rate used by the last step of this call (the schedule reads the step before it),
    # from an array: a Python int, new every call, would grow TensorFlow's scalar cache.
    metrics["learning_rate"] = float(state.schedule(eager_scalar(state.step - 1, np.int64)))
    if seconds is not None:
        # The original's name (its Estimator's StepCounterHook), so its dashboards find it.
        metrics["global_step/sec"] = num_steps / seconds
        metrics["examples_per_second"] = sums["examples"] / seconds
        metrics["tokens_per_second"] = sums["examples"] * state.task.tokens_per_example / seconds
    return metrics


def _evaluate(state, checkpoint_path=None):
    """Evaluates the current weights; writes eval_results.txt and keeps the best checkpoint."""
    options, task = state.options, state.task
    # A task whose metrics need every prediction computes them itself (`TrainingTask.evaluate`).
    metrics = task.evaluate(state.model, state.strategy, options.iterations_per_loop)
    batches = "every example"
    if metrics is None:
        # Every input pipeline yields exactly max_eval_steps full batches (padded with
        # weight-0 examples when its data runs out), so every replica runs every step; the
        # steps stop early at the first global batch of padding alone (`Trainer.evaluate`).
        num_steps = options.max_eval_steps
        dataset = state.strategy.distribute_datasets_from_function(
            lambda context: task.eval_dataset(context, num_steps)
        )
        sums = state.trainer.evaluate(iter(dataset), num_steps)
        metrics = task.metric_results(sums)
        # A task whose padding leaves some steps without real examples gives its exact
        # loss itself; otherwise the mean of the steps' losses.
        metrics.setdefault("loss", sums["loss"] / sums["steps"])
        batches = f"{int(sums['steps'])} batches"
    step = state.step
    logging.info(
        "eval at step %d over %s: %s",
        step,
        batches,
        " | ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items())),
    )
    state.eval_writer.write(metrics, step)
    task.record_evaluation(step, checkpoint_path, metrics)
    if state.chief:
        entries = task.eval_results_entries({"global_step": step, **metrics})
        write_eval_results(options.output_dir, entries)
        _keep_best(state, metrics, checkpoint_path)
    return metrics


def _keep_best(state, metrics, checkpoint_path):
    keep_best(state.task, state.model, state.options.output_dir, metrics, checkpoint_path)


def keep_best(task, model, output_dir, metrics, checkpoint_path):
    """Makes `checkpoint_path` (its weights in `model`, scored `metrics`) `model.ckpt-best`
    when its `task.best_metric` beats the best recorded in `output_dir`. A NaN metric (a
    diverged run) never does, as in the original's `value > best`."""
    name = task.best_metric
    if not name or not checkpoint_path or name not in metrics:
        return
    best = checkpointing.best_value(output_dir)
    if math.isnan(metrics[name]) or (best is not None and metrics[name] <= best):
        return
    prefix = os.path.join(output_dir, BEST_PREFIX)
    task.save_best(model, checkpoint_path, prefix)
    step = checkpointing.checkpoint_step(checkpoint_path)
    checkpointing.record_best(output_dir, step, name, metrics[name], checkpoint_path)
    logging.info("New best %s %.4f at step %d, kept as %s.", name, metrics[name], step, prefix)


def _export(state):
    """Writes the final weights (for `python -m albert.convert_checkpoint`)."""
    path = state.task.export(state.model, state.options.output_dir)
    # Named by step: a fine-tuning run then evaluates and predicts with model.ckpt-best,
    # often another step, which its own "Final weights:" line names.
    logging.info("Weights of the last step (%d) written to %s.", state.step, path)
