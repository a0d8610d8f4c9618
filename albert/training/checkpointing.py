"""Training checkpoints: what they hold, saving, resuming, the best copy and the final export.

Format. `output_dir/model.ckpt-<step>` is a TensorFlow object-based checkpoint whose keys
follow the Keras variable paths, so they do not depend on Python attribute names:

    model/<variable.path>/.ATTRIBUTES/VARIABLE_VALUE       e.g. model/encoder/
        group_0_inner_group_0_attention/query/kernel/.ATTRIBUTES/VARIABLE_VALUE
    optimizer/<optimizer variable path>/...                e.g. optimizer/lamb/
        embeddings_word_embeddings_m/...
    global_step/.ATTRIBUTES/VARIABLE_VALUE

(Keras 3 layers kept in nested Python lists, like the encoder's groups, are invisible to
`tf.train.Checkpoint(model=model)`; keying by path avoids that trap.) The data iterator of
each worker is saved next to it as `input_state/worker_<i>/ckpt-<step>`, written before the
checkpoint itself: `tf.train.CheckpointManager` commits a checkpoint by rewriting the
`checkpoint` file atomically, so a run killed at any moment resumes from a checkpoint whose
input state exists. The best weights by the task's metric are kept as `model.ckpt-best` (the
original's name; see `TrainingTask.save_best`).
"""

from __future__ import annotations

import os
import re

import tensorflow as tf
from absl import logging

from albert.errors import AlbertError

CHECKPOINT_NAME = "model.ckpt"
BEST_PREFIX = "model.ckpt-best"
BEST_INFO_FILE = "best_checkpoint.txt"
INPUT_STATE_DIR = "input_state"


class CheckpointError(AlbertError):
    """A checkpoint that does not match the model or the run."""


def variable_tree(variables):
    """Nested trackables whose checkpoint keys are the variables' paths.

    Args:
        variables: Keras (or tf) variables with a `path` (or `name`) attribute.

    Returns:
        A `tf.train.Checkpoint` node whose children follow the "/"-separated paths.

    Raises:
        CheckpointError: two variables with the same path.
    """
    tree = {}
    for variable in variables:
        path = getattr(variable, "path", None) or variable.name.split(":")[0]
        node = tree
        *parents, leaf = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise CheckpointError(f"Variable path {path!r} clashes with another variable.")
        if leaf in node:
            raise CheckpointError(f"Two variables share the path {path!r}.")
        node[leaf] = variable  # Keras variables are trackable under the TensorFlow backend.
    return _to_trackable(tree)


def _to_trackable(tree):
    children = {k: _to_trackable(v) if isinstance(v, dict) else v for k, v in tree.items()}
    return tf.train.Checkpoint(**children)


def _prefix(path):
    """A checkpoint prefix: `path` itself, or a directory's latest checkpoint."""
    if tf.io.gfile.isdir(path):
        return tf.train.latest_checkpoint(path) or path
    return path


def is_training_checkpoint(path):
    """Whether `path` (a prefix, or a run's directory) is a checkpoint of this training code."""
    try:
        names = [name for name, _ in tf.train.list_variables(_prefix(path))]
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, ValueError):
        return False
    return "global_step/.ATTRIBUTES/VARIABLE_VALUE" in names and any(
        n.startswith("model/") for n in names
    )


def restore_model_weights(model, path):
    """Loads only the model weights of a training checkpoint (e.g. `model.ckpt-300`).

    Raises:
        CheckpointError: a model weight missing from the checkpoint or of another shape.
    """
    path = _prefix(path)
    stored = dict(tf.train.list_variables(path))
    for weight in model.weights:
        key = f"model/{weight.path}/.ATTRIBUTES/VARIABLE_VALUE"
        if key not in stored or list(stored[key]) != list(weight.shape):
            found = "missing" if key not in stored else f"stored with shape {stored[key]}"
            raise CheckpointError(
                f"{path} does not fit this model: {weight.path} {tuple(weight.shape)} is "
                f"{found}; check that albert_config_file matches the run that wrote it."
            )
    tf.train.Checkpoint(model=variable_tree(model.weights)).restore(path).expect_partial()


def _first_line(error):
    return str(error).strip().splitlines()[0][:300]


