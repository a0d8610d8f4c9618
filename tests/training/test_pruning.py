"""After --do_eval alone, evaluated checkpoints but the best and the two newest are removed, as
the original's eval loops do; the `checkpoint` file is rewritten first, so a kill between it
and the deletes leaves a directory that resumes, and the next call deletes the leftovers."""

import os
import shutil
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert.checkpoints import training_format
from albert.training import checkpointing, pruning
from tests.helpers import write_training_checkpoint

STEPS = (3, 6, 9, 12, 15)


def _model(step):
    """A small Keras model whose every weight is `step` (so a checkpoint names its step)."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    for weight in model.weights:
        weight.assign(np.full(weight.shape, step, "float32"))
    return model


def _run_dir(directory, evaluated=15, best=6, best_copy=None):
    """What `--do_train --nodo_eval` then `--do_eval` (before pruning) leave in `directory`:
    checkpoints of STEPS with input-state files, `evaluated` and `best` recorded, and
    `model.ckpt-best` a copy of the step `best_copy` (None: `best`; 0: no copy)."""
    directory = str(directory)
    for step in STEPS:
        write_training_checkpoint(_model(step), directory, step, max_to_keep=0)
        state = os.path.join(directory, "input_state", "worker_0", f"ckpt-{step}")
        for suffix in (".index", ".data-00000-of-00001", ".element_spec.json"):
            tf.io.gfile.makedirs(os.path.dirname(state))
            with tf.io.gfile.GFile(state + suffix, "w") as f:
                f.write("x")
    checkpointing.record_evaluated(directory, evaluated, f"{directory}/model.ckpt-{evaluated}")
    checkpointing.record_best(directory, best, "accuracy", 0.75, f"{directory}/model.ckpt-{best}")
    best_copy = best if best_copy is None else best_copy
    if best_copy:
        training_format.copy_checkpoint(
            f"{directory}/model.ckpt-{best_copy}", f"{directory}/{training_format.BEST_PREFIX}"
        )
    return directory


def _prune(directory):
    pruning.remove_evaluated_checkpoints(directory, checkpointing.saved_checkpoints(directory))


def _listed(directory):
    state = tf.train.get_checkpoint_state(directory)
    return [checkpointing.checkpoint_step(p) for p in state.all_model_checkpoint_paths]


def _stored(directory):
    """{step checkpoints in `directory`}, {steps of its input-state files}."""
    names = tf.io.gfile.listdir(directory)
    checkpoints = {int(n[len("model.ckpt-") : -len(".index")]) for n in names if _is_step(n)}
    states = tf.io.gfile.listdir(os.path.join(directory, "input_state", "worker_0"))
    return checkpoints, {int(n.split(".")[0][len("ckpt-") :]) for n in states}


def _is_step(name):
    return name.startswith("model.ckpt-") and name.endswith(".index") and "best" not in name


def _weight(prefix):
    reader = training_format.checkpoint_reader(prefix)
    key = next(k for k in reader.get_variable_to_shape_map() if k.startswith("model/"))
    return float(reader.get_tensor(key).flat[0])


@pytest.mark.parametrize("root", ["local", "ram"])
def test_only_the_best_copy_and_the_two_newest_remain(tmp_path, root):
    # ram:// is a non-local filesystem as gs:// is: everything goes through tf.io.gfile.
    base = str(tmp_path) if root == "local" else f"ram://{tmp_path.name}-prune"
    directory = _run_dir(base)
    _prune(directory)
    assert _listed(directory) == [12, 15]
    assert _stored(directory) == ({12, 15}, {12, 15})
    assert not tf.io.gfile.exists(f"{directory}/model.ckpt-6.data-00000-of-00001")
    assert _weight(f"{directory}/{training_format.BEST_PREFIX}") == 6.0
    assert checkpointing.latest_checkpoint(directory) == f"{directory}/model.ckpt-15"
    # A later training run's manager reads the rewritten file: every path with its timestamp.
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(), directory, max_to_keep=5)
    assert [checkpointing.checkpoint_step(p) for p in manager.checkpoints] == [12, 15]
    _prune(directory)  # nothing left to remove
    assert _stored(directory) == ({12, 15}, {12, 15})


def test_the_best_step_stays_unless_model_ckpt_best_holds_it(tmp_path):
    # model.ckpt-best of another step (or none): step 6 is the only copy of the best weights.
    directory = _run_dir(tmp_path / "other", best_copy=9)
    _prune(directory)
    assert _listed(directory) == [6, 12, 15]
    assert _stored(directory) == ({6, 12, 15}, {6, 12, 15})
    directory = _run_dir(tmp_path / "none", best_copy=0)
    _prune(directory)
    assert _listed(directory) == [6, 12, 15]


def test_checkpoints_not_evaluated_yet_stay(tmp_path):
    directory = _run_dir(tmp_path, evaluated=6)
    _prune(directory)
    assert _listed(directory) == [9, 12, 15]
    assert _stored(directory) == ({9, 12, 15}, {9, 12, 15})


def test_a_kill_between_the_list_and_the_deletes_leaves_a_usable_directory(tmp_path, monkeypatch):
    directory = _run_dir(tmp_path)

    class Killed(Exception):
        pass

    def fault_point(name, step):
        if name == "checkpoint_prune":  # ALBERT_FAULT_POINT=checkpoint_prune:3 SIGKILLs here
            raise Killed

    monkeypatch.setattr(checkpointing, "fault_point", fault_point)
    with pytest.raises(Killed):
        _prune(directory)
    # The list no longer names what is about to go: every listed checkpoint is whole.
    assert _listed(directory) == [12, 15]
    assert _stored(directory) == (set(STEPS), set(STEPS))
    saved = checkpointing.saved_checkpoints(directory)
    assert [checkpointing.checkpoint_step(p) for p in saved] == [12, 15]
    monkeypatch.undo()
    _prune(directory)  # the rerun deletes the unlisted leftovers
    assert _stored(directory) == ({12, 15}, {12, 15})
    assert _weight(f"{directory}/{training_format.BEST_PREFIX}") == 6.0


def test_checkpoints_written_after_the_records_stay(tmp_path):
    """A new run in a directory that kept an older run's records (evaluated up to 15, best
    6, its model.ckpt-best): its checkpoints were never evaluated, whatever their steps."""
    old = _run_dir(tmp_path / "old")
    new = tmp_path / "new"
    new.mkdir()
    for name in (checkpointing.EVALUATED_FILE, checkpointing.BEST_INFO_FILE):
        shutil.copy(os.path.join(old, name), new / name)
    for suffix in (".index", ".data-00000-of-00001"):
        name = training_format.BEST_PREFIX + suffix
        shutil.copy(os.path.join(old, name), new / name)
    time.sleep(1.1)  # tf.io.gfile.stat has whole seconds locally: the new checkpoints are newer
    for step in STEPS:
        write_training_checkpoint(_model(100 + step), str(new), step, max_to_keep=0)
    _prune(str(new))
    assert _listed(str(new)) == list(STEPS)


def test_nothing_is_removed_before_any_evaluation(tmp_path):
    directory = _run_dir(tmp_path)
    os.remove(os.path.join(directory, checkpointing.EVALUATED_FILE))
    _prune(directory)
    assert _listed(directory) == list(STEPS)
    assert _stored(directory) == (set(STEPS), set(STEPS))


def test_the_best_step_stays_when_model_ckpt_best_is_an_older_copy_or_damaged(tmp_path):
    # model.ckpt-best of step 6 but written before this run's model.ckpt-6: an earlier run's
    # best at the same step, other weights.
    directory = _run_dir(tmp_path / "older", best_copy=0)
    earlier = str(tmp_path / "earlier")
    write_training_checkpoint(_model(106), earlier, 6, max_to_keep=0)
    best = f"{directory}/{training_format.BEST_PREFIX}"
    training_format.copy_checkpoint(f"{earlier}/model.ckpt-6", best)
    written = os.stat(f"{directory}/model.ckpt-6.index").st_mtime
    for path in tf.io.gfile.glob(best + ".*"):
        os.utime(path, (written - 60, written - 60))
    _prune(directory)
    assert _listed(directory) == [6, 12, 15]
    # A damaged copy of the right step holds nothing to fall back on either.
    directory = _run_dir(tmp_path / "damaged")
    (data,) = tf.io.gfile.glob(f"{directory}/{training_format.BEST_PREFIX}.data-*")
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    _prune(directory)
    assert _listed(directory) == [6, 12, 15]


def test_a_checkpoint_loses_its_index_first(tmp_path, monkeypatch):
    # Killed after the first file of step 3 is deleted: what is left of it is not a
    # checkpoint any reader takes (no .index), and the next call removes it.
    directory = _run_dir(tmp_path)
    remove = tf.io.gfile.remove
    removed = []

    class Killed(Exception):
        pass

    def remove_then_die(path):
        if removed:
            raise Killed
        removed.append(path)
        remove(path)

    monkeypatch.setattr(tf.io.gfile, "remove", remove_then_die)
    with pytest.raises(Killed):
        _prune(directory)
    assert removed == [f"{directory}/model.ckpt-3.index"]
