"""Files written whole or not at all, on any `tf.io.gfile` filesystem (local, gs://, ram://).

A file is written under a temporary name in the same folder and renamed to its final name
only once it is complete, so a kill, a full disk or an exception never leaves a half-written
file under the final name, and never truncates a file that was there before.

TensorFlow is imported only when a function here is called, so light worker processes can
import this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import uuid

TEMPORARY_MARK = ".tmp-"
_NAME_MAX = 255  # bytes in a file name, at most, on ext4, xfs, btrfs and most local disks


def is_remote(path: str) -> bool:
    """Whether `path` names a `tf.io.gfile` filesystem other than the local disk (gs://, ram://)."""
    return "://" in path


def pid_namespace() -> str:
    """This process's pid namespace, `pidns<inode of /proc/self/ns/pid>`, or "" off Linux.

    Containers that share the machine's name (host networking) each number their own
    processes: a pid is checked only from the namespace that numbered it, or a running
    process of another container, whose pid is free here, would look ended.
    """
    with contextlib.suppress(OSError):
        return f"pidns{os.stat('/proc/self/ns/pid').st_ino}"
    return ""


def _host() -> str:
    """This machine's name as temporary names carry it (no `/`), with its `pid_namespace`."""
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64]
    namespace = pid_namespace()
    return f"{host}-{namespace}" if namespace else host


def temporary_path(path: str) -> str:
    """A unique hidden sibling of `path` for writing before the rename
    (`.name.tmp-<hex>.<pid>.<host>`).

    Hidden, so that shell and Python globs such as `data/part-*` never pick up a file that a
    killed writer left behind (`tf.io.gfile.glob` does match it: readers skip `is_temporary`).
    The writer's process id and host let a later write tell a dead writer's leftover from a
    file another process is still writing (`remove_dead_temporaries`).
    """
    folder, name = os.path.split(path)
    temporary = f".{name}{TEMPORARY_MARK}{uuid.uuid4().hex}"
    writer = f".{os.getpid()}.{_host()}"
    # A name too long to carry its writer (up to ~100 bytes more) keeps the short form, never
    # removed by a later write, rather than failing a write whose name fits.
    if len(f"{temporary}{writer}".encode()) <= _NAME_MAX:
        temporary += writer
    return os.path.join(folder, temporary)


def leftover_temporaries(path: str) -> list:
    """Temporary files that killed writers of `path` left behind."""
    import tensorflow as tf

    folder, name = os.path.split(path)
    return tf.io.gfile.glob(os.path.join(folder, f".{name}{TEMPORARY_MARK}*"))


def process_is_alive(pid) -> bool:
    """Whether process `pid` of this machine runs (an unreadable pid counts as running)."""
    if os.name != "posix":
        return True  # Windows' os.kill(pid, 0) does not probe: it ends the process.
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, OverflowError):
        return True  # someone else's process, or not a pid: assume it runs
    return True


def dead_writers_temporaries(path: str) -> list:
    """Leftover temporaries of `path` whose writer was a process of this host that has ended.

    A leftover of a running process, of another host (whose processes cannot be checked) or
    with no writer in its name (written before names carried one) is not listed.
    """
    dead, host = [], _host()
    for leftover in leftover_temporaries(path):
        # <hex>.<pid>.<host>: the host may hold dots, the hex and the pid do not.
        writer = os.path.basename(leftover).rsplit(TEMPORARY_MARK, 1)[1].split(".", 2)
        if len(writer) == 3 and writer[2] == host and writer[1].isdigit():
            if not process_is_alive(writer[1]):
                dead.append(leftover)
    return dead


def remove_dead_temporaries(path: str) -> None:
    """Deletes the files and folders that killed writers of `path` on this host left behind
    (`dead_writers_temporaries`): each kill during a write of a feature cache or an export
    would otherwise leave up to a whole file or SavedModel that no later run removes.
    Errors are ignored: the write that follows does not depend on it."""
    import tensorflow as tf
    from absl import logging

    leftovers = []
    with contextlib.suppress(Exception):
        leftovers = dead_writers_temporaries(path)
    for leftover in leftovers:
        logging.info("Removing %s, left by a write killed midway.", leftover)
        with contextlib.suppress(Exception):
            if tf.io.gfile.isdir(leftover):
                tf.io.gfile.rmtree(leftover)
            else:
                tf.io.gfile.remove(leftover)


def is_temporary(path: str) -> bool:
    """Whether `path` is a leftover of `temporary_path` (a killed writer's file)."""
    return TEMPORARY_MARK in os.path.basename(path)


def makedirs_for(path: str) -> None:
    """Creates the folder that will hold `path` (nothing for a bare file name)."""
    import tensorflow as tf

    folder = os.path.dirname(path)
    if folder:
        tf.io.gfile.makedirs(folder)


def remove_quietly(path: str) -> None:
    """Deletes `path` if it exists; errors are ignored (used on the failure path only)."""
    import tensorflow as tf

    with contextlib.suppress(Exception):
        tf.io.gfile.remove(path)


@contextlib.contextmanager
def atomic_path(path: str):
    """Yields a temporary path to write; renames it to `path` when the block succeeds.

    On an exception the temporary file is removed and `path` is left as it was.

    Example:
        >>> with atomic_path("out/model.ckpt.json") as tmp:
        ...     write_somehow(tmp)
    """
    import tensorflow as tf

    makedirs_for(path)
    remove_dead_temporaries(path)
    temporary = temporary_path(path)
    try:
        yield temporary
        tf.io.gfile.rename(temporary, path, overwrite=True)
    except BaseException:
        remove_quietly(temporary)
        raise


