"""Which data-parallel replica the code on this thread runs for.

The training step (`albert.training.steps`) runs each replica's forward pass inside
`replica_scope(replica_id)`; layers that draw random numbers (`albert.modeling.dropout`) read
`current_replica_id()` and fold it into their seeds, so each replica draws its own dropout
masks. This module is the only thing the two sides share: the loop does not import the model
code, and the model code imports neither TensorFlow nor the loop (pure Python, so it stays
backend-agnostic).
"""

from __future__ import annotations

import contextlib
import threading

_context = threading.local()


@contextlib.contextmanager
def replica_scope(replica_id):
    """Within the block, `current_replica_id()` on this thread returns `replica_id`.

    Args:
        replica_id: int or integer scalar tensor, the replica's index in its sync group.
            Pass a tensor when tracing a function shared by several replicas.

    Example:
        >>> with replica_scope(1):
        ...     outputs = model(inputs, training=True)  # dropout draws replica 1's masks
    """
    previous = getattr(_context, "replica_id", None)
    _context.replica_id = replica_id
    try:
        yield
    finally:
        _context.replica_id = previous


def current_replica_id():
    """The `replica_id` of the innermost `replica_scope` on this thread, or None outside one."""
    return getattr(_context, "replica_id", None)
