"""Which TFRecord file a damaged record of a run came from, found after the run failed.

tf.data's interleaved reader reports a record that fails its checksum as a DataLossError
"corrupted record at <byte offset>" (or "truncated record at <offset>") that names no file:
with hundreds of shards the user cannot tell which one to remove or rebuild. Once such an
error has stopped a run (never before: a normal run reads nothing more), `naming_damaged_file`
reads the files that are larger than the offset, a few at a time, until it finds the one that
fails there, within `ALBERT_DAMAGE_SEARCH_SECONDS` (60 by default), so a run over thousands of
`gs://` shards does not hang in the search; the error becomes one sentence naming the file.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import threading
import time

import tensorflow as tf

SEARCH_SECONDS_ENV = "ALBERT_DAMAGE_SEARCH_SECONDS"
DEFAULT_SEARCH_SECONDS = 60.0
# TFRecord's reader: "corrupted record at 18550" (a checksum fails) or "truncated record at".
_DAMAGED_RECORD = re.compile(r"\b(corrupted|truncated) record at (\d+)")
_READERS = 8  # files read at once (their reads wait on storage, not on the GIL)
_BATCH = 1024  # records read between two looks at the clock
_TOO_SMALL = object()  # a file that ends before the damaged record's offset
_NOT_READ = object()  # a file the search left (out of time, or unreadable)


def search_seconds() -> float:
    """The time budget of a search: `ALBERT_DAMAGE_SEARCH_SECONDS`, or 60 s."""
    try:
        return max(0.0, float(os.environ.get(SEARCH_SECONDS_ENV, DEFAULT_SEARCH_SECONDS)))
    except ValueError:
        return DEFAULT_SEARCH_SECONDS


def damaged_offset(error) -> int | None:
    """The byte offset of a damaged record that `error` reports, or None."""
    found = _DAMAGED_RECORD.search(str(error))
    return int(found.group(2)) if found else None


def _damage(path, offset, deadline, stop):
    """What is wrong with `path`: its reader's "corrupted record at byte N" when it fails,
    None when it reads whole, `_TOO_SMALL` when it is not larger than `offset`, or `_NOT_READ`
    when it cannot be read or time ran out."""
    try:
        if stop.is_set() or time.monotonic() > deadline:
            return _NOT_READ
        if tf.io.gfile.stat(path).length <= offset:  # the damaged record cannot be in it
            return _TOO_SMALL
        for _ in tf.data.TFRecordDataset(path, buffer_size=1 << 20).batch(_BATCH):
            if stop.is_set() or time.monotonic() > deadline:
                return _NOT_READ
    except tf.errors.DataLossError as e:
        found = _DAMAGED_RECORD.search(str(e))
        return f"{found.group(1)} record at byte {found.group(2)}" if found else str(e)
    except tf.errors.OpError:  # gone or unreadable since the run started: not this search's
        return _NOT_READ
    return None


def find_damaged_files(files, offset, seconds):
    """Reads `files` larger than `offset` bytes until one fails at `offset` or time runs out.

    Args:
        files: the paths the failed run read, in the order to search them.
        offset: the byte offset of the damaged record the run reported.
        seconds: the time budget.

    Returns:
        (damaged, read, unread): [(path, "corrupted record at byte N")] of the files found
        damaged (the one that fails at `offset` among them, unless time ran out first); the
        number of files read whole or found damaged; the number of files larger than
        `offset` (or not looked at) left unread.
    """
    deadline = time.monotonic() + seconds
    stop = threading.Event()
    damaged, read, unread = [], 0, 0
    with concurrent.futures.ThreadPoolExecutor(_READERS) as pool:
        results = pool.map(lambda path: _damage(path, offset, deadline, stop), files)
        for path, damage in zip(files, results, strict=True):
            if damage is _TOO_SMALL:
                continue
            if damage is _NOT_READ:
                unread += 1
                continue
            read += 1
            if damage is not None:
                damaged.append((path, damage))
                if damage.endswith(f" at byte {offset}"):
                    stop.set()  # the file this run stopped on: the others need not be read
    return damaged, read, unread


def describe_damage(error, files, source, remedy, seconds=None) -> str | None:
    """The sentence naming the damaged file(s) of `files` that `error` came from, or None when
    `error` reports no damaged record or no file of `files` is damaged.

    Args:
        error: the DataLossError that stopped the run.
        files: the files the run read.
        source: what the files are, for the message when none was found in time (e.g.
            "--input_file").
        remedy: what to do, with "{it}" standing for the file(s), e.g. "remove {it} from
            --input_file".
        seconds: the time budget (default `search_seconds()`).
    """
    offset = damaged_offset(error)
    if offset is None or not files:
        return None
    seconds = search_seconds() if seconds is None else seconds
    damaged, read, unread = find_damaged_files(list(files), offset, seconds)
    if len(damaged) == 1:
        path, damage = damaged[0]
        return f"{path} is damaged ({damage}): {remedy.format(it='it')}."
    if damaged:
        named = ", ".join(f"{path} ({damage})" for path, damage in damaged)
        return f"{named} are damaged: {remedy.format(it='them')}."
    if not unread:
        return None  # every file reads whole: the damage is elsewhere (e.g. a checkpoint)
    damage = _DAMAGED_RECORD.search(str(error))
    return (
        f"A record of {source} is damaged ({damage.group(1)} record at byte {offset}), but "
        f"not in any of the {read} files larger than {offset} bytes checked within "
        f"{seconds:g} s; {unread} of its {len(files)} files were not checked: rerun with "
        f"{SEARCH_SECONDS_ENV} set higher (in seconds) to check them."
    )


@contextlib.contextmanager
def naming_damaged_file(files, source, remedy, error_class):
    """Turns a DataLossError about a damaged record of `files` into `error_class` with the
    sentence of `describe_damage`; any other error passes as it is.

    Args:
        files: the record files the code inside reads (a list, or a function returning one,
            called only after a failure).
        source, remedy: as `describe_damage` takes them.
        error_class: the project error to raise (an `albert.errors.AlbertError`).
    """
    try:
        yield
    except tf.errors.DataLossError as error:
        message = describe_damage(error, files() if callable(files) else files, source, remedy)
        if message is None:
            raise
        raise error_class(message) from error
