"""One sentence for each failure a user can act on, for the command-line entry points.

`describe_failure` turns an exception into the line a CLI prints as `prog: error: <line>`:
the project's own errors (`albert.errors.AlbertError`) as they are, and the common
environmental failures, which otherwise surface as long TensorFlow or Python tracebacks, as a
sentence naming the file and what to do:

    tf.errors.DataLossError                  a record, cache or checkpoint is corrupted
                                             (a damaged record of a pretraining shard or
                                             feature cache, whose error names no file, is
                                             named by `albert.data.record_damage` first)
    OSError ENOSPC, "No space left"          the disk is full
    OSError EACCES/EPERM/EROFS,
    tf.errors.PermissionDeniedError          the output folder is read-only or not writable
    "is not a directory", OSError ENOTDIR    a folder to write (--output_dir, --cached_dir)
                                             is an existing file
    InvalidArgumentError "indices ... not in [0, V)" from an embedding lookup
                                             token ids beyond the config's vocab_size
    InvalidArgumentError from ParseExample   a record past the first of its file (the one
                                             `albert.data.records` checks) unlike the spec
    InvalidArgumentError "Bad pretraining record: ..."
                                             a masked position, segment id, label or
                                             weight the model cannot use
    ResourceExhaustedError "OOM when allocating", "Out of memory while trying to allocate",
    "Failed to allocate request"             the device (or XLA on it) ran out of memory
    UnavailableError "Collective ops is aborted"
                                             another worker of a multi-worker run died or
                                             became unreachable (every worker must restart)

Anything else is a bug or an unforeseen failure and keeps its traceback. The traceback of a
described failure too is shown with `--verbosity=1` (or higher) or `ALBERT_TRACEBACK=1`.
"""

from __future__ import annotations

import errno
import os
import re

from albert.errors import AlbertError

TRACEBACK_ENV = "ALBERT_TRACEBACK"
_NO_SPACE = "No space left on device"
_READ_ONLY = "Read-only file system"
# Where TensorFlow names a file in an error message: an absolute or gs:// style path.
# It starts a word: the "/sub" of a relative "ro/sub" is not a path of its own.
_PATH = re.compile(r"(?<![^\s'\"(\[{=])((?:[a-z][a-z0-9+.-]*://|/)[^\s:;,'\"\[\]{}]+)")
# `albert.data.records.check_record_values`: "[Bad pretraining record: its ... made for).]".
_BAD_RECORD = re.compile(r"Bad pretraining record: (.*?)\](?:\s|$)")
# tf.io.parse_example on a record unlike the spec: "Name: <unknown>, Key: input_ids, Index: 1.
# Number of int64 values != expected. ..." or "..., Feature: x (data type: float) is required".
_UNPARSABLE = re.compile(r"Name: [^,\n]*, ((?:Key|Feature): [^\n]*)")
# A collective (a step's all-reduce, a barrier) that a dead or unreachable worker broke off.
_PEER_LOST = "Collective ops is aborted"
# The allocator's "OOM when allocating tensor with shape[...]" and XLA's "Out of memory while
# trying to allocate 4.00GiB." (a ResourceExhaustedError can also be a quota, which these are not).
# XLA's GPU allocator says "Failed to allocate request for 4.00GiB (4294967296B) on device".
_OUT_OF_MEMORY = re.compile(
    r"\bOOM when allocating|\bout of memory\b|\bfailed to allocate request\b", re.IGNORECASE
)
# An error of several devices (MirroredStrategy's replicas): "2 root error(s) found.", then
# one part each, "  (0) RESOURCE_EXHAUSTED:  OOM when allocating ...".
_ROOT_ERRORS = re.compile(r"^\d+ root error\(s\) found")
_ROOT_ERROR_PART = re.compile(r"^\s*\(\d+\) [A-Z_]+:\s*(.*)")
# tf.gather / embedding lookup: "indices[3,5] = 1200 is not in [0, 1000)".
_OUT_OF_RANGE = re.compile(r"indices\[[\d,]*\] = (-?\d+) is not in \[0, (\d+)\)")


def traceback_requested(verbosity: int | None = None) -> bool:
    """Whether to show tracebacks: `--verbosity` of 1 or more, or `ALBERT_TRACEBACK=1`."""
    if os.environ.get(TRACEBACK_ENV, "").strip() not in ("", "0"):
        return True
    return verbosity is not None and verbosity >= 1


def _first_line(message: str) -> str:
    """TensorFlow's message without its `{{function_node ...}}` prefix and `[Op:...]` tail,
    and, for an error raised inside a `tf.function` ("Graph execution error:" and the Python
    stack that defined the node), the op's own message after that stack; for an error of
    several devices ("2 root error(s) found."), the first device's message."""
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(message)).strip()
    lines = every_line = message.splitlines()
    if lines and lines[0].startswith("Graph execution error"):
        own = [
            line
            for line in lines[1:]
            if line.strip()
            and not line.startswith((" ", "\t"))
            and not line.startswith("Detected at node")
        ]
        lines = own or lines
    if lines and _ROOT_ERRORS.match(lines[0]):
        # The first device's own message, not the count of devices that failed.
        parts = [found.group(1) for found in map(_ROOT_ERROR_PART.match, every_line) if found]
        lines = parts or lines
    message = re.sub(r"\s*\[Op:[^\]]*\].*$", "", lines[0] if lines else "")
    return message.strip()


