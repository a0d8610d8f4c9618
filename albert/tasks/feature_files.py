"""Feature files every input host reads: the fine-tuning engine's way to feed a pod.

Every dataset is built inside `dataset_fn`, on the input host that calls it, from a TFRecord
file of `albert.data.features` every host can read: the task's feature cache, or, for features
a task holds in memory, a copy written under `output_dir/features/` (on GCS for a pod).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

import tensorflow as tf
from absl import logging

from albert.data import features as feature_lib
from albert.progress import Progress

# Elements read per host call when writing features held in memory.
READ_BATCH_SIZE = 1024


@dataclasses.dataclass(frozen=True)
class FeatureFile:
    """A role's features as a TFRecord file of `albert.data.features` that every input
    host reads inside `dataset_fn`.

    Attributes:
        path: the records file (its JSON schema beside it).
        num_examples: the records it holds.
        element_spec: the task's feature dicts (the records hold them flattened; RACE's
            [C, T] inputs are read back into that shape).
    """

    path: str
    num_examples: int
    element_spec: dict


def write_features_file(dataset, directory, role):
    """Writes a finite dataset of feature dicts held in memory as a feature file (the cache
    format of `albert.data.features`) every input host can read; returns its path.

    The name holds a hash of the features (`<role>-<hash>.tfrecord`): a rerun, or another
    worker, with the same features finds the file and does not write it again.
    """
    digest = hashlib.sha256()
    features = []
    count = int(dataset.cardinality())
    progress = Progress(f"{role} features: read", count if count >= 0 else None, "examples")
    # Batches, not single elements: TensorFlow's per-element iteration on the host costs
    # about 0.25 ms each, minutes for MNLI's 393k examples. Rows hash as the elements did.
    for batch in dataset.batch(READ_BATCH_SIZE).as_numpy_iterator():
        names = sorted(batch)
        # What the hash holds before each element's values: the same for every row.
        headers = {name: f"{name}:{batch[name].dtype}:{batch[name].shape[1:]}" for name in names}
        for row in range(len(batch[names[0]])):
            feature = {}
            for name in names:
                value = batch[name][row]
                digest.update(headers[name].encode())
                digest.update(value.tobytes())
                feature[name] = value.reshape(-1).tolist() if value.ndim else value.item()
            features.append(feature)
        progress.update(len(batch[names[0]]))
    path = os.path.join(directory, f"{role}-{digest.hexdigest()[:12]}.tfrecord")
    complete = tf.io.gfile.exists(path) and tf.io.gfile.exists(feature_lib.schema_path(path))
    if not (complete and feature_lib.cache_damage(path) is None):
        feature_lib.write_feature_records(path, features)
        logging.info("%s features written to %s for the input hosts.", role, path)
    return path
