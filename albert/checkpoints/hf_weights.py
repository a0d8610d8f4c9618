"""The weights of an HF directory, read as one file: `model.safetensors`, or the shards that
`model.safetensors.index.json` names (what transformers' `save_pretrained(max_shard_size=...)`
writes when the model is larger than a shard: `model-00001-of-00003.safetensors`, ...).

As transformers' own loader, a directory holding `model.safetensors` is read from it even
where an index is there too. Read with `safetensors.numpy`: no torch, no TensorFlow.
"""

from __future__ import annotations

import contextlib
import json
import os

from safetensors import SafetensorError, safe_open

from albert.checkpoints import remote
from albert.checkpoints.table import CheckpointError

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"  # {"weight_map": {tensor name: shard file}}
# torch's pickled weights (transformers' format before safetensors), one file or sharded:
# read here only once saved again as safetensors.
TORCH_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def present(directory: str) -> bool:
    """Whether `directory` (local or remote) holds `model.safetensors` or a shard index."""
    return bool({WEIGHTS_FILE, INDEX_FILE} & _names_in(directory))


def torch_only(directory: str) -> str | None:
    """The name of torch's pickled weights where `directory` (local or remote) holds
    `config.json` and those but no safetensors weights; else None."""
    names = _names_in(directory)
    if "config.json" not in names or {WEIGHTS_FILE, INDEX_FILE} & names:
        return None
    return next((name for name in TORCH_FILES if name in names), None)


def files(directory: str) -> tuple:
    """The weight files of `directory` (local or remote) to copy or read: `model.safetensors`,
    else the index and every shard it names (the single file's name where neither is there,
    for the reader to report missing)."""
    names = _names_in(directory)
    if WEIGHTS_FILE in names or INDEX_FILE not in names:
        return (WEIGHTS_FILE,)
    return (INDEX_FILE, *sorted(set(_weight_map(directory).values())))


def path(directory: str) -> str:
    """The file that names the weights in messages: `model.safetensors`, or the index."""
    return os.path.join(directory, files(directory)[0])


@contextlib.contextmanager
def open_weights(directory: str):
    """Yields the local `directory`'s weights as one reader: `keys()`, `get_slice(name)` and
    `get_tensor(name)`, as a `safetensors.safe_open` handle has.

    Raises:
        CheckpointError: no weights file; an index that is not valid, names a shard that is
            missing, or places a tensor in a shard that does not hold it; a file safetensors
            cannot read.
    """
    names = files(directory)
    if not os.path.isfile(os.path.join(directory, names[0])):
        raise CheckpointError(
            f"No {WEIGHTS_FILE} in {directory}; save the HF model with safe_serialization=True."
        )
    try:
        with contextlib.ExitStack() as stack:
            if names == (WEIGHTS_FILE,):
                yield stack.enter_context(_open(os.path.join(directory, WEIGHTS_FILE)))
                return
            where = _weight_map(directory)
            handles = {}
            for shard in names[1:]:
                shard_path = os.path.join(directory, shard)
                if not os.path.isfile(shard_path):
                    raise CheckpointError(
                        f"{os.path.join(directory, INDEX_FILE)} names the shard {shard}, which "
                        f"is not in {directory}."
                    )
                handles[shard] = stack.enter_context(_open(shard_path))
            for shard, handle in handles.items():
                missing = sorted(
                    set(n for n, s in where.items() if s == shard) - set(handle.keys())
                )
                if missing:
                    raise CheckpointError(
                        f"{os.path.join(directory, INDEX_FILE)} places {missing[0]} in {shard}, "
                        "which does not hold it."
                    )
            yield _Shards({name: handles[shard] for name, shard in where.items()})
    except SafetensorError as e:
        raise CheckpointError(f"Cannot read {path(directory)}: {e}") from None


class _Shards:
    """The shards' handles as one: each tensor read from the shard the index places it in."""

    def __init__(self, handle_of):
        self._handle_of = handle_of  # tensor name -> safe_open handle

    def keys(self):
        return list(self._handle_of)

    def get_slice(self, name):
        return self._handle_of[name].get_slice(name)

    def get_tensor(self, name):
        return self._handle_of[name].get_tensor(name)


def _names_in(directory: str) -> set:
    """The names of the files in `directory` (local or remote; none where it is not a folder).
    Listed, not asked for one by one: on ram://, a stand-in for gs://, a name "exists" where a
    longer one starts with it (model.safetensors, beside model.safetensors.index.json)."""
    if not remote.is_remote(directory):
        return set(os.listdir(directory)) if os.path.isdir(directory) else set()
    import tensorflow as tf  # only for remote paths such as gs://

    try:
        return {name.rstrip("/") for name in tf.io.gfile.listdir(directory)}
    except tf.errors.OpError:  # not there, or not a folder
        return set()


def _open(file_path):
    return safe_open(file_path, framework="np")


def _weight_map(directory: str) -> dict:
    """The index's tensor name -> shard file name (local or remote), checked.

    Raises:
        CheckpointError: not valid JSON, no `weight_map` of names to file names, or a shard
            named by a path rather than a file name in `directory`.
    """
    index = os.path.join(directory, INDEX_FILE)
    if remote.is_remote(directory):  # gs://: read from a local copy, as a local file
        with remote.local_copies(directory, (INDEX_FILE,)) as local:
            return _weight_map(local)
    try:
        with open(index, encoding="utf-8-sig") as f:
            weight_map = json.load(f).get("weight_map")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        raise CheckpointError(f"{index} is not a JSON object; is it a safetensors index?") from None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise CheckpointError(f"{index} has no weight_map of tensor names to shard files.")
    for shard in weight_map.values():
        if os.path.basename(shard) != shard or shard in ("", ".", ".."):
            raise CheckpointError(f"{index} names the shard {shard!r}: not a file name.")
    return weight_map
