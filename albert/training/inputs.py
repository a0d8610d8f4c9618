"""Feeding a strategy's replicas from a `dataset_fn(input_context) -> tf.data.Dataset`.

`dataset_fn` builds one input pipeline (one per worker / host) and batches it with the
per-replica batch size, exactly the contract of `strategy.distribute_datasets_from_function`.
Two ways to run it:

- `checkpointable=True` (every strategy but TPU): each worker pulls batches for its local
  replicas from an ordinary tf.data iterator and hands one to each replica. That iterator can
  be saved in a checkpoint, so a resumed run sees exactly the data an uninterrupted run would.
- `checkpointable=False` (TPU, where the input must run on the TPU hosts):
  `strategy.distribute_datasets_from_function`, whose iterator TensorFlow cannot checkpoint;
  a resumed run starts a new pass over the data with another shuffle seed.
"""

from __future__ import annotations

import tensorflow as tf
from absl import logging

from albert.errors import AlbertError
from albert.training.strategy import worker_info


class InputError(AlbertError):
    """A batch size that cannot be split across the replicas, or eval data that ends
    before the steps it must feed (`albert.training.steps.Trainer.evaluate`)."""


def per_replica_batch_size(global_batch_size, num_replicas, flag="train_batch_size"):
    """The batch each replica gets; `global_batch_size` is what the flags mean.

    Raises:
        InputError: when the global batch does not divide evenly.
    """
    if global_batch_size <= 0 or global_batch_size % num_replicas:
        raise InputError(
            f"--{flag}={global_batch_size} must be a positive multiple of the number of "
            f"replicas ({num_replicas}); it is the global batch, split evenly across them."
        )
    return global_batch_size // num_replicas


def fit_batch_size(global_batch_size, num_replicas, flag, derive=False):
    """The global eval or predict batch for `num_replicas` replicas.

    A batch size the user gave must divide evenly (`per_replica_batch_size`). One left at
    its default (`derive`) is rounded up to the next multiple of the replicas instead, with a
    log line, so the defaults (eval 64 for pretraining, 8 for fine-tuning) run on a pod slice
    of 128 to 512 replicas.

    Args:
        global_batch_size: the flag's value.
        num_replicas: `strategy.num_replicas_in_sync`.
        flag: the flag's name, for the message.
        derive: the flag was left at its default: round up rather than refuse.

    Returns:
        The global batch to use (a positive multiple of `num_replicas`).

    Raises:
        InputError: a given batch that does not divide evenly, or one that is not positive.
    """
    if derive and global_batch_size > 0 and global_batch_size % num_replicas:
        fitted = -(-global_batch_size // num_replicas) * num_replicas
        logging.info(
            "--%s=%d (the default) does not divide by %d replicas: using %d, one example "
            "per replica or more.",
            flag,
            global_batch_size,
            num_replicas,
            fitted,
        )
        return fitted
    per_replica_batch_size(global_batch_size, num_replicas, flag)
    return global_batch_size


# Input pipeline i shuffles with seed + i * stride (a large prime keeps runs' seeds apart).
_PIPELINE_SEED_STRIDE = 1_000_003


def pipeline_seed(seed, input_context):
    """The training shuffle seed of one input pipeline (host / worker).

    Pipelines read interleaved shares of the same files (records i, i + n, ... of pipeline i
    of n); with one seed they would shuffle them in the same order, and every global batch
    would hold runs of neighbouring records. Pipeline 0 (the only one on one host) keeps
    `seed`; each other one gets its own, so the order stays reproducible for resume.

    Args:
        seed: the run's shuffle seed, or None (unseeded).
        input_context: the pipeline's `tf.distribute.InputContext`, or None.
    """
    if seed is None or input_context is None:
        return seed
    return seed + input_context.input_pipeline_id * _PIPELINE_SEED_STRIDE


class DistributedInput:
    """Batches for `strategy.run`, one per replica, from a per-pipeline `dataset_fn`.

    Args:
        strategy: the `tf.distribute.Strategy`.
        dataset_fn: `dataset_fn(input_context) -> tf.data.Dataset` of per-replica batches.
        checkpointable: feed from a plain (saveable) tf.data iterator; see the module doc.

    Attributes:
        iterator: the saveable tf.data iterator, or None when `checkpointable` is False.

    Example:
        >>> data = DistributedInput(strategy, dataset_fn)
        >>> @tf.function
        ... def step():
        ...     strategy.run(replica_fn, args=(data.get_next(),))
    """

    def __init__(self, strategy, dataset_fn, checkpointable=True):
        self.strategy = strategy
        worker_index, num_workers, _ = worker_info(strategy)
        self.num_local_replicas = strategy.num_replicas_in_sync // num_workers
        if checkpointable:
            context = tf.distribute.InputContext(
                num_input_pipelines=num_workers,
                input_pipeline_id=worker_index,
                num_replicas_in_sync=strategy.num_replicas_in_sync,
            )
            # [local replicas, per-replica batch, ...]: one slice per local replica.
            dataset = dataset_fn(context).batch(self.num_local_replicas, drop_remainder=True)
            dataset = dataset.prefetch(tf.data.AUTOTUNE)
            self.iterator = iter(dataset)
            self._distributed_iterator = None
        else:
            self.iterator = None
            self._distributed_iterator = iter(
                strategy.distribute_datasets_from_function(dataset_fn)
            )

    @tf.autograph.experimental.do_not_convert  # Python branches only
    def get_next(self):
        """The next per-replica batch as distributed values (call inside a `tf.function`)."""
        if self._distributed_iterator is not None:
            return next(self._distributed_iterator)
        stacked = next(self.iterator)
        num_local = self.num_local_replicas

        def replica_slice(value_context):
            # Replica ids are contiguous per worker, so the local index is id % local count.
            index = value_context.replica_id_in_sync_group % num_local
            return tf.nest.map_structure(lambda t: t[index], stacked)

        return self.strategy.experimental_distribute_values_from_function(replica_slice)
