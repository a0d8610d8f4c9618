"""The loop's checkpoints: when they are saved, resuming, the best copy and the run's records.

What a checkpoint holds (keys by variable path, `global_step`, the dropout layers' random
state under `rng/`) is the training format, owned by `albert.checkpoints.training_format`;
this module decides when to write one and what to resume from. The data iterator of each
worker is saved next to a checkpoint as `input_state/worker_<i>/ckpt-<step>`, written before
the checkpoint itself: `tf.train.CheckpointManager` commits a checkpoint by rewriting the
`checkpoint` file atomically, so a run killed at any moment resumes from a checkpoint whose
input state exists. With several workers (MultiWorkerMirroredStrategy) each writes its own,
and the chief commits only after every worker has (`wait_for_workers`, a cross-worker
barrier), so a worker killed before it saved its position cannot leave a committed checkpoint
without it. Beside it, `ckpt-<step>.element_spec.json` holds the shapes of the batches it
yields and the number of workers: a rerun whose batches differ (another `--train_batch_size`
or `--max_seq_length`) does not restore it (the loop then starts a reshuffled pass), as its
buffered batches of the old shape would fail the first step; nor does a rerun on another
number of workers, whose pipelines read other shares of the files. The best weights by the
task's metric are kept as `model.ckpt-best` (see `TrainingTask.save_best`).

A checkpoint whose files are damaged (a disk that filled up, a copy cut short) is skipped on
resume for the newest intact one, with a warning naming it.

Fault injection (tests only): with `ALBERT_FAULT_POINT=<point>:<step>` in the environment the
process SIGKILLs itself when it reaches that point of that step (`fault_point`): `train_step`
(the host call that ends at the step has run, nothing saved yet), `checkpoint_write` (the
step's input state is written, its checkpoint not yet committed), `before_eval` (the
checkpoint is committed, its evaluation not run), `checkpoint_prune` (--do_eval alone: the
evaluated checkpoint of that step is off the `checkpoint` list, its files not yet deleted; see
`albert.training.pruning`).
"""

from __future__ import annotations

import json
import os
import re
import signal

import tensorflow as tf
from absl import logging

from albert import fileio
from albert.checkpoints import CheckpointError
from albert.checkpoints.training_format import (
    CHECKPOINT_NAME,
    GLOBAL_STEP_KEY,
    MODEL_KEY,
    OPTIMIZER_KEY,
    RNG_KEY,
    checkpoint_reader,
    rng_tree,
    rng_variables,
    variable_tree,
)

BEST_INFO_FILE = "best_checkpoint.txt"
# The step of the last checkpoint evaluated during training (resume evaluates a newer one).
EVALUATED_FILE = "evaluated_checkpoint.txt"
INPUT_STATE_DIR = "input_state"
INPUT_SPEC_SUFFIX = ".element_spec.json"
FAULT_POINT_ENV = "ALBERT_FAULT_POINT"
# The variable-path prefix of Keras' LossScaleOptimizer (float16 runs), its default name.
LOSS_SCALE_OPTIMIZER = "loss_scale_optimizer"


def fault_point(name, step):
    """SIGKILLs this process when `ALBERT_FAULT_POINT` is `<name>:<step>` (tests only)."""
    if os.environ.get(FAULT_POINT_ENV) == f"{name}:{step}":
        logging.warning("%s=%s: killing this process.", FAULT_POINT_ENV, f"{name}:{step}")
        logging.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def latest_checkpoint(directory):
    """The newest intact checkpoint listed in `directory/checkpoint`, or None.

    A damaged one (see `is_intact`) is skipped for the one before it, with a warning.
    """
    for path in reversed(_listed_checkpoints(directory)):
        if is_intact(path):
            return path
        logging.warning(
            "Checkpoint %s is damaged (its files cannot be read back); skipping it for an "
            "older one.",
            path,
        )
    return None


def checkpoint_step(path):
    """The global step in a training checkpoint's name (`.../ckpt-<step>`)."""
    return int(path.rsplit("-", 1)[1])


def newest_step(directory):
    """The global step in the name of the newest checkpoint listed in `directory` (0: none;
    -1: one whose name holds no step, such as `model.ckpt-best` named by hand)."""
    newest = tf.train.latest_checkpoint(directory)
    if not newest:
        return 0
    suffix = newest.rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1


