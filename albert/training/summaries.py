"""TensorBoard scalars and the console progress line."""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf
from absl import logging

from albert.progress import format_duration


class ScalarWriter:
    """Writes dicts of scalars to TensorBoard event files under `directory`.

    Args:
        directory: the event directory (`output_dir` for training, `output_dir/eval`).
        enabled: False on non-chief workers, which write nothing.
        start_step: the first step this process writes again (a resumed training run: the
            step after its checkpoint's); None: the step of the first `write`.

    The event file is created by the first `write`, so a run that fails before it wrote any
    scalar leaves no file behind. It opens with a `SessionLog.START` event at `start_step`,
    as the original's Estimator starts every session: TensorBoard then drops the points
    an earlier, killed process wrote at that step and after, which this one writes again
    (its "purge of orphaned data"), instead of drawing both.
    """

    def __init__(self, directory, enabled=True, start_step=None):
        self.directory = directory
        self.enabled = enabled
        self.start_step = start_step
        self._writer = None

    def write(self, scalars, step):
        if not self.enabled:
            return
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.directory)
            self._write_session_start(step if self.start_step is None else self.start_step)
        with self._writer.as_default(step=eager_scalar(step, np.int64)):
            for name, value in scalars.items():
                tf.summary.scalar(name, eager_scalar(value))
        self._writer.flush()

    def close(self):
        if self._writer is not None:
            self._writer.close()

    def _write_session_start(self, step):
        start = tf.compat.v1.SessionLog(status=tf.compat.v1.SessionLog.START)
        event = tf.compat.v1.Event(wall_time=time.time(), step=int(step), session_log=start)
        # tf.summary has no call for an Event of this kind; its own `import_event` (not
        # exported) writes one through the writer's resource, as here. A TensorFlow whose
        # writer keeps it elsewhere loses only the purge, not the run.
        resource = getattr(self._writer, "_resource", None)
        if resource is None:
            logging.warning(
                "This TensorFlow's summary writer has no _resource: a resumed run's "
                "TensorBoard may show the steps it trains again twice."
            )
            return
        tf.raw_ops.ImportEvent(writer=resource, event=event.SerializeToString())


def eager_scalar(value, dtype=None):
    """`value` as a 0-d numpy array, for an eager op to take instead of a Python number.

    TensorFlow caches the tensor of every Python int or float converted eagerly, for the
    life of the process (tensorflow/tensorflow#68196): a new value each host call (a step,
    a metric) is a cache entry of about 1 KB never freed. Arrays are not cached.
    """
    return np.asarray(value, dtype)


class ProgressLogger:
    """Logs `step 300/1000 (30%) | metric value ... | 812 examples/s | ETA 0:02:10`.

    The first host call (which traces and compiles the step) is left out of the ETA, as it
    is of the rates (`albert.training.loop`).

    Args:
        total_steps: the step training ends at.
        metric_names: the metrics to show, in order, when present.
    """

    def __init__(self, total_steps, metric_names):
        self.total_steps = total_steps
        self.metric_names = tuple(metric_names)
        self._start = None  # (time, step) after the first host call

    def log(self, step, metrics):
        now = time.time()
        eta = ""
        if self._start is None:
            self._start = (now, step)
        elif step > self._start[1]:
            seconds_per_step = (now - self._start[0]) / (step - self._start[1])
            eta = f" | ETA {format_duration(seconds_per_step * (self.total_steps - step))}"
        shown = " | ".join(
            f"{name} {metrics[name]:.4g}" for name in self.metric_names if name in metrics
        )
        percent = 100.0 * step / max(self.total_steps, 1)
        rate = ""
        if "examples_per_second" in metrics:
            rate = f" | {metrics['examples_per_second']:.1f} examples/s"
        if metrics.get("tokens_per_second"):
            rate += f" | {metrics['tokens_per_second']:.0f} tokens/s"
        logging.info(
            "step %d/%d (%.0f%%) | %s%s%s", step, self.total_steps, percent, shown, rate, eta
        )
