"""`DistributedInput` and `pipeline_seed` on one worker of several, without a cluster: a
stand-in strategy plays worker 1 of 2 with 4 replicas in sync (2 on this worker)."""

import numpy as np
import tensorflow as tf

from albert.training import inputs


class _ValueContext:
    def __init__(self, replica_id):
        self.replica_id_in_sync_group = replica_id


class _SecondWorkerStrategy:
    """Worker 1 of 2 with 4 replicas in sync: its local replicas are 2 and 3."""

    num_replicas_in_sync = 4
    local_replica_ids = (2, 3)

    def experimental_distribute_values_from_function(self, value_fn):
        return [value_fn(_ValueContext(i)) for i in self.local_replica_ids]


def test_each_worker_reads_its_own_pipeline_and_feeds_its_local_replicas(monkeypatch):
    monkeypatch.setattr(inputs, "worker_info", lambda strategy: (1, 2, False))
    contexts = []

    def dataset_fn(context):
        contexts.append(context)
        # Per-replica batches of 3 rows: batch b holds the rows 3b, 3b + 1, 3b + 2.
        return tf.data.Dataset.range(12).batch(3)

    data = inputs.DistributedInput(_SecondWorkerStrategy(), dataset_fn)
    (context,) = contexts
    assert context.input_pipeline_id == 1
    assert context.num_input_pipelines == 2
    assert context.num_replicas_in_sync == 4
    assert data.num_local_replicas == 2
    # The worker's first two per-replica batches, one to each of its replicas (2, then 3).
    per_replica = data.get_next()
    assert [np.asarray(batch).tolist() for batch in per_replica] == [[0, 1, 2], [3, 4, 5]]


class _InputContext:
    def __init__(self, pipeline):
        self.input_pipeline_id = pipeline


def test_pipeline_seeds_keep_an_unseeded_run_unseeded():
    assert inputs.pipeline_seed(7, _InputContext(0)) == 7
    assert inputs.pipeline_seed(7, _InputContext(2)) == 7 + 2 * inputs._PIPELINE_SEED_STRIDE
    assert inputs.pipeline_seed(None, _InputContext(2)) is None
    assert inputs.pipeline_seed(7, None) == 7
