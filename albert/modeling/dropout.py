"""Dropout whose masks differ per replica and whose random state lives in a variable.

Every `Dropout` here owns a `ReplicaSeedGenerator`: a `keras.random.SeedGenerator` whose
state (a `[2]` variable: the seed and a counter that each draw advances) is part of the
model's `variables` (not its `weights`), so a training checkpoint can hold it and a resumed
run draws exactly the masks an uninterrupted one would.

Under data parallelism the state is one mirrored value, identical on every replica, so
without more every replica would drop the same units. The training step runs the model
inside `albert.replica_scope.replica_scope(replica_id)`; each draw then folds the replica
id into the seed it hands to the random op (the stored state is untouched, so it stays
identical across replicas and checkpointable). Outside that block (one device, `model.fit`,
inference) the seed is the state itself.

Only `keras.ops` / `keras.random`, so the model stays backend-agnostic.
"""

import keras
from keras import ops

from albert.replica_scope import current_replica_id

# Replica r adds r * stride to the first seed word: a large prime keeps the replicas' Philox
# keys apart from each other and from the other layers' (random, < 1e9) seeds.
_REPLICA_STRIDE = 1_000_003


@keras.saving.register_keras_serializable(package="albert")
class ReplicaSeedGenerator(keras.random.SeedGenerator):
    """A `SeedGenerator` whose drawn seeds depend on the replica (see `albert.replica_scope`)."""

    def next(self, ordered=True):
        seed = super().next(ordered)  # [2]: the state before this draw
        replica_id = current_replica_id()
        if replica_id is None:
            return seed
        offset = ops.cast(replica_id, seed.dtype) * _REPLICA_STRIDE
        return seed + ops.stack([offset, ops.zeros_like(offset)])


@keras.saving.register_keras_serializable(package="albert")
class Dropout(keras.layers.Layer):
    """`keras.layers.Dropout` drawing from a `ReplicaSeedGenerator`.

    Args:
        rate: fraction of the units to drop, in [0, 1).
        seed: initial seed (None: drawn from Python's `random`, which
            `keras.utils.set_random_seed` seeds).

    Call arguments:
        inputs: float tensor of any shape.
        training: whether to drop.

    Example:
        >>> layer = Dropout(0.1)
        >>> with replica_scope(1):  # albert.replica_scope
        ...     y = layer(x, training=True)
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= rate < 1:
            raise ValueError(f"Dropout rate must be in [0, 1). Received: rate={rate}")
        self.rate = rate
        self.seed = seed
        self.supports_masking = True
        # No generator (and no state to checkpoint) when nothing is dropped.
        self.seed_generator = ReplicaSeedGenerator(seed) if rate > 0 else None
        self.built = True

    def call(self, inputs, training=False):
        if training and self.rate > 0:
            return keras.random.dropout(inputs, self.rate, seed=self.seed_generator)
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
