"""Test-wide settings: quiet TensorFlow, the TensorFlow Keras backend, the repo on sys.path."""

import os
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# The `auto` precision/XLA default depends on the CPU (albert.training.hardware): every test
# sees a CPU without bfloat16 units (float32, XLA), whichever machine runs the suite.
os.environ.setdefault("ALBERT_CPU_FLAGS", "")
# ... and compiles with XLA only where a test asks for it (--jit_compile, jit_compile=True):
# a few steps of a tiny model spend about half their time in XLA:CPU's compiler. The tests of
# each head's learning, and the XLA parity tests, pass it explicitly.
os.environ.setdefault("ALBERT_CPU_XLA", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_exit_status = {}


@pytest.fixture
def absl_caplog(caplog):
    """`caplog` that sees absl's INFO records whatever earlier tests in the process did to
    absl's logger (its verbosity flag sets the logger's level; its handler may stop
    propagation)."""
    from absl import logging as absl_logging

    logger = absl_logging.get_absl_logger()
    propagate, logger.propagate = logger.propagate, True
    caplog.set_level("INFO")
    caplog.set_level("INFO", logger="absl")
    yield caplog
    logger.propagate = propagate


def pytest_collection_modifyitems(config, items):
    """The slow tier first (in collection order, with every test of an `xdist_group` that
    holds one): pytest-xdist hands tests out in this order, so the long ones start early and
    short ones fill the end, instead of a long one starting last while the other workers idle.
    """

    def group(item):
        marker = item.get_closest_marker("xdist_group")
        return marker.args[0] if marker and marker.args else None

    slow_groups = {group(item) for item in items if item.get_closest_marker("slow")}
    slow_groups.discard(None)
    items.sort(key=lambda item: not (item.get_closest_marker("slow") or group(item) in slow_groups))


def pytest_sessionfinish(session, exitstatus):
    _exit_status["value"] = int(exitstatus)


def pytest_unconfigure(config):
    """Leave without Python's interpreter teardown once pytest has reported everything.

    At teardown TensorFlow destroys the tf.data iterators that tests left alive, and one of
    them can wait forever for a background thread (seen once in a full run: the summary was
    printed, then the process hung in IteratorResource's destructor). The result is already
    reported, so exit with pytest's own status instead.
    """
    if "value" in _exit_status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status["value"])
