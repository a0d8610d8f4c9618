"""One run per output directory: a lock file naming the run that holds it.

`output_dir/run.lock` holds `host = ...`, `pid = ...`, `pid_namespace = ...`, `started = ...`
and `command = ...` lines. A second run on the same directory stops at once with one sentence
naming the holder, instead of both writing checkpoints into the same place.

- Local paths: the file is also `flock`ed while the run lives, so the kernel releases it
  when the process dies however it dies. A lock file whose flock is free was left by a dead
  process: a file from this host is taken over with a warning; one from another host is
  refused (its owner's liveness cannot be checked from here; delete the file if that run
  is dead).
- Other `tf.io.gfile` filesystems (gs://, ...): best effort. There is no atomic
  create-if-absent, so the file is written, read back and checked to be ours; two runs
  starting within the same moment can both pass. A file left by a dead process on this
  host (and pid namespace: containers sharing the host's name number processes apart) is
  taken over; any other one is refused.

The lock is re-entrant within a process (the fine-tuning engine holds it around the
training loop, which takes it too).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import sys

from absl import logging

from albert import fileio
from albert.errors import AlbertError

LOCK_FILE = "run.lock"
_held = {}  # lock path -> [count, file descriptor or None]


class OutputDirLockedError(AlbertError):
    """Another run holds the output directory."""


def _this_run():
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_namespace": fileio.pid_namespace(),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }


def _parse(text):
    lines = [line.split(" = ", 1) for line in text.splitlines() if " = " in line]
    return {key: value for key, value in lines}


def _text(holder):
    return "".join(f"{key} = {value}\n" for key, value in holder.items())


def _refuse(output_dir, path, holder, reason=""):
    who = ", ".join(f"{k} {holder.get(k, '?')}" for k in ("host", "pid", "started"))
    raise OutputDirLockedError(
        f"--output_dir={output_dir} is in use by another run ({who}{reason}); wait for it "
        f"to finish, use another --output_dir, or delete {path} if that run is dead."
    )


def _take_over_warning(path, holder):
    logging.warning(
        "Taking over the stale lock %s of a dead run (host %s, pid %s, started %s).",
        path,
        holder.get("host"),
        holder.get("pid"),
        holder.get("started"),
    )


def _acquire_local(output_dir, path):
    import fcntl

    for _ in range(3):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
            os.close(fd)
            _refuse(output_dir, path, holder)
        try:
            if os.fstat(fd).st_ino != os.stat(path).st_ino:
                os.close(fd)  # the holder removed the file as we opened it: try again
                continue
        except FileNotFoundError:
            os.close(fd)
            continue
        holder = _parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
        if holder:
            if holder.get("host") != socket.gethostname():
                os.close(fd)
                _refuse(output_dir, path, holder, ", on another host, so not checked")
            _take_over_warning(path, holder)
        data = _text(_this_run()).encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        return fd
    raise OutputDirLockedError(f"Could not take the lock {path}; another run keeps replacing it.")


def _acquire_remote(output_dir, path):
    import tensorflow as tf

    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            holder = _parse(f.read())
        same_host = holder.get("host") == socket.gethostname()
        # A lock written before it named a namespace counts as this one's, as it did then.
        namespace = fileio.pid_namespace()
        if same_host and holder.get("pid_namespace", namespace) != namespace:
            _refuse(output_dir, path, holder, ", in another container, so not checked")
        if not same_host or fileio.process_is_alive(holder.get("pid", "")):
            _refuse(output_dir, path, holder)
        _take_over_warning(path, holder)
    mine = _text(_this_run())
    fileio.write_text(path, mine)
    with tf.io.gfile.GFile(path) as f:
        if f.read() != mine:
            with tf.io.gfile.GFile(path) as g:
                _refuse(output_dir, path, _parse(g.read()))


def _release(path, fd):
    if fd is not None:
        import fcntl

        with contextlib.suppress(OSError):
            os.remove(path)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        return
    import tensorflow as tf

    with contextlib.suppress(Exception):
        with tf.io.gfile.GFile(path) as f:
            holder = _parse(f.read())
        if holder.get("pid") == str(os.getpid()) and holder.get("host") == socket.gethostname():
            tf.io.gfile.remove(path)


@contextlib.contextmanager
def output_dir_lock(output_dir, enabled=True):
    """Holds `output_dir/run.lock` for the block (re-entrant; nothing when not `enabled`).

    Args:
        output_dir: the run's directory (created if missing).
        enabled: False on the workers that do not own the directory (non-chief).

    Raises:
        OutputDirLockedError: another live run holds the lock.
    """
    if not enabled:
        yield
        return
    import tensorflow as tf

    tf.io.gfile.makedirs(output_dir)
    path = os.path.join(output_dir, LOCK_FILE)
    if path in _held:
        _held[path][0] += 1
    else:
        local = not fileio.is_remote(output_dir)
        fd = _acquire_local(output_dir, path) if local else _acquire_remote(output_dir, path)
        _held[path] = [1, fd]
    try:
        yield
    finally:
        _held[path][0] -= 1
        if not _held[path][0]:
            _release(path, _held.pop(path)[1])
