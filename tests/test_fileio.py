"""`fileio.rename_folder` and `atomic_directory` on a non-local filesystem (ram:// standing in
for gs://), where a folder is renamed file by file: nested and empty folders move whole, and
a failure halfway leaves each folder where it was, whole."""

import os

import pytest
import tensorflow as tf

from albert import fileio


def _write(path, text):
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)


def _tree(root):
    """Relative name -> text of every file under `root`; relative name/ for every folder."""
    tree = {}
    for folder, folders, files in tf.io.gfile.walk(root):
        relative = folder.rstrip("/")[len(root) :]
        tree.update({f"{relative}/{name.rstrip('/')}/": None for name in folders})
        for name in files:
            tree[f"{relative}/{name}"] = tf.io.gfile.GFile(f"{folder}/{name}").read()
    return tree


@pytest.fixture
def root(tmp_path):
    root = f"ram://fileio-{os.getpid()}-{tmp_path.name}"
    yield root
    if tf.io.gfile.exists(root):
        tf.io.gfile.rmtree(root)


def _saved_model(folder, version):
    _write(f"{folder}/saved_model.pb", f"graph {version}")
    _write(f"{folder}/variables/variables.index", f"index {version}")
    _write(f"{folder}/variables/variables.data-00000-of-00001", f"data {version}")
    tf.io.gfile.makedirs(f"{folder}/assets")


def test_a_remote_folder_moves_whole_with_its_nested_and_empty_folders(root):
    _saved_model(f"{root}/a", "old")
    before = _tree(f"{root}/a")
    fileio.rename_folder(f"{root}/a/", f"{root}/b/")
    assert _tree(f"{root}/b") == before and "/assets/" in before
    assert not tf.io.gfile.exists(f"{root}/a")


