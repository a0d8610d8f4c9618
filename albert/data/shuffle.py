"""A deterministic global shuffle of pretraining instances in bounded memory.

The original `create_pretraining_data.py` shuffles every instance of the corpus in memory
before writing, so any window of its output is a random sample of the corpus. We give the same
statistics without holding the corpus:

1. Every instance gets a 64-bit key drawn from a generator seeded with (random seed, input
   file as given, unit, dupe pass); the key of the i-th instance of a pass is the i-th draw.
   Keys are uniform, and the key alone decides where the instance goes.
2. Scatter: the high 32 bits of the key pick one of `num_shards * buckets_per_shard` buckets;
   instances are appended to that bucket's temporary file as they are made.
3. Gather: shard s is the concatenation of its buckets (s * buckets_per_shard ...), each sorted
   by (key, record bytes). Bucket b of shard s covers a contiguous range of keys, so each shard
   is sorted by key: a uniformly random permutation of its instances.

The shard of a key is `floor(high * num_shards / 2**32)` whatever the bucket count, so the
output bytes depend only on the flags and the seed, never on the number of workers, the
bucket count (which only bounds memory: one bucket is held at a time) or the engine (the
local processes or Apache Beam, see `albert.data.beam_pipeline`).

No TensorFlow here: worker processes compute keys, and only the writer imports TensorFlow.
"""

from __future__ import annotations

import hashlib
import math
import os
import struct

import numpy as np

# Each bucket entry: key (uint64), record length (uint32), then the record bytes.
_ENTRY_HEADER = struct.Struct("<QI")
# Serialized bytes per character of input text, per dupe pass: an over-estimate (a seq-128
# record is ~0.6-0.8 KB for ~500 characters of text), so buckets come out smaller, not larger.
BYTES_PER_INPUT_CHAR = 2.0
DEFAULT_BUCKET_BYTES = 64 << 20


def pass_seed(random_seed: int, path: str, unit_index: int, dupe: int) -> int:
    """The 128-bit seed of one dupe pass's keys (distinct from the unit's masking seed)."""
    text = f"shuffle\0{random_seed}\0{path}\0{unit_index}\0{dupe}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:16], "little")


def instance_keys(random_seed: int, path: str, unit_index: int, dupe: int, count: int):
    """The shuffle keys of the `count` instances of one pass: uint64 [count]."""
    rng = np.random.default_rng(pass_seed(random_seed, path, unit_index, dupe))
    return rng.integers(0, 2**64, size=count, dtype=np.uint64, endpoint=False)


def bucket_of(keys, num_buckets: int):
    """Keys -> bucket index in [0, num_buckets): uniform, increasing with the key."""
    high = np.asarray(keys, dtype=np.uint64) >> np.uint64(32)
    return (high * np.uint64(num_buckets)) >> np.uint64(32)


def shard_of(keys, num_shards: int):
    """Keys -> output shard; equal to bucket_of(keys, n * k) // k for every k."""
    return bucket_of(keys, num_shards)


def buckets_per_shard(input_bytes: int, dupe_factor: int, num_shards: int, bucket_bytes: int):
    """How many buckets each shard needs so that one bucket is about `bucket_bytes` or less.

    Args:
        input_bytes: total size of the input text files.
        dupe_factor: passes over the input.
        num_shards: output files.
        bucket_bytes: the memory one bucket may take when it is sorted.
    """
    estimate = input_bytes * dupe_factor * BYTES_PER_INPUT_CHAR
    per_shard = estimate / max(num_shards, 1)
    return max(1, math.ceil(per_shard / max(bucket_bytes, 1)))


def sort_entries(entries):
    """[(key, record)] -> the same sorted by key, then record bytes (a total order)."""
    return sorted(entries)


class BucketWriter:
    """Appends (key, record) entries to per-bucket files, buffering up to `buffer_bytes`.

    Args:
        directory: a local folder for the bucket files (created if needed).
        num_buckets: buckets in all.
        buffer_bytes: entries held in memory before every buffered bucket is appended to disk.
    """

    def __init__(self, directory: str, num_buckets: int, buffer_bytes: int = 32 << 20):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.num_buckets = num_buckets
        self.buffer_bytes = buffer_bytes
        self._buffers = {}
        self._buffered = 0
        self.entries = 0

    def path(self, bucket: int) -> str:
        return os.path.join(self.directory, f"bucket-{bucket:06d}")

    def add(self, keys, records) -> None:
        """Adds one pass: keys uint64 [M] and M record bytes."""
        for key, bucket, record in zip(
            keys.tolist(), bucket_of(keys, self.num_buckets).tolist(), records, strict=True
        ):
            self._buffers.setdefault(bucket, []).append(
                _ENTRY_HEADER.pack(key, len(record)) + record
            )
            self._buffered += len(record) + _ENTRY_HEADER.size
        self.entries += len(records)
        if self._buffered >= self.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        for bucket, chunks in sorted(self._buffers.items()):
            with open(self.path(bucket), "ab") as f:
                f.write(b"".join(chunks))
        self._buffers.clear()
        self._buffered = 0


def read_bucket(path: str) -> list:
    """A bucket file -> [(key, record)] in file order ([] when the bucket got nothing)."""
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    entries = []
    offset = 0
    while offset < len(data):
        key, length = _ENTRY_HEADER.unpack_from(data, offset)
        offset += _ENTRY_HEADER.size
        entries.append((key, data[offset : offset + length]))
        offset += length
    return entries