def _named_file(exception: BaseException) -> str | None:
    filename = getattr(exception, "filename", None)
    if filename:
        return str(filename)
    # Device names such as /job:localhost/replica:0 are not files.
    for found in _PATH.finditer(_first_line(str(exception))):
        if not found.group(1).startswith("/job"):
            return found.group(1)
    return None


def _class_named(exception, name):
    return any(cls.__name__ == name for cls in type(exception).__mro__)


def describe_failure(exception: BaseException) -> str | None:
    """The one-sentence message of a failure the user can act on, or None for a bug.

    Args:
        exception: what the entry point caught.

    Returns:
        The message to print after `prog: error: `, or None to let the traceback through.
    """
    if isinstance(exception, AlbertError):
        return str(exception)
    text = str(exception)
    file = _named_file(exception)
    where = f" ({file})" if file else ""
    # TensorFlow errors are matched by class name so that this module stays TF-free.
    if _class_named(exception, "DataLossError"):
        subject = file or "A TFRecord, feature-cache or checkpoint file this run reads"
        return (
            f"{subject} is corrupted or truncated ({_first_line(text)}); rebuild it: rerun "
            "create_pretraining_data, delete the --cached_dir feature cache, or restore the "
            "checkpoint."
        )
    code = getattr(exception, "errno", None)
    if code == errno.ENOSPC or _NO_SPACE in text:
        return (
            f"No space left on the disk while writing{where}; free some space or point "
            "--output_dir (and --cached_dir) at a disk with room, then rerun to resume."
        )
    read_only = code == errno.EROFS or _READ_ONLY in text
    if (
        read_only
        or code in (errno.EACCES, errno.EPERM)
        or _class_named(exception, "PermissionDeniedError")
    ):
        reason = "is on a read-only file system" if read_only else "is not writable"
        return (
            f"{file or 'The output location'} {reason} (permission denied); point the "
            "output flag (--output_dir, --output_file or --output) at a folder you can write to, "
            "or fix its permissions."
        )
    if code == errno.ENOTDIR or (
        _class_named(exception, "FailedPreconditionError") and "is not a directory" in text
    ):
        return (
            f"A folder this run writes ({file or 'an output folder'}) is an existing file, or "
            "lies under one; point --output_dir (or --cached_dir, --export_dir) at a folder, "
            "or move the file away."
        )
    unparsable = _UNPARSABLE.search(text)
    if _class_named(exception, "InvalidArgumentError") and unparsable and "ParseExample" in text:
        detail = " ".join(unparsable.group(1).split()).rstrip(".")
        return (
            f"A record of --input_file (or --eval_input_file) is unlike the first record of "
            f"its file ({detail}); every record must hold the same features and lengths: "
            "rebuild the records with create_pretraining_data."
        )
    bad_record = _BAD_RECORD.search(text)
    if _class_named(exception, "InvalidArgumentError") and bad_record:
        return f"A record of --input_file (or --eval_input_file) is bad: {bad_record.group(1)}"
    if _class_named(exception, "UnavailableError") and _PEER_LOST in text:
        # MultiWorkerMirroredStrategy cannot go on with fewer workers: the survivors' steps,
        # barriers and evaluations all wait on the lost one.
        detail = _first_line(text).rstrip(":")
        return (
            f"Lost contact with another worker of the cluster ({detail}): a worker "
            "stopped or its host became unreachable. Stop every worker still running, then "
            "rerun the same command on each: training resumes from the last checkpoint."
        )
    if _class_named(exception, "ResourceExhaustedError") and _OUT_OF_MEMORY.search(text):
        # ALBERT shares its layers' weights, not their activations: a base model needs BERT-base's
        # activation memory, the most common surprise of its users.
        detail = _first_line(text).split(" by allocator ")[0].rstrip(". ")
        return (
            f"The device ran out of memory ({detail}). ALBERT's activations are as large as "
            "BERT's of the same hidden size, whatever its parameter count: lower the batch of "
            "the phase that failed (--train_batch_size, --eval_batch_size, "
            "--predict_batch_size) or --max_seq_length, keep the global training batch with "
            "--gradient_accumulation_steps, or use --mixed_precision=bfloat16."
        )
    found = _OUT_OF_RANGE.search(text)
    if _class_named(exception, "InvalidArgumentError") and found:
        return (
            f"A token id ({found.group(1)}) is outside the model's vocabulary of "
            f"{found.group(2)} (the config's vocab_size): the data was tokenized with a "
            "larger vocabulary; use the albert_config.json that goes with --spm_model_file "
            "(or rebuild the data with the model's vocabulary)."
        )
    return None
