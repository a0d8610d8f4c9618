"""The distributed train and eval steps, run `num_steps` at a time on the device.

One host call runs a `tf.function` holding a `tf.range` loop around `strategy.run`, so the
Python host only wakes up every `--iterations_per_loop` steps. A training step:

    normalizers = all_reduce_sum(task.loss_normalizers(features))   # e.g. sum of MLM weights
    loss, grads = forward + backward
    grads       = all_reduce_sum(grads)        # the gradient of the global-batch loss
    grad_norm   = global_norm(grads)           # summary, and the clipping norm
    grads       = clip_by_global_norm(grads, clip_norm)
    optimizer.apply(grads); global_step += 1

Summing gradients in the step (not in the optimizer) is what makes clipping see the same
global norm as one device with the whole batch. With `accumulation_steps` k > 1, each replica's
batch is split into k micro-batches run one after the other, their gradients summed before the
all-reduce: the loss divides by the whole global batch's normalizers, so the sum is the
gradient of the same global-batch loss, with activations for a k-th of the batch at a time.
With `--jit_compile`, XLA compiles the forward and backward pass; under the default strategy
(one device, nothing to all-reduce) it compiles the whole step, update included, as one
program.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from albert.replica_scope import replica_scope
from albert.training import optimization
from albert.training.inputs import InputError

# Sums the loop adds to a task's own.
_LOOP_METRICS = ("examples", "loss", "gradient_norm", "applied_steps")

# Autograph rewrites Python loops and branches on tensors into graph ops, and converts every
# function a converted one calls: about 40 ms each, at every process start. The loops need it,
# and so does the path to a task's `loss_normalizers` and `compute_loss` (a custom task may
# branch on tensors); the bookkeeping below branches on Python values only and is traced as
# written (a Python `if` on a tensor there would raise at trace time, never go silently wrong).
_as_written = tf.autograph.experimental.do_not_convert


class MetricSums:
    """Float sums kept per replica and summed on read (`ON_READ`, `SUM` variables).

    Args:
        strategy: the strategy whose scope creates the variables.
        names: the sums to keep.
    """

    def __init__(self, strategy, names):
        self.strategy = strategy
        with strategy.scope():
            self.variables = {
                name: tf.Variable(
                    0.0,
                    trainable=False,
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.SUM,
                    name=f"metric_{name}",
                )
                for name in names
            }

    @_as_written
    def add(self, sums):
        """Adds a dict of local float scalars (in a replica context)."""
        for name, value in sums.items():
            self.variables[name].assign_add(tf.cast(value, tf.float32))

    @_as_written
    def reset(self):
        """Zeroes every replica's copy (call in a cross-replica context)."""

        def zero():
            for variable in self.variables.values():
                variable.assign(tf.zeros_like(variable))

        self.strategy.run(zero)

    def read(self):
        """Dict of float sums over every replica (eagerly, in a cross-replica context: every
        worker must call it, as the read all-reduces across workers)."""
        return {name: float(v.read_value()) for name, v in self.variables.items()}


