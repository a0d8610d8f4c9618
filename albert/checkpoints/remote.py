"""HF and Keras checkpoints in remote folders (gs://, or any `tf.io.gfile` path with `://`).

safetensors, h5py and Keras read and write local files only. A remote folder's few files are
copied into a local temporary folder to be read (`local_copies`), and written into one first,
then copied up, each whole (`written_locally`); the temporary folder is always removed, so no
local folder named `gs:` (what `os.makedirs("gs://...")` makes) ever appears. TensorFlow is
imported only for remote paths: local ones never reach it here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile

from albert import fileio
from albert.checkpoints.table import CheckpointError
from albert.fileio import is_remote


def isfile(path: str) -> bool:
    """`os.path.isfile` of a local path; whether a remote one exists (never `isdir`: on ram://
    and some object stores every path prefix "is" a directory)."""
    if not is_remote(path):
        return os.path.isfile(path)
    import tensorflow as tf  # only for remote paths such as gs://

    return tf.io.gfile.exists(path)


def exists(path: str) -> bool:
    """`os.path.exists` of a local path; `tf.io.gfile.exists` of a remote one (a folder on an
    object store exists while it holds a file)."""
    if not is_remote(path):
        return os.path.exists(path)
    import tensorflow as tf  # only for remote paths such as gs://

    return tf.io.gfile.exists(path)


_shared = None  # remote folder -> its local copy, inside `shared_copies`


@contextlib.contextmanager
def shared_copies():
    """Within the block, `local_copies` downloads each remote file once: a conversion reads a
    checkpoint's weights for their shapes, then to load them (0.9 GB at xxlarge). The copies
    are removed at the end of the outermost block."""
    global _shared
    if _shared is not None:
        yield
        return
    _shared = {}
    try:
        yield
    finally:
        for local in _shared.values():
            shutil.rmtree(local, ignore_errors=True)
        _shared = None


@contextlib.contextmanager
def local_copies(folder: str, names):
    """Yields a local temporary folder holding copies of those of `names` that the remote
    `folder` holds (a missing one is left for the reader to report); removed afterwards,
    or at the end of the enclosing `shared_copies` block, which reuses them.

    A CheckpointError raised in the block names `folder`, not the local copy.
    """
    import tensorflow as tf  # only for remote paths such as gs://

    folder = folder.rstrip("/")
    shared = _shared is not None
    local = _shared.get(folder) if shared else None
    if local is None:
        local = tempfile.mkdtemp(prefix="albert-checkpoint-")
        if shared:
            _shared[folder] = local
    try:
        for name in names:
            copied = os.path.isfile(os.path.join(local, name))
            if not copied and tf.io.gfile.exists(f"{folder}/{name}"):
                # Renamed when whole: a shared copy cut off midway is downloaded again.
                with fileio.local_atomic_path(os.path.join(local, name)) as temporary:
                    tf.io.gfile.copy(f"{folder}/{name}", temporary)
        with _naming(local, folder):
            yield local
    finally:
        if not shared:
            shutil.rmtree(local, ignore_errors=True)


@contextlib.contextmanager
def written_locally(folder: str, names):
    """Yields a local temporary folder to write into; when the block succeeds, those of
    `names` it holds are copied into the remote `folder` in that order, each under a
    temporary name renamed when complete (`fileio.atomic_path`). Removed afterwards.

    A CheckpointError raised in the block names `folder`, not the local one.
    """
    import tensorflow as tf  # only for remote paths such as gs://

    folder = folder.rstrip("/")
    local = tempfile.mkdtemp(prefix="albert-checkpoint-")
    try:
        with _naming(local, folder):
            yield local
        if _shared and folder in _shared:  # Its copies are out of date from here on.
            shutil.rmtree(_shared.pop(folder), ignore_errors=True)
        for name in names:
            if os.path.isfile(os.path.join(local, name)):
                with fileio.atomic_path(f"{folder}/{name}") as temporary:
                    tf.io.gfile.copy(os.path.join(local, name), temporary, overwrite=True)
    finally:
        shutil.rmtree(local, ignore_errors=True)


def renamed(result, local: str, folder: str):
    """The LoadResult `result` of the copy in `local`, naming the remote `folder` instead."""
    return dataclasses.replace(result, path=result.path.replace(local, folder.rstrip("/"), 1))


class _RenamingFilter:
    """A logging filter that writes `folder` where a record names the local copy `local`."""

    def __init__(self, local: str, folder: str):
        self.local, self.folder = local, folder

    def filter(self, record):
        message = record.getMessage()
        if self.local in message:
            record.msg, record.args = message.replace(self.local, self.folder), None
        return True


@contextlib.contextmanager
def _naming(local: str, folder: str):
    """Re-raises a CheckpointError of the block, and rewrites its absl log lines ("holds no
    pooler"), with `local` replaced by `folder`: the user named the remote folder."""
    from absl import logging

    logger = logging.get_absl_logger()
    renaming = _RenamingFilter(local, folder)
    logger.addFilter(renaming)
    try:
        yield
    except CheckpointError as e:
        raise type(e)(str(e).replace(local, folder)) from None
    finally:
        logger.removeFilter(renaming)
