"""Removing evaluated checkpoints after `--do_eval` alone, as the original's eval loops do.

The original run_classifier.py, run_race.py and run_squad_v*.py remove each checkpoint they
have evaluated once more than one newer step checkpoint exists in `output_dir`, keeping the
best (run_classifier renames it to `model.ckpt-best` at the end; the others have copied it
there and remove it like the rest). After run_glue.sh's two commands the directory holds
`model.ckpt-best` and the two newest step checkpoints; on ALBERT-xxlarge (about 900 MB a
checkpoint) keeping every other one costs gigabytes.

A checkpoint leaves the `checkpoint` state file (rewritten atomically) before its files are
deleted, so a run killed at any moment leaves a directory that resumes and re-evaluates
correctly: every listed checkpoint exists, and the files of an unlisted one are removed by
the next run.
"""

from __future__ import annotations

import os
import re

import tensorflow as tf
from absl import logging
from google.protobuf import text_format

from albert import fileio
from albert.checkpoints import training_format
from albert.checkpoints.training_format import BEST_PREFIX, CHECKPOINT_NAME
from albert.training import checkpointing

# The newest step checkpoints that stay: the original removes one only when "more than one"
# newer exists (`len(_find_valid_cands(step)) > 1`), so training resumes from the newest.
KEPT_NEWEST = 2


def remove_evaluated_checkpoints(output_dir, checkpoints):
    """Removes from `output_dir` each of `checkpoints` (its intact step checkpoints, oldest
    first) that was evaluated, is not among the `KEPT_NEWEST` newest and is not the best,
    with its input state; files an interrupted earlier call left unlisted go too.

    The best step's own checkpoint goes only when `model.ckpt-best` verifiably holds the same
    step's weights: the original's end state has no second copy of them (run_classifier
    renames the best, the others copy and then remove it), and on a large model the copy
    costs as much as any other checkpoint.

    Args:
        output_dir: the run's directory (its output-dir lock held by the caller).
        checkpoints: the checkpoint paths `checkpointing.saved_checkpoints` listed.
    """
    evaluated = checkpointing.evaluated_step(output_dir)
    steps = sorted(checkpointing.checkpoint_step(path) for path in checkpoints)
    if evaluated is None or len(steps) < KEPT_NEWEST:
        return
    oldest_kept = steps[-KEPT_NEWEST]
    best = _best_step(output_dir)
    best_copied = best is not None and _best_copy_holds(output_dir, best)
    recorded = _mtime(os.path.join(output_dir, checkpointing.EVALUATED_FILE))

    def removable(step):
        # A checkpoint written after the evaluation record was never evaluated, whatever its
        # step: a new run in a directory that holds an older run's records.
        evaluated_then = step <= evaluated and _written_at(output_dir, step) <= recorded
        return step < oldest_kept and evaluated_then and (step != best or best_copied)

    state = _unlist(output_dir, {step for step in steps if removable(step)})
    listed = {checkpointing.checkpoint_step(p) for p in state.all_model_checkpoint_paths}
    listed.add(checkpointing.checkpoint_step(state.model_checkpoint_path))
    # Unlisted now: those just taken off the list, and those a killed earlier call took off.
    for step in sorted(step for step in _stored_steps(output_dir) - listed if removable(step)):
        checkpointing.fault_point("checkpoint_prune", step)
        why = "model.ckpt-best holds its weights" if step == best else "not the best"
        logging.info(
            "Removing checkpoint %d: evaluated, %s, and older than the newest %s (as the "
            "original's eval loop; --keep_checkpoint_max=0 keeps every checkpoint).",
            step,
            why,
            steps[-KEPT_NEWEST:],
        )
        _remove_files(output_dir, step)


def _best_step(output_dir):
    path = os.path.join(output_dir, checkpointing.BEST_INFO_FILE)
    if not tf.io.gfile.exists(path):
        return None
    return int(checkpointing.read_key_values(path)["global_step"])


def _best_copy_holds(output_dir, step):
    """Whether `model.ckpt-best` is an intact training checkpoint of global step `step`."""
    best = os.path.join(output_dir, BEST_PREFIX)
    if not tf.io.gfile.exists(best + ".index"):
        return False
    # Copied from the step's checkpoint, so written after it: an older run's best of the
    # same step holds other weights.
    copied_after = _mtime(best + ".index") >= _written_at(output_dir, step)
    same_step = training_format.global_step(best) == step
    return copied_after and same_step and checkpointing.is_intact(best)


def _mtime(path):
    return tf.io.gfile.stat(path).mtime_nsec if tf.io.gfile.exists(path) else 0


def _written_at(output_dir, step):
    """When the step checkpoint's newest file was written (0 when none is left)."""
    prefix = f"{CHECKPOINT_NAME}-"  # not the input state, written before the checkpoint
    files = [p for p in _step_files(output_dir, step) if os.path.basename(p).startswith(prefix)]
    return max((_mtime(path) for path in files), default=0)


def _unlist(output_dir, steps):
    """Rewrites `output_dir/checkpoint` without the checkpoints of `steps`, atomically.

    The raw file is edited (not `tf.train.get_checkpoint_state`'s absolute paths) so the
    names stay as `tf.train.CheckpointManager` wrote them; each timestamp goes with its path,
    as the manager pairs them when a later training run reads the file.

    Returns:
        The `CheckpointState` the file now holds.
    """
    path = os.path.join(output_dir, "checkpoint")
    # TensorFlow exports no CheckpointState class, only this function that makes one.
    state = tf.compat.v1.train.generate_checkpoint_state_proto(".", CHECKPOINT_NAME)
    state.Clear()
    with tf.io.gfile.GFile(path) as f:
        text_format.Parse(f.read(), state)
    if not steps:
        return state
    paths = list(state.all_model_checkpoint_paths)
    times = list(state.all_model_checkpoint_timestamps)
    kept = [i for i, p in enumerate(paths) if checkpointing.checkpoint_step(p) not in steps]
    del state.all_model_checkpoint_paths[:]
    state.all_model_checkpoint_paths.extend(paths[i] for i in kept)
    if len(times) == len(paths):
        del state.all_model_checkpoint_timestamps[:]
        state.all_model_checkpoint_timestamps.extend(times[i] for i in kept)
    fileio.write_text(path, text_format.MessageToString(state))
    return state


def _step_files(output_dir, step=None):
    """{path: step} of the step checkpoints' files in `output_dir` and of every worker's
    input state (`input_state/worker_<i>/ckpt-<step>.*`), of `step` only when given."""
    pattern = "*" if step is None else str(step)
    globs = (
        (os.path.join(output_dir, f"{CHECKPOINT_NAME}-{pattern}.*"), CHECKPOINT_NAME),
        (os.path.join(output_dir, checkpointing.INPUT_STATE_DIR, "*", f"ckpt-{pattern}.*"), "ckpt"),
    )
    files = {}
    for glob, name in globs:
        for path in tf.io.gfile.glob(glob):
            match = re.fullmatch(re.escape(name) + r"-(\d+)\..*", os.path.basename(path))
            if match:
                files[path] = int(match.group(1))
    return files


def _stored_steps(output_dir):
    return set(_step_files(output_dir).values())


def _remove_files(output_dir, step):
    # The index first: without it no reader takes what is left for a checkpoint.
    files = sorted(_step_files(output_dir, step), key=lambda p: not p.endswith(".index"))
    for path in files:
        tf.io.gfile.remove(path)