def saved_checkpoints(directory):
    """Every intact checkpoint listed in `directory/checkpoint`, oldest first."""
    return [path for path in _listed_checkpoints(directory) if is_intact(path)]


def _listed_checkpoints(directory):
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return []
    candidates = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    if state.model_checkpoint_path not in candidates:
        candidates.append(state.model_checkpoint_path)
    return candidates


def is_intact(prefix):
    """Whether every tensor of the checkpoint `prefix` can be read back."""
    try:
        reader = checkpoint_reader(prefix)
        for key in reader.get_variable_to_shape_map():
            reader.get_tensor(key)
    except (tf.errors.OpError, IndexError, ValueError):
        return False
    return True


def element_spec_signature(iterator):
    """The shapes and dtypes of the batches `iterator` yields, as JSON."""
    specs = tf.nest.map_structure(
        lambda spec: [spec.shape.as_list(), spec.dtype.name], iterator.element_spec
    )
    return json.dumps(specs, sort_keys=True)


def input_signature(iterator, num_input_pipelines):
    """What a saved input position must match to be restored, as JSON: the batches'
    shapes and dtypes, and the number of input pipelines (workers) the data is shared
    among, which decides each pipeline's files (`albert.data.records`)."""
    specs = json.loads(element_spec_signature(iterator))
    return json.dumps({"element_spec": specs, "input_pipelines": num_input_pipelines})


def _saved_input_mismatch(saved, iterator, num_input_pipelines):
    """Why the position whose `input_signature` is `saved` cannot resume `iterator`, or
    None. A position saved before the signature held the pipelines is checked by its
    shapes alone."""
    loaded = json.loads(saved)
    if isinstance(loaded, dict) and set(loaded) == {"element_spec", "input_pipelines"}:
        if loaded["input_pipelines"] != num_input_pipelines:
            return (
                f"it was saved by one of {loaded['input_pipelines']} workers, and this run "
                f"has {num_input_pipelines}: they share the data out otherwise"
            )
        saved = json.dumps(loaded["element_spec"], sort_keys=True)
    if saved != element_spec_signature(iterator):
        return (
            "it holds batches of another shape; were --train_batch_size or --max_seq_length "
            "changed?"
        )
    return None


def first_line(error):
    return str(error).strip().splitlines()[0][:300]


