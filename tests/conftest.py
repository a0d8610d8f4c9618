"""Test-wide settings: quiet TensorFlow, the TensorFlow Keras backend, the repo on sys.path."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# The `auto` precision/XLA default depends on the CPU (albert.training.hardware): every test
# sees a CPU without bfloat16 units (float32, XLA), whichever machine runs the suite.
os.environ.setdefault("ALBERT_CPU_FLAGS", "")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_exit_status = {}


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
