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
input state exists. The random state of the step (the dropout layers' seed generators, see
`albert.modeling.dropout`) is saved under `rng/dropout_seed_<i>`, numbered in the order of
`model.variables`, so a resumed run draws the masks an uninterrupted one would. The best
weights by the task's metric are kept as `model.ckpt-best` (the original's name; see
`TrainingTask.save_best`).

A checkpoint whose files are damaged (a disk that filled up, a copy cut short) is skipped on
resume for the newest intact one, with a warning naming it.

Fault injection (tests only): with `ALBERT_FAULT_POINT=<point>:<step>` in the environment the
process SIGKILLs itself when it reaches that point of that step (`fault_point`): `train_step`
(the host call that ends at the step has run, nothing saved yet), `checkpoint_write` (the
step's input state is written, its checkpoint not yet committed), `before_eval` (the
checkpoint is committed, its evaluation not run).
"""

from __future__ import annotations

import os
import re
import signal

import tensorflow as tf
from absl import logging

from albert import fileio
from albert.errors import AlbertError

CHECKPOINT_NAME = "model.ckpt"
BEST_PREFIX = "model.ckpt-best"
BEST_INFO_FILE = "best_checkpoint.txt"
# The step of the last checkpoint evaluated during training (resume evaluates a newer one).
EVALUATED_FILE = "evaluated_checkpoint.txt"
INPUT_STATE_DIR = "input_state"
RNG_KEY = "rng"
FAULT_POINT_ENV = "ALBERT_FAULT_POINT"


def fault_point(name, step):
    """SIGKILLs this process when `ALBERT_FAULT_POINT` is `<name>:<step>` (tests only)."""
    if os.environ.get(FAULT_POINT_ENV) == f"{name}:{step}":
        logging.warning("%s=%s: killing this process.", FAULT_POINT_ENV, f"{name}:{step}")
        logging.flush()
        os.kill(os.getpid(), signal.SIGKILL)


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


def rng_variables(model):
    """The model's random state: the variables that are not weights (seed generators')."""
    weights = {id(w) for w in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def _rng_tree(model):
    return tf.train.Checkpoint(
        **{f"dropout_seed_{i}": v for i, v in enumerate(rng_variables(model))}
    )


def checkpoint_prefix(path):
    """A checkpoint prefix: `path` itself, or the latest checkpoint of the directory `path`.

    A prefix is recognised by its `.index` file, never by asking whether `path` is a
    directory: on ram:// and some object stores every path prefix "is" a directory.
    """
    if tf.io.gfile.exists(path + ".index"):
        return path
    return tf.train.latest_checkpoint(path) or path


def checkpoint_reader(path):
    """A reader of the checkpoint `path` names (a prefix, or a run's directory).

    `tf.train.load_checkpoint` and `tf.train.list_variables` ask `isdir` first, which on
    ram:// is true for the prefix itself; the reader here is given the prefix directly.
    """
    return tf.compat.v1.train.NewCheckpointReader(checkpoint_prefix(path))


def stored_shapes(path):
    """{checkpoint key: shape} of the checkpoint `path` names."""
    return checkpoint_reader(path).get_variable_to_shape_map()


def latest_checkpoint(directory):
    """The newest intact checkpoint listed in `directory/checkpoint`, or None.

    A damaged one (see `is_intact`) is skipped for the one before it, with a warning.
    """
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return None
    candidates = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    if state.model_checkpoint_path not in candidates:
        candidates.append(state.model_checkpoint_path)
    for path in reversed(candidates):
        if is_intact(path):
            return path
        logging.warning(
            "Checkpoint %s is damaged (its files cannot be read back); skipping it for an "
            "older one.",
            path,
        )
    return None


def is_intact(prefix):
    """Whether every tensor of the checkpoint `prefix` can be read back."""
    try:
        reader = checkpoint_reader(prefix)
        for key in reader.get_variable_to_shape_map():
            reader.get_tensor(key)
    except (tf.errors.OpError, IndexError, ValueError):
        return False
    return True


def is_training_checkpoint(path):
    """Whether `path` (a prefix, or a run's directory) is a checkpoint of this training code."""
    try:
        names = list(stored_shapes(path))
    except (tf.errors.OpError, ValueError):
        return False
    return "global_step/.ATTRIBUTES/VARIABLE_VALUE" in names and any(
        n.startswith("model/") for n in names
    )


def restore_model_weights(model, path):
    """Loads only the model weights of a training checkpoint (e.g. `model.ckpt-300`).

    Raises:
        CheckpointError: a model weight missing from the checkpoint or of another shape.
    """
    path = checkpoint_prefix(path)
    stored = stored_shapes(path)
    for weight in model.weights:
        key = f"model/{weight.path}/.ATTRIBUTES/VARIABLE_VALUE"
        if key not in stored or list(stored[key]) != list(weight.shape):
            found = "missing" if key not in stored else f"stored with shape {stored[key]}"
            raise CheckpointError(
                f"{path} does not fit this model: {weight.path} {tuple(weight.shape)} is "
                f"{found}; check that albert_config_file matches the run that wrote it."
            )
    tf.train.Checkpoint(model=variable_tree(model.weights)).restore(path).expect_partial()


def first_line(error):
    return str(error).strip().splitlines()[0][:300]


class TrainingCheckpoints:
    """Saves and restores model, optimizer, global step, random and input state for one run.

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
        parts = {
            "model": variable_tree(model.weights),
            "optimizer": variable_tree(optimizer.variables),
            "global_step": global_step,
        }
        self.checkpoint = tf.train.Checkpoint(**parts, **{RNG_KEY: _rng_tree(model)})
        # For checkpoints written before the random state was saved.
        self._checkpoint_without_rng = tf.train.Checkpoint(**parts)
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
        fault_point("checkpoint_write", step)
        path = self.manager.save(checkpoint_number=step)
        if self.input_iterator is not None:
            self._remove_old_input_states()
        return path

    def latest(self):
        """The newest intact checkpoint in `output_dir`, or None (see `latest_checkpoint`)."""
        return latest_checkpoint(self.output_dir)

    def restore_latest(self):
        """Restores the newest intact checkpoint in `output_dir`; returns its path or None.

        Raises:
            CheckpointError: the checkpoint was written for another model or optimizer.
        """
        path = self.latest()
        if path is None:
            if tf.train.latest_checkpoint(self.output_dir):
                raise CheckpointError(
                    f"No checkpoint in {self.output_dir} can be read back (all are damaged); "
                    "use a new --output_dir or delete its model.ckpt-* files to start over."
                )
            return None
        stored = set(stored_shapes(path))
        checkpoint = self.checkpoint
        if not any(name.startswith(RNG_KEY + "/") for name in stored):
            logging.warning(
                "%s holds no random state (an older run): dropout masks after resume differ "
                "from an uninterrupted run's.",
                path,
            )
            checkpoint = self._checkpoint_without_rng
        try:
            checkpoint.restore(path).assert_consumed()
        except (AssertionError, ValueError) as e:
            raise CheckpointError(
                f"Cannot resume from {path} ({first_line(e)}); was it written with another "
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

    def evaluated_step(self):
        """The step of the last checkpoint evaluated during training, or None."""
        path = os.path.join(self.output_dir, EVALUATED_FILE)
        if not tf.io.gfile.exists(path):
            return None
        return int(read_key_values(path)["global_step"])

    def record_evaluated(self, step, checkpoint_path):
        write_key_values(
            os.path.join(self.output_dir, EVALUATED_FILE),
            {"global_step": step, "checkpoint": checkpoint_path},
        )


def copy_checkpoint(source_prefix, target_prefix):
    """Copies the files of the checkpoint `source_prefix` to `target_prefix`.

    Each file is copied to a temporary name and renamed. The old index goes first and the new
    one comes last (the index is what makes a prefix restorable), so a copy cut short leaves
    no restorable mix of old and new files under `target_prefix`.
    """
    files = tf.io.gfile.glob(source_prefix + ".*")
    fileio.remove_quietly(target_prefix + ".index")
    for path in sorted(files, key=lambda p: p.endswith(".index")):
        with fileio.atomic_path(target_prefix + path[len(source_prefix) :]) as temporary:
            tf.io.gfile.copy(path, temporary, overwrite=True)


def write_key_values(path, values):
    """Writes `key = value` lines (the original's eval_results.txt format), atomically."""
    fileio.write_text(path, "".join(f"{key} = {value}\n" for key, value in values.items()))


def read_key_values(path):
    with tf.io.gfile.GFile(path) as f:
        lines = [line.split(" = ", 1) for line in f.read().splitlines() if " = " in line]
    return {key: value for key, value in lines}
