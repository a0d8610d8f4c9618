"""Test-wide settings: quiet TensorFlow, the TensorFlow Keras backend, the repo on sys.path."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# The `auto` precision/XLA default depends on the CPU (albert.training.hardware): every test
# sees a CPU without bfloat16 units (float32, XLA), whichever machine runs the suite.
os.environ.setdefault("ALBERT_CPU_FLAGS", "")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
