"""The original's optimizers (LAMB, AdamW) and learning-rate schedule, as Keras 3 optimizers.

Both optimizers follow the original `optimization.py` exactly, which differs from
`keras.optimizers.Lamb` / `AdamW`:

    m <- beta_1 * m + (1 - beta_1) * g
    v <- beta_2 * v + (1 - beta_2) * g^2
    u  = m / (sqrt(v) + epsilon)               no bias correction
    u += weight_decay_rate * w                 unless the variable is excluded
    LAMB only: u *= ||w|| / ||u||              1 when either norm is 0, or when excluded
    w <- w - learning_rate * u

Variables whose path matches any of `exclude_from_weight_decay` (regular expressions, searched
as the original does; default LayerNorm, layer_norm, bias) get no decay and, for LAMB, no trust
ratio. Keras 3 paths look like `encoder/group_0_inner_group_0_attention/LayerNorm/gamma`.

The update is written with `keras.ops`, so it runs on any Keras backend.
"""

from __future__ import annotations

import contextlib
import contextvars
import re

import keras
from keras import ops

from albert.errors import AlbertError

EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
OPTIMIZERS = ("lamb", "adamw")


class OptimizerError(AlbertError):
    """An optimizer name or setting the training code cannot use."""


@keras.saving.register_keras_serializable(package="albert")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """The original schedule: linear warmup, then polynomial decay to 0 at `decay_steps`.

        decayed = initial * (1 - min(step, decay_steps) / decay_steps) ** power
        lr      = initial * (step - start_warmup_step) / warmup_steps
                  while step - start_warmup_step < warmup_steps, else decayed

    As in the original, the decay counts from step 0 (not from the end of warmup), and a step
    before `start_warmup_step` gives a negative warmup value: continue-training runs set
    `start_warmup_step` to the step they restart from.

    Args:
        initial_learning_rate: peak learning rate (`--learning_rate`).
        decay_steps: steps to decay over (`--num_train_steps`).
        warmup_steps: `--num_warmup_steps`; 0 disables warmup.
        start_warmup_step: `--start_warmup_step`.
        power: `--poly_power`.

    Example:
        >>> schedule = WarmupPolynomialDecay(1e-3, decay_steps=100, warmup_steps=10)
        >>> float(schedule(5))
        0.0005
    """

    def __init__(
        self, initial_learning_rate, decay_steps, warmup_steps=0, start_warmup_step=0, power=1.0
    ):
        if decay_steps <= 0:
            raise OptimizerError(f"`num_train_steps` must be positive. Received: {decay_steps}")
        if warmup_steps < 0:
            raise OptimizerError(f"`num_warmup_steps` must be >= 0. Received: {warmup_steps}")
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = int(decay_steps)
        self.warmup_steps = int(warmup_steps)
        self.start_warmup_step = int(start_warmup_step)
        self.power = float(power)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        progress = ops.minimum(step, float(self.decay_steps)) / float(self.decay_steps)
        decayed = self.initial_learning_rate * ops.power(1.0 - progress, self.power)
        if not self.warmup_steps:
            return decayed
        warmup_step = step - float(self.start_warmup_step)
        # init * (step / W) as the original's `init_lr * warmup_percent_done`: the product
        # taken in the other order differs in the last bit at a third of the warmup steps.
        warmup = self.initial_learning_rate * (warmup_step / float(self.warmup_steps))
        return ops.where(warmup_step < float(self.warmup_steps), warmup, decayed)

    def get_config(self):
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "warmup_steps": self.warmup_steps,
            "start_warmup_step": self.start_warmup_step,
            "power": self.power,
        }


def _matches_any(variable, patterns):
    # Keras variables have a `path`; a plain tf.Variable only a `name` (which the original's
    # regexes were written for).
    name = getattr(variable, "path", None) or variable.name
    return any(re.search(pattern, name) for pattern in patterns)