@contextlib.contextmanager
def local_atomic_path(path: str, suffix: str = ""):
    """`atomic_path` for a local file without importing TensorFlow (the HF and Keras weight
    writers): yields `<path without suffix>.tmp-<hex><suffix>` beside it (Keras wants its
    `.weights.h5`), renamed to `path` when the block succeeds, removed on an exception."""
    stem = path[: -len(suffix)] if suffix else path
    temporary = f"{stem}{TEMPORARY_MARK}{uuid.uuid4().hex}{suffix}"
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w"):
    """`tf.io.gfile.GFile(path, mode)`, but written to a temporary name and renamed at the end.

    Args:
        path: the final file name.
        mode: "w" (text) or "wb" (bytes).
    """
    import tensorflow as tf

    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files; mode must be 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as temporary, tf.io.gfile.GFile(temporary, mode) as f:
        yield f


def write_text(path: str, text: str) -> None:
    """Writes `text` to `path` atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def write_json(path: str, content) -> None:
    """Writes `content` as JSON (indent 4, non-ASCII kept, a final newline) atomically.

    The text is made before anything is written, so content that is not JSON leaves `path`
    as it was.
    """
    write_text(path, json.dumps(content, indent=4, ensure_ascii=False) + "\n")


def is_replaceable(path: str, marker: str) -> bool:
    """Whether `atomic_directory` may replace what is at `path`: nothing, an empty folder, or
    a folder holding the file `marker` (what an earlier write of the same kind left there).
    Anything else (a file, a folder of other files) would be deleted by the replacement."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return True
    if not tf.io.gfile.isdir(path):
        return False
    return not tf.io.gfile.listdir(path) or tf.io.gfile.exists(os.path.join(path, marker))


def rename_folder(source: str, target: str) -> None:
    """Renames a folder and everything in it.

    A local folder (a path or a file:// URL) is one rename. Elsewhere the files are renamed
    one by one, as gs:// does itself (an object store has no folders to rename): ram://, and
    any filesystem that renames only the folder's own entry, would leave the files under the
    old name. A failure midway (a lost connection, Ctrl-C, a file already at the target)
    renames back the files moved and removes the folders made at `target`, so each folder is
    left as it was.
    """
    import tensorflow as tf

    if not is_remote(source) or source.startswith("file://"):  # file://: the local disk
        tf.io.gfile.rename(source, target)
        return
    source, target = source.rstrip("/"), target.rstrip("/")
    target_existed = tf.io.gfile.exists(target)
    folders, moved = [], []  # the source's folders; (old name, new name) of each file moved
    try:
        for folder, _, files in tf.io.gfile.walk(source):
            folder = folder.rstrip("/")
            folders.append(folder)
            destination = target + folder[len(source) :]
            tf.io.gfile.makedirs(destination)
            for name in files:
                # Listed before the call: a Ctrl-C during it (a large file on gs://) is raised
                # once the rename is done, and so is a lost reply; putting back a file that
                # did not move fails harmlessly (nothing at the new name, or the old one taken).
                moved.append((f"{folder}/{name}", f"{destination}/{name}"))
                tf.io.gfile.rename(f"{folder}/{name}", f"{destination}/{name}")
        tf.io.gfile.rmtree(source)
    except BaseException:
        # Half moved, `source` would be neither folder, and the files at `target` would stop
        # atomic_directory's rollback from renaming the old folder back over them.
        _put_back(folders, moved, None if target_existed else target)
        raise


def _put_back(folders: list, moved: list, made: str | None) -> None:
    """Undoes a `rename_folder` stopped midway: remakes `folders`, renames each of `moved`
    back, then deletes `made` (the target, when the rename created it). Errors are ignored:
    the rename's own error is the one to raise."""
    import tensorflow as tf

    for folder in folders:
        with contextlib.suppress(Exception):
            tf.io.gfile.makedirs(folder)
    for old_name, new_name in reversed(moved):
        with contextlib.suppress(Exception):
            tf.io.gfile.rename(new_name, old_name)
    if made:
        with contextlib.suppress(Exception):
            tf.io.gfile.rmtree(made)


@contextlib.contextmanager
def atomic_directory(path: str):
    """Yields a hidden temporary folder to fill; it replaces `path` when the block succeeds.

    An existing `path` is moved aside, the new folder renamed into place, and the old one
    deleted, so a reader sees the old folder or the new one, each whole (on local disks; on
    object stores such as gs:// a folder rename moves object by object). On an exception
    the temporary folder is deleted and `path` is left as it was (the old folder is renamed
    back when the new one cannot be renamed into place).

    A local `path` that is a symbolic link (a serving path pointing at a model folder) has its
    target replaced and stays a link: renamed aside and deleted, the link itself would make
    `rmtree` empty the target and then fail on the link, after the new folder is in place.
    """
    import tensorflow as tf

    if not is_remote(path) and os.path.islink(path.rstrip("/")):
        path = os.path.realpath(path)
    makedirs_for(path.rstrip("/"))
    temporary = temporary_path(path.rstrip("/"))
    try:
        yield temporary
        old = None
        if tf.io.gfile.exists(path):
            old = temporary_path(path.rstrip("/"))
            rename_folder(path, old)
        try:
            rename_folder(temporary, path)
        except BaseException:
            if old:  # The old folder goes back: `path` is never left missing by an error.
                rename_folder(old, path)
            raise
        if old:
            tf.io.gfile.rmtree(old)
        # Only now: a writer killed between its two renames left the previous folder aside
        # and none at `path`; that folder is the only whole one until this one is in place.
        remove_dead_temporaries(path.rstrip("/"))
    except BaseException:
        with contextlib.suppress(Exception):
            if tf.io.gfile.exists(temporary):
                tf.io.gfile.rmtree(temporary)
        raise