class Trainer:
    """Builds the on-device loops for one task, model and optimizer.

    Args:
        strategy: the `tf.distribute.Strategy` (the model and optimizer live in its scope).
        task: a `TrainingTask`.
        model: the task's model.
        optimizer: a Keras optimizer that does not aggregate gradients itself
            (`aggregate_gradients=False`), possibly inside a `LossScaleOptimizer`.
        global_step: int64 variable, incremented once per step.
        clip_norm: global-norm clipping threshold (1.0 as the original); None disables it.
        jit_compile: compile the forward and backward pass with XLA.
        accumulation_steps: micro-batches per replica batch (`--gradient_accumulation_steps`);
            it must divide the replica batch.

    Example:
        >>> trainer = Trainer(strategy, task, model, optimizer, global_step)
        >>> sums = trainer.train(data, 100)  # 100 steps in one host call
    """

    def __init__(
        self,
        strategy,
        task,
        model,
        optimizer,
        global_step,
        clip_norm=1.0,
        jit_compile=False,
        accumulation_steps=1,
    ):
        self.strategy = strategy
        self.accumulation_steps = accumulation_steps
        self.task = task
        self.model = model
        self.optimizer = optimizer
        self.global_step = global_step
        self.clip_norm = clip_norm
        self.jit_compile = jit_compile
        self.loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        names = tuple(task.metric_names) + _LOOP_METRICS
        self.train_metrics = MetricSums(strategy, names)
        self.eval_metrics = MetricSums(strategy, tuple(task.metric_names) + ("examples", "loss"))
        self._forward_backward = tf.function(self._gradients, jit_compile=jit_compile)
        self._single_replica_step = tf.function(
            self._single_replica_step_fn, jit_compile=jit_compile
        )
        self._train_loop = tf.function(self._train_loop_fn)
        self._eval_loop = tf.function(self._eval_loop_fn)
        # Under any other strategy, even on one device, the optimizer's update merges the
        # replicas (`merge_call`), which cannot run inside the nested `tf.function`.
        with strategy.scope():
            self._whole_step_in_one_function = not tf.distribute.has_strategy()

    # --- Replica functions ---------------------------------------------------------------

    def _normalizers(self, features):
        context = tf.distribute.get_replica_context()
        local = self.task.loss_normalizers(features)
        return context.all_reduce(tf.distribute.ReduceOp.SUM, local)

    def _forward_backward_fn(self, features, normalizers, replica_id):
        # `replica_id` is a tensor argument, so one trace serves every replica; the model's
        # dropout folds it into its seeds and each replica draws its own masks
        # (albert.replica_scope).
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape, replica_scope(replica_id):
            loss, sums = self.task.compute_loss(self.model, features, normalizers, training=True)
            scaled_loss = self.optimizer.scale_loss(loss) if self.loss_scaled else loss
        grads = tape.gradient(scaled_loss, variables)
        # Embedding lookups give IndexedSlices; dense sums all-reduce and clip simply.
        grads = [tf.convert_to_tensor(g) for g in grads]
        return grads, loss, sums

    def _gradients(self, features, normalizers, replica_id):
        """`_forward_backward_fn` over the whole replica batch, or summed over its
        `accumulation_steps` micro-batches (each draws its own dropout masks: the seed state
        advances with every draw)."""
        k = self.accumulation_steps
        if k == 1:
            return self._forward_backward_fn(features, normalizers, replica_id)
        # [B, ...] -> [k, B / k, ...]: micro-batch i is rows i * B / k ... (i + 1) * B / k - 1.
        micro = tf.nest.map_structure(
            lambda t: tf.reshape(t, tf.concat([[k, -1], tf.shape(t)[1:]], 0)), features
        )

        def part(i):
            return tf.nest.map_structure(lambda t: t[i], micro)

        grads, loss, sums = self._forward_backward_fn(part(0), normalizers, replica_id)
        for i in tf.range(1, k):
            # One micro-batch at a time: TF's executor would otherwise overlap up to 10
            # iterations (their passes do not depend on each other), holding their activations
            # at once, which is what accumulating is meant to avoid (XLA runs them in order).
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            more_grads, more_loss, more_sums = self._forward_backward_fn(
                part(i), normalizers, replica_id
            )
            grads = [g + h for g, h in zip(grads, more_grads, strict=True)]
            loss += more_loss
            sums = {name: value + more_sums[name] for name, value in sums.items()}
        return grads, loss, sums

    @_as_written
    def _apply_gradients(self, grads):
        """Clips the summed gradients, updates the variables and counts the step.

        Returns:
            the global norm of `grads`, before clipping and without any loss scale.
        """
        # Staged sums where XLA compiles this (`xla_norms`), TensorFlow's own elsewhere.
        staged = optimization.norms_staged()
        grad_norm = optimization.global_norm(grads) if staged else tf.linalg.global_norm(grads)
        scale = tf.cast(self.optimizer.dynamic_scale, tf.float32) if self.loss_scaled else 1.0
        if self.clip_norm:
            # With loss scaling the gradients are `scale` times too big until the optimizer
            # divides them, so the threshold scales with them.
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm * scale, use_norm=grad_norm)
        self.optimizer.apply(grads, self.model.trainable_variables)
        self.global_step.assign_add(1)
        return grad_norm / scale

    def _single_replica_step_fn(self, features, normalizers, replica_id):
        grads, loss, sums = self._gradients(features, normalizers, replica_id)
        # The update compiles with the step under XLA here (not on the multi-replica path).
        with optimization.xla_norms(self.jit_compile):
            return loss, sums, self._apply_gradients(grads)

    def _train_step(self, features):
        context = tf.distribute.get_replica_context()
        normalizers = self._normalizers(features)
        replica_id = tf.cast(context.replica_id_in_sync_group, tf.int32)
        if self._whole_step_in_one_function:
            loss, sums, grad_norm = self._single_replica_step(features, normalizers, replica_id)
        else:
            grads, loss, sums = self._forward_backward(features, normalizers, replica_id)
            grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            grad_norm = self._apply_gradients(grads)
        num_replicas = tf.cast(context.num_replicas_in_sync, tf.float32)
        applied = tf.constant(True)
        if self.loss_scaled:
            # The loss scaler skips a step whose gradients are not finite (norm inf or NaN;
            # clipped by that norm, all NaN) and halves its scale: that norm says nothing
            # about training, and would make the host call's mean norm inf.
            applied = tf.math.is_finite(grad_norm)
            grad_norm = tf.where(applied, grad_norm, 0.0)
        sums = dict(sums)
        sums["examples"] = tf.cast(tf.shape(tf.nest.flatten(features)[0])[0], tf.float32)
        sums["loss"] = loss
        # Every replica holds the same global norm; the SUM read must count it once.
        sums["gradient_norm"] = grad_norm / num_replicas
        sums["applied_steps"] = tf.cast(applied, tf.float32) / num_replicas
        self.train_metrics.add(sums)

    def _eval_step(self, features, normalizers):
        loss, sums = self.task.compute_loss(self.model, features, normalizers, training=False)
        sums = dict(sums)
        sums["examples"] = tf.cast(tf.shape(tf.nest.flatten(features)[0])[0], tf.float32)
        sums["loss"] = loss
        self.eval_metrics.add(sums)

    # --- Host-call loops -----------------------------------------------------------------

    def _train_loop_fn(self, data, num_steps):
        self.train_metrics.reset()
        for _ in tf.range(num_steps):
            self.strategy.run(self._train_step, args=(data.get_next(),))

    def _eval_loop_fn(self, iterator, num_steps):
        self.eval_metrics.reset()
        steps = tf.constant(0, tf.int64)
        for _ in tf.range(num_steps):
            # Every pipeline yields `num_steps` full batches (`TrainingTask.eval_dataset`):
            # `get_next` hands them to the replicas with their static shapes, which TPUs
            # compile for (`get_next_as_optional` would wrap each in a `tf.cond` with an
            # empty stand-in, of unknown batch size).
            features = iterator.get_next()
            normalizers = self.strategy.run(self._normalizers, args=(features,))
            # Eval pipelines pad with weight-0 records once their data runs out, real records
            # first (`TrainingTask.eval_dataset`): a global batch without a real example means
            # every step left is padding. The count is all-reduced, so every host stops at
            # the same step, as the original's evaluation stops at the end of its data.
            if "examples" in normalizers:
                real = self.strategy.experimental_local_results(normalizers["examples"])[0]
                if real == 0:
                    break
            self.strategy.run(self._eval_step, args=(features, normalizers))
            steps += 1
        return steps

    def train(self, data, num_steps):
        """Runs `num_steps` training steps in one host call.

        Args:
            data: a `DistributedInput`.
            num_steps: int (passed as a tensor, so changing it does not retrace).

        Returns:
            Dict of float sums over the steps: the task's `metric_names`, `examples`, `loss`
            (sum of per-step global losses), `gradient_norm` (sum of per-step norms, before
            clipping, over the applied steps) and `applied_steps` (the steps the loss scaler
            did not skip; all of them without loss scaling).
        """
        self._train_loop(data, tf.constant(num_steps, tf.int64))
        return self.train_metrics.read()

    def evaluate(self, iterator, num_steps):
        """Runs up to `num_steps` eval steps over an iterator of at least as many batches
        (fewer from the first global batch of padding alone); returns float sums, with
        `steps` the number of batches run.

        Raises:
            InputError: the iterator ended sooner (an `eval_dataset` that is not padded).
        """
        try:
            steps = self._eval_loop(iterator, tf.constant(num_steps, tf.int64))
        except tf.errors.OutOfRangeError:
            raise InputError(
                f"The eval data of {type(self.task).__name__} ended before its {num_steps} "
                "steps (--max_eval_steps): its eval_dataset must yield that many batches for "
                "every replica, padded with records of weight 0 once its data runs out "
                "(TrainingTask.eval_dataset)."
            ) from None
        return {**self.eval_metrics.read(), "steps": float(steps)}
