"""The predict pass: a model over every example of a finite dataset, under any strategy.

Fine-tuning metrics that need every prediction (Spearman's rank correlation, SQuAD's EM/F1
after post-processing) and every prediction file come from here. The data must arrive in
fixed-shape batches (TPUs need them), so the caller pads the split to a whole number of
global batches, every input pipeline the same number of them, and numbers the examples
(`albert.data.features.pad_dataset` and `add_example_index` on one pipeline; the fine-tuning
engine's `inference_dataset` on several hosts):

    dataset_fn(context) -> per-replica batches holding `example_index` and `is_real_example`
    Predictor(strategy, step_fn).predict(dataset_fn, num_batches, steps_per_call)
                                                      -> numpy arrays, one row per example
    real_examples_in_order(outputs)                   -> padding dropped, file order restored

As training does, one host call runs up to `steps_per_call` batches in an in-graph loop and
returns their outputs stacked (on TPU each call is a round trip to the hosts); calls start at
one batch and grow while each runs within half a progress interval, so a long pass logs its
progress (`albert.progress`) every ~30 s instead of once per 1000 batches. Replicas (and
workers) each see a share of every global batch, so the rows come back grouped by replica;
`example_index` puts them back in order whatever the strategy.
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

from albert.errors import AlbertError
from albert.progress import Progress
from albert.training.strategy import worker_info

EXAMPLE_INDEX = "example_index"
IS_REAL_EXAMPLE = "is_real_example"


class PredictError(AlbertError):
    """Predictions that cannot be put back in order (a dataset without its index)."""


def add_example_index(dataset):
    """Adds `example_index` (int32, the element's position) to a dataset of feature dicts."""

    def add(index, features):
        return {**features, EXAMPLE_INDEX: tf.cast(index, tf.int32)}

    add = tf.autograph.experimental.do_not_convert(add)  # no branches: traced as written
    return dataset.enumerate().map(add, num_parallel_calls=tf.data.AUTOTUNE)


class Predictor:
    """Runs `step_fn` on every replica for each batch and gathers the outputs on the host.

    Args:
        strategy: the `tf.distribute.Strategy` the model was built under.
        step_fn: `step_fn(features) -> dict of tensors [b, ...]` for one replica's batch.
            It should pass through `example_index` and `is_real_example`.

    Example:
        >>> predictor = Predictor(strategy, lambda f: {"logits": model(f)["logits"],
        ...                                            "example_index": f["example_index"]})
        >>> outputs = predictor.predict(dataset_fn)  # {"logits": [N, C], "example_index": [N]}
    """

    def __init__(self, strategy, step_fn):
        self.strategy = strategy
        self.step_fn = step_fn
        self._outputs = None  # output name -> (dtype, rank), from a trace of one step
        self._loop = tf.function(self._loop_fn)

    def _step_fn(self, batch):
        outputs = self.strategy.run(self.step_fn, args=(batch,))
        # Concatenated in replica order (across workers too): [global batch, ...].
        return {name: self.strategy.gather(value, axis=0) for name, value in outputs.items()}

    def _loop_fn(self, iterator, num_steps, counted):
        """Up to `num_steps` batches (fewer when the data ends) in one host call.

        `counted` (a Python bool): the iterator holds at least `num_steps` more batches, so
        each is fetched with `get_next`, which hands the replicas their static shapes (TPUs
        compile for them); otherwise with `get_next_as_optional`, which finds the end but
        wraps each batch in a `tf.cond` with an empty stand-in, of unknown batch size.

        Returns:
            (batches run, dict of name -> [batches run, global batch, ...]).
        """
        arrays = {
            name: tf.TensorArray(dtype, size=0, dynamic_size=True)
            for name, (dtype, _) in self._outputs.items()
        }
        steps = tf.constant(0, tf.int32)
        for _ in tf.range(num_steps):
            if counted:
                batch = tf.experimental.Optional.from_value(iterator.get_next())
            else:
                batch = iterator.get_next_as_optional()
            if not batch.has_value():
                break
            outputs = self._step_fn(batch.get_value())
            arrays = {name: arrays[name].write(steps, outputs[name]) for name in arrays}
            steps += 1
        # An empty list of unknown element shape (a call past the data's end) cannot stack.
        stacked = {
            name: tf.cond(
                steps > 0,
                array.stack,
                lambda name=name: tf.zeros([0] * (self._outputs[name][1] + 1), arrays[name].dtype),
            )
            for name, array in arrays.items()
        }
        return steps, stacked

    def predict(self, dataset_fn, num_batches=None, steps_per_call=1, what="predict"):
        """The outputs of every batch of `dataset_fn`'s finite dataset.

        Args:
            dataset_fn: `dataset_fn(input_context) -> tf.data.Dataset` of per-replica batches
                of fixed shape (padded; see the module doc).
            num_batches: the global batches the dataset holds, when known: no host call
                then asks for a batch past the end. None: until the data ends.
            steps_per_call: the most batches per host call (`--iterations_per_loop`). The
                first call runs one batch (it also compiles the loop) and each next call up
                to twice the last, as long as it runs in half a progress interval at the
                last call's rate (not timed with several workers): 1000 batches of a large
                model in one call would run for minutes without a progress line.
            what: what the progress lines call the pass, e.g. "eval predictions".

        Returns:
            dict of name -> numpy array, batches concatenated on the first axis.

        Raises:
            PredictError: the dataset yields no batch, or fewer than `num_batches`.
        """
        iterator = iter(self.strategy.distribute_datasets_from_function(dataset_fn))
        if self._outputs is None:
            # The distributed element spec is a valid signature: one step traced, not run.
            step = tf.function(self._step_fn).get_concrete_function(iterator.element_spec)
            self._outputs = {
                name: (t.dtype, t.shape.rank) for name, t in step.structured_outputs.items()
            }
        chunks = []
        remaining = num_batches
        # SQuAD's 12k dev windows on a large model: minutes between the loop's lines.
        progress = Progress(f"{what}: ran", num_batches, "batches")
        call_size = 1
        # The workers of a MultiWorkerMirroredStrategy must make the same calls: the loop's
        # collectives pair up by loop iteration, and sizes timed on each worker could differ.
        # They double from one batch to `steps_per_call`, untimed.
        timed = worker_info(self.strategy)[1] == 1
        while remaining is None or remaining > 0:
            wanted = min(steps_per_call, call_size, remaining or call_size)
            start = time.perf_counter()
            counted = remaining is not None  # never more than the batches left
            try:
                steps, outputs = self._loop(iterator, tf.constant(wanted, tf.int32), counted)
            except tf.errors.OutOfRangeError:  # counted: `get_next` past the data's end
                raise PredictError(
                    f"The data to predict on ended before its {num_batches} batches: "
                    "dataset_fn must yield as many for every replica (does the task's count "
                    "of examples match its feature file?)."
                ) from None
            steps = int(steps)
            # The first call also traces and compiles the loop: no rate from it.
            seconds = None if not (chunks and timed) else time.perf_counter() - start
            call_size = next_call_size(wanted, seconds, progress.interval / 2)
            if steps:
                chunks.append({name: value.numpy() for name, value in outputs.items()})
                progress.update(steps)
            if remaining is not None:
                remaining -= steps
            if steps < wanted:
                break
        if not chunks:
            raise PredictError("The dataset to predict on holds no batch; is the split empty?")
        # [calls x steps, global batch, ...] -> [rows, ...]
        return {
            name: np.concatenate([chunk[name] for chunk in chunks]).reshape(
                (-1, *chunks[0][name].shape[2:])
            )
            for name in chunks[0]
        }


def next_call_size(batches, seconds, target_seconds):
    """Batches for the next host call after one of `batches` that took `seconds` (None: not
    timed): twice as many, but no more than run in `target_seconds` at that rate, and at
    least one."""
    if seconds is None:
        return 2 * batches
    fits = int(target_seconds * batches / max(seconds, 1e-9))
    return max(1, min(2 * batches, fits))


def real_examples_in_order(outputs):
    """Drops padding rows (`is_real_example` 0) and sorts the rest by `example_index`.

    Args:
        outputs: dict of numpy arrays [N, ...] holding `example_index` and `is_real_example`.

    Returns:
        dict of the same arrays, one row per real example, in dataset order.

    Raises:
        PredictError: an index is missing or repeated (the dataset was not numbered by
            `add_example_index` before padding and sharding).
    """
    if EXAMPLE_INDEX not in outputs or IS_REAL_EXAMPLE not in outputs:
        raise PredictError(f"Predictions need {EXAMPLE_INDEX!r} and {IS_REAL_EXAMPLE!r}.")
    keep = outputs[IS_REAL_EXAMPLE] > 0
    index = outputs[EXAMPLE_INDEX][keep]
    order = np.argsort(index, kind="stable")
    if not np.array_equal(index[order], np.arange(len(index))):
        raise PredictError(
            f"The {len(index)} predicted examples are not numbered 0..{len(index) - 1}; number "
            "the dataset with add_example_index before padding and sharding it."
        )
    return {name: values[keep][order] for name, values in outputs.items()}