class TrainingCheckpoints:
    """Saves and restores model, optimizer, global step, random and input state for one run.

    Args:
        output_dir: the run's directory (checkpoints are read from here).
        write_dir: where this worker writes (`output_dir` on the chief).
        model, optimizer, global_step: what to save.
        max_to_keep: `--keep_checkpoint_max`; 0 keeps every checkpoint.
        worker_index: this worker's index (names its input-state files).
        num_workers: the workers (input pipelines) of the run, saved with the input state.
        wait_for_workers: called between writing this worker's input state and committing
            the checkpoint; returns once every worker has written its own (a barrier), or
            None with one worker.
    """

    def __init__(
        self,
        output_dir,
        write_dir,
        model,
        optimizer,
        global_step,
        max_to_keep,
        worker_index=0,
        wait_for_workers=None,
        num_workers=1,
    ):
        self.output_dir = output_dir
        self.wait_for_workers = wait_for_workers or (lambda: None)
        self.write_dir = write_dir
        self.global_step = global_step
        self.worker_index = worker_index
        self.num_workers = num_workers
        self.model = model
        self.optimizer_variables = list(optimizer.variables)
        # A float16 run's LossScaleOptimizer adds its own variables (the loss scale, its
        # step counter) beside the inner optimizer's; a run in another precision has none.
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        inner_ids = {id(v) for v in inner.variables}
        self.loss_scale_variables = [v for v in optimizer.variables if id(v) not in inner_ids]
        self.checkpoint = self._checkpoint(self.optimizer_variables, with_rng=True)
        # 0 keeps all, as the original's RunConfig(keep_checkpoint_max=0); the manager's
        # "keep all" is None (it refuses 0). A non-chief's copies in its local scratch folder
        # are never read back: it keeps one, not a whole run's worth.
        if not max_to_keep:
            max_to_keep = None if write_dir == output_dir else 1
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, write_dir, max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_NAME
        )
        self.input_iterator = None

    def _checkpoint(self, optimizer_variables, with_rng):
        parts = {
            MODEL_KEY: variable_tree(self.model.weights),
            OPTIMIZER_KEY: variable_tree(optimizer_variables),
            GLOBAL_STEP_KEY: self.global_step,
        }
        if with_rng:
            parts[RNG_KEY] = rng_tree(self.model)
        return tf.train.Checkpoint(**parts)

    def _restoring_checkpoint(self, path):
        """The checkpoint object that reads `path` whole: without the random state if it
        holds none (an older run), and with or without float16 loss-scale variables as it
        holds them (written by a run in another precision: see `restore_latest`)."""
        dtypes = checkpoint_reader(path).get_variable_to_dtype_map()
        with_rng = any(name.startswith(RNG_KEY + "/") for name in dtypes)
        # A model without dropout (the v2 configs) has no random state to miss.
        if not with_rng and rng_variables(self.model):
            logging.warning(
                "%s holds no random state (an older run): dropout masks after resume differ "
                "from an uninterrupted run's.",
                path,
            )
        loss_scale = f"{OPTIMIZER_KEY}/{LOSS_SCALE_OPTIMIZER}/"
        stored = {name: dtype for name, dtype in dtypes.items() if name.startswith(loss_scale)}
        variables = self.optimizer_variables
        if self.loss_scale_variables and not stored:
            logging.info(
                "%s holds no float16 loss scale (written in another --mixed_precision): the "
                "loss scale starts at its initial value.",
                path,
            )
            loss_scale_ids = {id(v) for v in self.loss_scale_variables}
            variables = [v for v in variables if id(v) not in loss_scale_ids]
        elif stored and not self.loss_scale_variables:
            logging.info(
                "%s holds a float16 loss scale, which this run (another --mixed_precision) "
                "does not use.",
                path,
            )
            # Stand-ins read the stored values, so the restore still checks every other one.
            suffix = "/.ATTRIBUTES/VARIABLE_VALUE"
            variables = variables + [
                tf.Variable(tf.zeros([], dtype), name=name[len(OPTIMIZER_KEY) + 1 : -len(suffix)])
                for name, dtype in stored.items()
                if name.endswith(suffix)
            ]
        if variables is self.optimizer_variables and with_rng:
            return self.checkpoint
        return self._checkpoint(variables, with_rng)

    # --- Input state ---------------------------------------------------------------------

    def _input_state_prefix(self, step):
        worker = f"worker_{self.worker_index}"
        return os.path.join(self.output_dir, INPUT_STATE_DIR, worker, f"ckpt-{step}")

    def restore_input(self, iterator, step):
        """Restores `iterator` to where it was at `step`; returns False if nothing was saved.

        Raises:
            ValueError: the state was saved for batches of another shape or dtype, or by a
                run of another number of workers (whose pipelines read other files).
        """
        prefix = self._input_state_prefix(step)
        if not tf.io.gfile.exists(prefix + ".index"):
            return False
        spec_path = prefix + INPUT_SPEC_SUFFIX
        if tf.io.gfile.exists(spec_path):  # Older runs saved none.
            with tf.io.gfile.GFile(spec_path) as f:
                saved = f.read()
            mismatch = _saved_input_mismatch(saved, iterator, self.num_workers)
            if mismatch:
                raise ValueError(mismatch)
        tf.train.Checkpoint(iterator=iterator).read(prefix).assert_consumed()
        return True

    def _save_input(self, step):
        if self.input_iterator is not None:
            prefix = self._input_state_prefix(step)
            fileio.write_text(
                prefix + INPUT_SPEC_SUFFIX, input_signature(self.input_iterator, self.num_workers)
            )
            tf.train.Checkpoint(iterator=self.input_iterator).write(prefix)

    def _remove_old_input_states(self):
        # A non-chief keeps the input states of the chief's checkpoints in output_dir too:
        # its own list (in its temporary directory) restarts empty with every rerun.
        kept = list(self.manager.checkpoints)
        state = tf.train.get_checkpoint_state(self.output_dir)
        if state is not None:
            kept += list(state.all_model_checkpoint_paths)
        kept = {checkpoint_step(p) for p in kept}
        directory = os.path.dirname(self._input_state_prefix(0))
        for path in tf.io.gfile.glob(os.path.join(directory, "ckpt-*")):
            match = re.search(r"ckpt-(\d+)\.", os.path.basename(path))
            if match and int(match.group(1)) not in kept:
                tf.io.gfile.remove(path)

    # --- Leftovers of killed writes ------------------------------------------------------

    def remove_unfinished_writes(self):
        """Deletes what writes killed midway left in this worker's folders.

        TensorFlow writes a checkpoint under `<prefix>_temp/` and merges it into `<prefix>.*`
        only at the end; `fileio` and the Keras export write under `.tmp-` names (the
        `model.ckpt-best` copy, `*.weights.h5`). A run killed during one of those leaves
        files of up to a whole checkpoint's size that no later save, rename or
        `max_to_keep` ever removes, one more with every such kill. Called once the run holds
        `output_dir` (its lock): no other process writes there. Each worker cleans its own
        input-state folder; the chief, `output_dir` itself.
        """
        folders = [os.path.dirname(self._input_state_prefix(0))]
        if self.write_dir == self.output_dir:
            folders.append(self.output_dir)
        for folder in folders:
            for path in tf.io.gfile.glob(os.path.join(folder, "*")):
                name = os.path.basename(path)
                if fileio.is_temporary(name) or re.fullmatch(r".*ckpt-\d+_temp", name):
                    logging.info("Removing %s, left by a write killed midway.", path)
                    if tf.io.gfile.isdir(path):
                        tf.io.gfile.rmtree(path)
                    else:
                        tf.io.gfile.remove(path)

    # --- Save / restore ------------------------------------------------------------------

    def save(self, step):
        """Writes the input state, then the checkpoint for `step` (keeping the newest ones)."""
        self._save_input(step)
        self.wait_for_workers()
        fault_point("checkpoint_write", step)
        path = self.manager.save(checkpoint_number=step)
        if self.input_iterator is not None:
            self.wait_for_workers()  # The chief has committed: its list is final.
            self._remove_old_input_states()
        return path

    def latest(self):
        """The newest intact checkpoint in `output_dir`, or None (see `latest_checkpoint`)."""
        return latest_checkpoint(self.output_dir)

    def restore_latest(self):
        """Restores the newest intact checkpoint in `output_dir`; returns its path or None.

        A checkpoint of a run in another `--mixed_precision` resumes (the same command on
        another machine can pick another precision under `auto`): float16 runs add a loss
        scale to the optimizer's state, which starts at its initial value when the checkpoint
        holds none, and is left unread when this run uses none.

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
        try:
            self._restoring_checkpoint(path).restore(path).assert_consumed()
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
        return best_value(self.output_dir)

    def record_best(self, step, metric, value, source):
        record_best(self.output_dir, step, metric, value, source)

    def evaluated_step(self):
        """The step of the last checkpoint evaluated during training, or None."""
        return evaluated_step(self.output_dir)

    def record_evaluated(self, step, checkpoint_path):
        record_evaluated(self.output_dir, step, checkpoint_path)


# --- The run's evaluation records (best_checkpoint.txt, evaluated_checkpoint.txt) ------------


def best_value(output_dir):
    """The metric value recorded in `output_dir`'s best_checkpoint.txt, or None."""
    path = os.path.join(output_dir, BEST_INFO_FILE)
    if not tf.io.gfile.exists(path):
        return None
    return float(read_key_values(path)["value"])


def record_best(output_dir, step, metric, value, source):
    """Records the checkpoint `source` (of `step`) as the run's best by `metric`."""
    write_key_values(
        os.path.join(output_dir, BEST_INFO_FILE),
        {"global_step": step, "metric": metric, "value": value, "source": source},
    )


def evaluated_step(output_dir):
    """The step of the last checkpoint of `output_dir` that was evaluated, or None."""
    path = os.path.join(output_dir, EVALUATED_FILE)
    if not tf.io.gfile.exists(path):
        return None
    return int(read_key_values(path)["global_step"])


def record_evaluated(output_dir, step, checkpoint_path):
    write_key_values(
        os.path.join(output_dir, EVALUATED_FILE),
        {"global_step": step, "checkpoint": checkpoint_path},
    )


def write_key_values(path, values):
    """Writes `key = value` lines (the original's eval_results.txt format), atomically."""
    fileio.write_text(path, "".join(f"{key} = {value}\n" for key, value in values.items()))


def read_key_values(path):
    with tf.io.gfile.GFile(path) as f:
        lines = [line.split(" = ", 1) for line in f.read().splitlines() if " = " in line]
    return {key: value for key, value in lines}
