"""albert.tasks.feature_files: features held in memory, written once for the input hosts."""

import hashlib

import numpy as np
import tensorflow as tf

from albert import progress
from albert.data import features as feature_lib
from albert.tasks import feature_files

NUM_EXAMPLES, T = 2500, 7


def _dataset():
    rng = np.random.default_rng(0)
    columns = {
        "input_ids": rng.integers(0, 99, (NUM_EXAMPLES, T)).astype(np.int32),
        "label_ids": rng.normal(size=NUM_EXAMPLES).astype(np.float32),
        "is_real_example": np.ones(NUM_EXAMPLES, np.int32),
    }
    return tf.data.Dataset.from_tensor_slices(columns), columns


def _element_digest(dataset):
    """The name's hash as it has always been computed: element by element."""
    digest = hashlib.sha256()
    for element in dataset.as_numpy_iterator():
        for name in sorted(element):
            value = np.asarray(element[name])
            digest.update(f"{name}:{value.dtype}:{value.shape}".encode())
            digest.update(value.tobytes())
    return digest.hexdigest()[:12]


def test_features_are_read_in_batches_named_and_written_as_before(tmp_path, monkeypatch):
    dataset, columns = _dataset()
    expected_name = f"train-{_element_digest(dataset)}.tfrecord"
    # Each element fetched alone costs a host call (~0.25 ms): minutes for MNLI's 393k.
    fetches = []
    iterate = tf.data.Dataset.as_numpy_iterator

    def counting_iterator(self):
        for element in iterate(self):
            fetches.append(1)
            yield element

    monkeypatch.setattr(tf.data.Dataset, "as_numpy_iterator", counting_iterator)
    path = feature_files.write_features_file(dataset, str(tmp_path), "train")
    assert len(fetches) == -(-NUM_EXAMPLES // feature_files.READ_BATCH_SIZE)
    monkeypatch.setattr(tf.data.Dataset, "as_numpy_iterator", iterate)
    assert path == str(tmp_path / expected_name)  # a rerun finds an earlier run's file
    written, count = feature_lib.read_feature_records(path)
    assert count == NUM_EXAMPLES
    rows = list(written.batch(NUM_EXAMPLES).as_numpy_iterator())[0]
    for name, values in columns.items():
        np.testing.assert_array_equal(rows[name], values)


def test_reading_logs_its_progress(tmp_path, monkeypatch, absl_caplog):
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)
    feature_files.write_features_file(_dataset()[0], str(tmp_path), "eval")
    assert f"eval features: read {NUM_EXAMPLES}/{NUM_EXAMPLES} examples (100%)" in (
        absl_caplog.text
    )


def test_a_damaged_file_of_the_same_features_is_written_again(tmp_path):
    dataset, columns = _dataset()
    path = feature_files.write_features_file(dataset, str(tmp_path), "train")
    with open(path, "r+b") as f:  # a copy cut short
        f.truncate(f.seek(0, 2) // 2)
    assert feature_lib.cache_damage(path) is not None
    assert feature_files.write_features_file(dataset, str(tmp_path), "train") == path
    assert feature_lib.cache_damage(path) is None
    _, count = feature_lib.read_feature_records(path)
    assert count == NUM_EXAMPLES
