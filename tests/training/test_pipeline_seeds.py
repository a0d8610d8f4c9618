"""Training data on several input pipelines (hosts / workers): each shuffles in its own order.

Hosts read interleaved shares of the same file (fine-tuning: records i, i + n, ... of the
feature cache; pretraining: the records of the files left over). With one shuffle seed for
all of them, host i's k-th record was always the file neighbour of host 0's k-th record, so
every global batch held runs of adjacent records (a question's doc spans, an article's
questions) instead of a random sample.
"""

import pytest
import tensorflow as tf

from albert.config import AlbertConfig
from albert.data.records import serialize_instance
from albert.tasks import FineTuningError, engine
from albert.tasks.pretraining import PretrainingTask

HOSTS, NUM_RECORDS = 2, 64


class _NumberedTask(engine.FineTuningTask):
    """Records 0..N-1 of one feature each (`input_ids` holds the record's number)."""

    def __init__(self, feature_dir, num_records=NUM_RECORDS):
        super().__init__(None, 16, 8, 8, 1)
        self.feature_dir = feature_dir
        self.num_records = num_records

    def load_features(self, role):
        features = {
            "input_ids": tf.reshape(tf.range(self.num_records), [-1, 1]),
            "is_real_example": tf.ones([self.num_records], tf.int32),
        }
        return tf.data.Dataset.from_tensor_slices(features), self.num_records, None

    def create_model(self):
        raise NotImplementedError

    def loss(self, outputs, features, normalizers):
        raise NotImplementedError

    def evaluate_predictions(self, predictions):
        raise NotImplementedError

    def write_predictions(self, predictions, output_dir):
        raise NotImplementedError


def _numbers(task, key, seed=1, steps=8):
    """Per host: the record numbers of its first `steps` training batches, in order."""
    numbers = []
    for host in range(HOSTS):
        context = tf.distribute.InputContext(HOSTS, host, HOSTS * 2)
        dataset = task.train_dataset(context, seed)
        numbers.append([int(n) for b in dataset.take(steps) for n in b[key].numpy()[:, 0]])
    return numbers


def _check_orders(numbers):
    first, second = numbers
    # Each host holds its own share (records h, h + 2, ...).
    assert {n % HOSTS for n in first} == {0} and {n % HOSTS for n in second} == {1}
    # ... but not in the same order: the positions in the shares differ.
    assert [n // HOSTS for n in first] != [n // HOSTS for n in second]


def test_fine_tuning_hosts_shuffle_their_shares_differently(tmp_path):
    task = _NumberedTask(str(tmp_path / "features"))
    numbers = _numbers(task, "input_ids")
    _check_orders(numbers)
    assert _numbers(task, "input_ids") == numbers  # still reproducible (exact resume)


def test_fine_tuning_refuses_a_training_set_smaller_than_the_hosts(tmp_path):
    # One example on two hosts: host 1's share (records 1, 3, ...) is empty, and its first
    # training step failed with TensorFlow's "End of sequence". Every host refuses, in one
    # sentence, so no worker waits in a step for the one that stopped.
    task = _NumberedTask(str(tmp_path / "features"), num_records=1)
    for host in range(HOSTS):
        context = tf.distribute.InputContext(HOSTS, host, HOSTS * 2)
        with pytest.raises(FineTuningError, match="holds 1 example.*fewer than the 2 input"):
            task.train_dataset(context, seed=1)
    # As many examples as hosts: each host trains on its one.
    task = _NumberedTask(str(tmp_path / "features_2"), num_records=HOSTS)
    assert _numbers(task, "input_ids", steps=1) == [[0] * 4, [1] * 4]  # per-replica batches


def test_pretraining_hosts_shuffle_a_shared_file_differently(tmp_path):
    # One file on two hosts: each reads every other record of it.
    path = str(tmp_path / "part-0")
    with tf.io.TFRecordWriter(path) as writer:
        for number in range(NUM_RECORDS):
            record = serialize_instance([2, 5, 3], [0, 0, 0], [1, 1, 1], [1], [number], 0, 7, 2)
            writer.write(record)
    config = AlbertConfig(vocab_size=NUM_RECORDS)  # the ids number the records
    task = PretrainingTask(config, path, 8, 8, 7, 2)
    numbers = _numbers(task, "masked_lm_ids")  # the first prediction's id numbers a record
    _check_orders(numbers)
    assert _numbers(task, "masked_lm_ids") == numbers