def _failing_rename(monkeypatch, fails_at):
    """Makes the `fails_at`-th file rename (counting from 1) fail, as a lost connection."""
    rename, calls = tf.io.gfile.rename, []

    def failing(source, target, overwrite=False):
        calls.append(source)
        if len(calls) == fails_at:
            raise tf.errors.UnavailableError(None, None, "storage went away")
        return rename(source, target, overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", failing)


@pytest.mark.parametrize("fails_at", [2, 3])
def test_a_folder_rename_failing_halfway_leaves_the_folder_whole(root, monkeypatch, fails_at):
    _saved_model(f"{root}/a", "old")
    before = _tree(f"{root}/a")
    _failing_rename(monkeypatch, fails_at)
    with pytest.raises(tf.errors.UnavailableError):
        fileio.rename_folder(f"{root}/a", f"{root}/b")
    assert _tree(f"{root}/a") == before
    assert tf.io.gfile.listdir(root) == ["a"]


@pytest.mark.parametrize("interrupted_at", [1, 2, 3])
def test_a_file_moved_before_ctrl_c_is_put_back_too(root, monkeypatch, interrupted_at):
    # Python raises a Ctrl-C that came during a rename (minutes for a large gs:// file) once
    # the rename is done: that file was at the target, not put back, and deleted with it.
    _saved_model(f"{root}/a", "old")
    before = _tree(f"{root}/a")
    rename, calls = tf.io.gfile.rename, []

    def interrupted(source, target, overwrite=False):
        rename(source, target, overwrite)
        calls.append(source)
        if len(calls) == interrupted_at:
            raise KeyboardInterrupt

    monkeypatch.setattr(tf.io.gfile, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fileio.rename_folder(f"{root}/a", f"{root}/b")
    assert _tree(f"{root}/a") == before
    assert tf.io.gfile.listdir(root) == ["a"]


def test_a_rename_failing_in_its_last_delete_puts_back_the_folders_too(root, monkeypatch):
    # Every file moved, then deleting the emptied source fails after removing its folders
    # (a lost connection midway through the delete): the empty ones are made again.
    _saved_model(f"{root}/a", "old")
    before = _tree(f"{root}/a")
    rmtree = tf.io.gfile.rmtree

    def failing(path):
        rmtree(path)
        raise tf.errors.UnavailableError(None, None, "storage went away")

    monkeypatch.setattr(tf.io.gfile, "rmtree", failing)
    with pytest.raises(tf.errors.UnavailableError):
        fileio.rename_folder(f"{root}/a", f"{root}/b")
    monkeypatch.setattr(tf.io.gfile, "rmtree", rmtree)
    assert _tree(f"{root}/a") == before


def test_a_file_already_at_the_target_stops_the_rename_and_stays(root):
    # Putting back the file whose rename failed must not take the target's own file.
    _saved_model(f"{root}/a", "old")
    _write(f"{root}/b/variables/variables.index", "the target's own")
    before = _tree(f"{root}/a")
    with pytest.raises(tf.errors.AlreadyExistsError):
        fileio.rename_folder(f"{root}/a", f"{root}/b")
    assert _tree(f"{root}/a") == before
    files = {name: text for name, text in _tree(f"{root}/b").items() if text is not None}
    assert files == {"/variables/variables.index": "the target's own"}


# The old SavedModel's 3 files move aside (renames 1-3), then the new one's 3 into place (4-6).
@pytest.mark.parametrize("fails_at", [2, 5, 6])
def test_an_export_failing_halfway_leaves_the_old_saved_model_whole(root, monkeypatch, fails_at):
    # Moved aside or into place file by file, a failure after the first file left `path`
    # half old (failing aside), or half new and half old (failing into place: the old files
    # could not go back over the new ones), and the new files still aside were deleted.
    _saved_model(f"{root}/serving", "old")
    before = _tree(f"{root}/serving")
    _failing_rename(monkeypatch, fails_at)
    with pytest.raises(tf.errors.UnavailableError):
        with fileio.atomic_directory(f"{root}/serving") as temporary:
            _saved_model(temporary, "new")
    assert _tree(f"{root}/serving") == before
    assert tf.io.gfile.listdir(root) == ["serving"]


def test_an_export_replaces_a_remote_folder_whole(root):
    _saved_model(f"{root}/serving", "old")
    with fileio.atomic_directory(f"{root}/serving/") as temporary:
        _saved_model(temporary, "new")
    tree = _tree(f"{root}/serving")
    assert tree["/saved_model.pb"] == "graph new" and "/assets/" in tree
    assert tf.io.gfile.listdir(root) == ["serving"]


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_a_local_folder_is_replaced_in_two_renames(tmp_path, monkeypatch, scheme):
    # Aside and into place, each one rename of the whole folder: never file by file, also
    # when the path is a file:// URL (tf.io.gfile's local filesystem).
    serving = tmp_path / "serving"
    _saved_model(str(serving), "old")
    rename, renamed = tf.io.gfile.rename, []

    def counting(source, target, overwrite=False):
        renamed.append(source)
        return rename(source, target, overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", counting)
    with fileio.atomic_directory(f"{scheme}{serving}/") as temporary:
        _saved_model(temporary, "new")
    assert len(renamed) == 2 and renamed[0].rstrip("/") == f"{scheme}{serving}"
    assert (serving / "saved_model.pb").read_text() == "graph new"
    assert os.listdir(tmp_path) == ["serving"]


def test_only_the_file_name_marks_a_temporary():
    # A folder whose name holds the mark (an export's temporary folder, a user's folder)
    # does not make the files in it leftovers that readers would skip.
    assert fileio.is_temporary("data/.train.tfrecord.tmp-ab12.77.host")
    assert not fileio.is_temporary("data/.export.tmp-ab12/train.tfrecord")


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_ctrl_c_in_an_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path, stop):
    path = tmp_path / "eval_results.txt"
    path.write_text("old\n")
    with pytest.raises(stop), fileio.atomic_path(str(path)) as temporary:
        with open(temporary, "w") as f:
            f.write("half")
        raise stop()
    assert path.read_text() == "old\n" and list(tmp_path.iterdir()) == [path]


def test_a_local_atomic_path_keeps_the_suffix_after_the_mark(tmp_path):
    # Keras wants `.weights.h5` at the end; the stem keeps the final name's, so the
    # temporary reads `model.tmp-<hex>.weights.h5`, not `model.weights.h5.tmp-<hex>...`.
    path = str(tmp_path / "model.weights.h5")
    with fileio.local_atomic_path(path, ".weights.h5") as temporary:
        name = os.path.basename(temporary)
        assert name.startswith(f"model{fileio.TEMPORARY_MARK}") and name.endswith(".weights.h5")
        assert name.count(".weights.h5") == 1 and fileio.is_temporary(temporary)
        with open(temporary, "w") as f:
            f.write("weights")
    assert os.listdir(tmp_path) == ["model.weights.h5"]


@pytest.mark.parametrize("mode", ["a", "r", "w+"])
def test_atomic_open_refuses_modes_that_do_not_write_a_whole_file(tmp_path, mode):
    with pytest.raises(ValueError, match="mode must be 'w' or 'wb'"):
        with fileio.atomic_open(str(tmp_path / "f.txt"), mode):
            pass
    assert list(tmp_path.iterdir()) == []


def test_only_nothing_an_empty_folder_or_a_marked_folder_is_replaceable(tmp_path):
    assert fileio.is_replaceable(str(tmp_path / "new"), "saved_model.pb")
    assert fileio.is_replaceable(str(tmp_path), "saved_model.pb")  # empty
    (tmp_path / "saved_model.pb").write_text("graph")
    assert fileio.is_replaceable(str(tmp_path), "saved_model.pb")
    assert not fileio.is_replaceable(str(tmp_path / "saved_model.pb"), "saved_model.pb")  # a file
    (tmp_path / "saved_model.pb").unlink()
    (tmp_path / "notes.txt").write_text("mine")
    assert not fileio.is_replaceable(str(tmp_path), "saved_model.pb")


def test_json_is_written_readable_with_its_non_ascii_text_and_a_final_newline(tmp_path):
    path = tmp_path / "labels.json"
    fileio.write_json(str(path), {"label": "café"})
    assert path.read_text(encoding="utf-8") == '{\n    "label": "café"\n}\n'
