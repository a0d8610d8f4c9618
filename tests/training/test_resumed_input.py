"""Where a resumed run's training input starts when no input position can be restored.

A TPU run (or a checkpoint whose input position is missing or unreadable) cannot continue
the interrupted pass; it must start a reshuffled one, not replay the batches the first steps
already trained on.
"""

import types

import tensorflow as tf

from albert.training import loop


class RangeTask:
    """Batches of 4 from a shuffled range: the order is the seed's."""

    def train_dataset(self, input_context, seed):
        return tf.data.Dataset.range(1000).shuffle(1000, seed=seed).batch(4)


class NoSavedPosition:
    input_iterator = None

    def restore_input(self, iterator, step):
        return False


def _first_batch(step, checkpointable):
    options = loop.RunOptions(
        output_dir="unused",
        num_train_steps=8,
        train_batch_size=4,
        seed=7,
        checkpoint_input=checkpointable,
    )
    state = types.SimpleNamespace(
        options=options,
        step=step,
        strategy=tf.distribute.get_strategy(),
        task=RangeTask(),
        checkpoints=NoSavedPosition(),
    )
    return loop._training_input(state).get_next().numpy().tolist()


def test_a_resume_without_a_saved_position_does_not_replay_the_first_batches():
    for checkpointable in (False, True):  # a TPU run; a position that cannot be restored
        first_run = _first_batch(step=0, checkpointable=checkpointable)
        assert _first_batch(step=0, checkpointable=checkpointable) == first_run
        assert _first_batch(step=2, checkpointable=checkpointable) != first_run