@keras.saving.register_keras_serializable(package="albert")
class AdamWeightDecay(keras.optimizers.Optimizer):
    """The original `AdamWeightDecayOptimizer`: Adam without bias correction, decoupled decay.

    Args:
        learning_rate: a float, a `LearningRateSchedule` or a callable returning the rate.
        weight_decay_rate: decay coefficient added to the update (0.01 in the original).
        beta_1, beta_2, epsilon: Adam's constants (0.9, 0.999, 1e-6 in the original).
        exclude_from_weight_decay: regular expressions; matching variable paths get no decay.
        aggregate_gradients: whether `apply` sums gradients across replicas under a
            `tf.distribute` strategy (Keras's behaviour). The training loop passes False and
            hands in gradients it has already summed, so that clipping sees the global norm.
        **kwargs: `name` and other `keras.optimizers.Optimizer` arguments.

    Example:
        >>> optimizer = AdamWeightDecay(learning_rate=1e-4)
        >>> optimizer.apply(grads, model.trainable_variables)
    """

    # Whether the trust ratio ||w|| / ||u|| scales the update (LAMB).
    layer_adaptation = False

    def __init__(
        self,
        learning_rate,
        weight_decay_rate=0.01,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        exclude_from_weight_decay=EXCLUDE_FROM_WEIGHT_DECAY,
        aggregate_gradients=True,
        name=None,
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
        self.aggregate_gradients = aggregate_gradients

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])
        # Decided once per variable from its path, so the update traces without string work.
        self._use_weight_decay = [
            bool(self.weight_decay_rate) and not _matches_any(v, self.exclude_from_weight_decay)
            for v in var_list
        ]
        self._use_layer_adaptation = [
            self.layer_adaptation and not _matches_any(v, self.exclude_from_weight_decay)
            for v in var_list
        ]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        gradient = ops.cast(_dense(gradient), dtype)
        m, v = self._m[index], self._v[index]
        next_m = self.beta_1 * m + (1.0 - self.beta_1) * gradient
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * ops.square(gradient)
        update = next_m / (ops.sqrt(next_v) + self.epsilon)
        if self._use_weight_decay[index]:
            update = update + self.weight_decay_rate * variable
        if self._use_layer_adaptation[index]:
            update = update * trust_ratio(variable, update)
        self.assign(m, next_m)
        self.assign(v, next_v)
        self.assign_sub(variable, ops.cast(learning_rate, dtype) * update)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # TensorFlow backend hook (keras/src/backend/tensorflow/optimizer.py): Keras sums the
        # gradients across replicas here, after its own clipping. Our loop sums and clips first.
        if self.aggregate_gradients:
            return super()._all_reduce_sum_gradients(grads_and_vars)
        return list(grads_and_vars)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "weight_decay_rate": self.weight_decay_rate,
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "exclude_from_weight_decay": list(self.exclude_from_weight_decay),
                "aggregate_gradients": self.aggregate_gradients,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="albert")
class Lamb(AdamWeightDecay):
    """The original `LAMBOptimizer`: `AdamWeightDecay`'s update times the trust ratio.

    Takes the same arguments as `AdamWeightDecay`; variables excluded from weight decay are
    also excluded from the trust ratio (the original's default for
    `exclude_from_layer_adaptation`).
    """

    layer_adaptation = True


def _dense(gradient):
    """`gradient` as a dense tensor. Under TensorFlow an embedding's gradient from
    `model.fit` is an IndexedSlices, which Python arithmetic does not take; the original's
    optimizers update m and v densely too (its tf.multiply densifies the slices)."""
    if type(gradient).__name__ != "IndexedSlices":
        return gradient
    import tensorflow as tf  # only TensorFlow makes IndexedSlices

    return tf.convert_to_tensor(gradient)


_STAGE = 16  # elements summed per stage: XLA:CPU keeps a minor-axis reduce this short plain
_staged_norms = contextvars.ContextVar("staged_norms", default=False)


@contextlib.contextmanager
def xla_norms(enabled=True):
    """Within: `squared_norm` sums in stages (`enabled`), for code that XLA compiles.

    XLA:CPU rewrites a reduction over a whole weight (3.8M elements for ALBERT's embeddings)
    into 32x32 windows that it runs about 3x slower than a reduce along a short minor axis,
    and writes the squares out first; TensorFlow's own kernels need no staging (a little
    slower with it). The trainer turns this on for the step it compiles."""
    token = _staged_norms.set(bool(enabled))
    try:
        yield
    finally:
        _staged_norms.reset(token)


