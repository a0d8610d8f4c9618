"""`replica_scope` (which replica this thread runs for) and the dropout seeds it sets.

The mirrored training step is tested end to end in tests/training/test_replica_dropout.py
(slow tier); these are the fast checks of the two pieces it rests on.
"""

import threading

import numpy as np
import pytest

from albert.modeling import dropout as dropout_module
from albert.modeling.dropout import Dropout
from albert.replica_scope import current_replica_id, replica_scope


def test_a_nested_scope_gives_the_outer_replica_back_when_it_ends():
    assert current_replica_id() is None
    with replica_scope(1):
        with replica_scope(2):
            assert current_replica_id() == 2
        assert current_replica_id() == 1
    assert current_replica_id() is None


def test_an_exception_in_the_block_leaves_the_outer_replica():
    with replica_scope(3):
        with pytest.raises(RuntimeError), replica_scope(4):
            raise RuntimeError("step failed")
        assert current_replica_id() == 3
    assert current_replica_id() is None


def test_each_thread_sees_its_own_replica():
    seen = {}

    def run(replica_id):
        with replica_scope(replica_id):
            barrier.wait()  # both threads are inside their scopes at once
            seen[replica_id] = current_replica_id()
            barrier.wait()  # and neither leaves its scope before both have read

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {0: 0, 1: 1}
    assert current_replica_id() is None


def _mask(layer, replica_id=None):
    x = np.ones((1, 64), "float32")
    if replica_id is None:
        return np.asarray(layer(x, training=True)) > 0
    with replica_scope(replica_id):
        return np.asarray(layer(x, training=True)) > 0


def test_replica_r_draws_the_masks_of_the_seed_moved_by_r_strides():
    # The replica id moves the seed, not the draw counter: replica r's k-th mask is the
    # k-th mask of a layer seeded `seed + r * stride`, so replicas never share a stream.
    seed, stride = 7, dropout_module._REPLICA_STRIDE
    for replica_id in (0, 1, 2):
        layer, reference = Dropout(0.5, seed=seed), Dropout(0.5, seed=seed + replica_id * stride)
        for _ in range(2):  # the second draw too: the counter advances as it would alone
            np.testing.assert_array_equal(_mask(layer, replica_id), _mask(reference))
    assert not np.array_equal(_mask(Dropout(0.5, seed=seed), 0), _mask(Dropout(0.5, seed=seed), 1))


def test_the_stored_seed_state_is_the_same_whichever_replica_drew():
    layers = [Dropout(0.5, seed=11) for _ in range(2)]
    for replica_id, layer in enumerate(layers):
        _mask(layer, replica_id)
    states = [np.asarray(layer.seed_generator.state) for layer in layers]
    np.testing.assert_array_equal(states[0], states[1])