class TrainingCheckpoints:
    """Saves and restores model, optimizer, global step and input state for one run.

    Args:
        output_dir: the run's directory (checkpoints are read from here).
        write_dir: where this worker writes (`output_dir` on the chief).
        model, optimizer, global_step: what to save.
        max_to_keep: `--keep_checkpoint_max`.
        worker_index: this worker's index (names its input-state files).
    """

    def __init__(
        self, output_dir, write_dir, model, optimizer, global_step, max_to_keep, worker_index=0
    ):
        self.output_dir = output_dir
        self.write_dir = write_dir
        self.global_step = global_step
        self.worker_index = worker_index
        self.checkpoint = tf.train.Checkpoint(
            model=variable_tree(model.weights),
            optimizer=variable_tree(optimizer.variables),
            global_step=global_step,
        )
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, write_dir, max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_NAME
        )
        self.input_iterator = None

    # --- Input state ---------------------------------------------------------------------

    def _input_state_prefix(self, step):
        worker = f"worker_{self.worker_index}"
        return os.path.join(self.output_dir, INPUT_STATE_DIR, worker, f"ckpt-{step}")

    def restore_input(self, iterator, step):
        """Restores `iterator` to where it was at `step`; returns False if nothing was saved."""
        prefix = self._input_state_prefix(step)
        if not tf.io.gfile.exists(prefix + ".index"):
            return False
        tf.train.Checkpoint(iterator=iterator).read(prefix).assert_consumed()
        return True

    def _save_input(self, step):
        if self.input_iterator is not None:
            tf.train.Checkpoint(iterator=self.input_iterator).write(self._input_state_prefix(step))

    def _remove_old_input_states(self):
        kept = {int(p.rsplit("-", 1)[1]) for p in self.manager.checkpoints}
        directory = os.path.dirname(self._input_state_prefix(0))
        for path in tf.io.gfile.glob(os.path.join(directory, "ckpt-*")):
            match = re.search(r"ckpt-(\d+)\.", os.path.basename(path))
            if match and int(match.group(1)) not in kept:
                tf.io.gfile.remove(path)

    # --- Save / restore ------------------------------------------------------------------

    def save(self, step):
        """Writes the input state, then the checkpoint for `step` (keeping the newest ones)."""
        self._save_input(step)
        path = self.manager.save(checkpoint_number=step)
        if self.input_iterator is not None:
            self._remove_old_input_states()
        return path

    def latest(self):
        return tf.train.latest_checkpoint(self.output_dir)

    def restore_latest(self):
        """Restores the newest checkpoint in `output_dir`; returns its path or None."""
        path = self.latest()
        if path is None:
            return None
        try:
            self.checkpoint.restore(path).assert_consumed()
        except (AssertionError, ValueError) as e:
            raise CheckpointError(
                f"Cannot resume from {path} ({_first_line(e)}); was it written with another "
                "config or --optimizer? Use a new --output_dir or the same flags."
            ) from None
        logging.info("Resumed from %s at global step %d.", path, int(self.global_step.numpy()))
        return path

    # --- Best checkpoint -----------------------------------------------------------------

    def best_value(self):
        """The metric value recorded in best_checkpoint.txt, or None."""
        path = os.path.join(self.output_dir, BEST_INFO_FILE)
        if not tf.io.gfile.exists(path):
            return None
        return float(read_key_values(path)["value"])

    def record_best(self, step, metric, value, source):
        write_key_values(
            os.path.join(self.output_dir, BEST_INFO_FILE),
            {"global_step": step, "metric": metric, "value": value, "source": source},
        )


def copy_checkpoint(source_prefix, target_prefix):
    """Copies the files of the checkpoint `source_prefix` to `target_prefix`."""
    files = tf.io.gfile.glob(source_prefix + ".*")
    # Data first, index last: the index is what makes the prefix restorable.
    for path in sorted(files, key=lambda p: p.endswith(".index")):
        tf.io.gfile.copy(path, target_prefix + path[len(source_prefix) :], overwrite=True)


def write_key_values(path, values):
    """Writes `key = value` lines (the original's eval_results.txt format), atomically."""
    text = "".join(f"{key} = {value}\n" for key, value in values.items())
    temporary = path + ".tmp"
    with tf.io.gfile.GFile(temporary, "w") as f:
        f.write(text)
    tf.io.gfile.rename(temporary, path, overwrite=True)


def read_key_values(path):
    with tf.io.gfile.GFile(path) as f:
        lines = [line.split(" = ", 1) for line in f.read().splitlines() if " = " in line]
    return {key: value for key, value in lines}