def norms_staged():
    """Whether `xla_norms` is on here."""
    return _staged_norms.get()


def squared_norm(x):
    """sum(x^2) over every element, a float scalar; under `xla_norms`, as sums of `_STAGE`
    consecutive elements, then of those, and so on (zero-padded; the same float32 accuracy
    class: every partial sum adds at most `_STAGE` terms)."""
    if not _staged_norms.get():
        return ops.sum(ops.square(x))
    squares = ops.reshape(ops.square(untransposed(x)), (-1,))
    size = squares.shape[0]
    if size is None:
        return ops.sum(squares)
    while size > 1:
        padded = -(-size // _STAGE) * _STAGE
        if padded > size:
            squares = ops.pad(squares, [(0, padded - size)])
        squares = ops.sum(ops.reshape(squares, (-1, _STAGE)), axis=-1)
        size = padded // _STAGE
    return ops.reshape(squares, ())


def untransposed(x):
    """The tensor a TensorFlow graph's transpose `x` was made from, else `x`: the same elements,
    so the same sum of squares (summed in another order).

    The FFN output kernel's gradient is one (`shared_weights.TallKernel`); XLA:CPU fuses such a
    transpose into each reader, and a staged sum over the [4H, H] transposed view reads it
    strided, about 8x slower than over the [H, 4H] tensor itself (21 against 2.5 ms for
    ALBERT-base on a 2-core AVX2 Zen 2). Eager tensors, variables and JAX arrays pass as they
    are."""
    while True:
        try:
            op = x.op
        except AttributeError:  # eager tensors and JAX arrays have no producing op
            return x
        if getattr(op, "type", None) != "Transpose":
            return x
        x = op.inputs[0]


def global_norm(tensors):
    """sqrt(sum of `squared_norm` over `tensors`): `tf.linalg.global_norm`'s value."""
    return ops.sqrt(sum(squared_norm(ops.cast(t, "float32")) for t in tensors))


def trust_ratio(variable, update):
    """||w|| / ||u||, or 1 when either norm is zero (the original's LAMB rule)."""
    w_norm = ops.sqrt(squared_norm(variable))
    u_norm = ops.sqrt(squared_norm(update))
    safe = ops.logical_and(w_norm > 0.0, u_norm > 0.0)
    return ops.where(safe, w_norm / ops.where(safe, u_norm, 1.0), 1.0)


def create_optimizer(
    name,
    learning_rate,
    num_train_steps,
    num_warmup_steps=0,
    start_warmup_step=0,
    poly_power=1.0,
    global_step=None,
    aggregate_gradients=True,
):
    """The original's `create_optimizer` without the training op: optimizer + schedule.

    Args:
        name: "lamb" or "adamw" (`--optimizer`).
        learning_rate, num_train_steps, num_warmup_steps, start_warmup_step, poly_power: the
            schedule's flags.
        global_step: a variable holding the global step. When given, the learning rate
            follows it (as the original's `global_step`); otherwise the optimizer's own
            update count drives the schedule.
        aggregate_gradients: see `AdamWeightDecay`.

    Returns:
        (optimizer, schedule).

    Raises:
        OptimizerError: an unknown optimizer name or a bad schedule setting.
    """
    if name not in OPTIMIZERS:
        raise OptimizerError(
            f"`optimizer` must be one of {', '.join(OPTIMIZERS)}. Received: {name!r}"
        )
    schedule = WarmupPolynomialDecay(
        learning_rate,
        decay_steps=num_train_steps,
        warmup_steps=num_warmup_steps,
        start_warmup_step=start_warmup_step,
        power=poly_power,
    )
    rate = schedule if global_step is None else (lambda: schedule(global_step))
    optimizer_class = Lamb if name == "lamb" else AdamWeightDecay
    optimizer = optimizer_class(
        learning_rate=rate, aggregate_gradients=aggregate_gradients, name=name
    )
    return optimizer, schedule
