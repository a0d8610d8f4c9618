"""The metadata sidecar of a SQuAD prediction feature cache.

Post-processing needs each feature's tokens, token -> character map and max-context flags.
`write_metadata` stores them as columns of a NumPy .npz (the original pickled whole
features, which is unsafe to load; this file is read without pickle) and `read_metadata`
rebuilds the features from it without tokenizing, several times faster.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import lzma
import zipfile
import zlib

import numpy as np
import tensorflow as tf

from albert import fileio
from albert.data import features as feature_lib
from albert.data.squad_features import SquadDataError, SquadFeature, pack_window

# Bump when the sidecar's arrays change (`write_metadata`), so an old one is rebuilt.
METADATA_FORMAT_VERSION = 2
# What np.load and zipfile raise on a damaged sidecar: a cut or a bad CRC (BadZipFile,
# EOFError); a damaged zip header that names another compression method or encryption
# (NotImplementedError and RuntimeError, OSError from bz2, zlib.error, lzma.LZMAError); a
# damaged array header (ValueError); an array missing or too short (KeyError, IndexError).
_DAMAGED_METADATA_ERRORS = (
    zipfile.BadZipFile,
    EOFError,
    RuntimeError,
    OSError,
    zlib.error,
    lzma.LZMAError,
    KeyError,
    ValueError,
    IndexError,
)


class MetadataError(SquadDataError):
    """A metadata sidecar that cannot be read back (it is rebuilt, with a warning)."""


# Letters: N windows, P tokens of all windows together, C context tokens of all windows, S
# distinct character spans. The sidecar holds columns, not a record per window: parsing 13k
# records one by one (a tf.data step, a proto, a lookup per token) took longer than tokenizing
# again. Tokens and character spans repeat (questions share a paragraph, windows overlap), so
# each is stored once in a table, and rebuilt features share those strings and tuples.


def _metadata_columns(features) -> dict:
    """What post-processing needs of `features` -> the sidecar's named arrays."""
    tokens, spans = {}, {}  # token, (first, last) character -> its index in the table
    windows, token_index, span_index, max_context = [], [], [], []
    for feature in features:
        positions = sorted(feature.token_to_orig_map)
        doc_offset = positions[0] if positions else len(feature.tokens) - 1
        windows.append(
            (
                feature.unique_id,
                feature.example_index,
                feature.doc_span_index,
                doc_offset,
                len(feature.tokens),
            )
        )
        token_index.extend(tokens.setdefault(token, len(tokens)) for token in feature.tokens)
        span_index.extend(
            spans.setdefault(tuple(feature.token_to_orig_map[i]), len(spans)) for i in positions
        )
        max_context.extend(feature.token_is_max_context[i] for i in positions)
    # The tokens as JSON, which keeps any string exactly (numpy's own strings drop a final
    # NUL); ids are not stored: the tokenizer (in the cache's name) gives them.
    token_table = json.dumps(list(tokens)).encode("utf-8")
    return {
        "format_version": np.asarray(METADATA_FORMAT_VERSION, np.int64),
        "windows": np.asarray(windows, np.int64).reshape(-1, 5),  # [N, 5]
        "token_table": np.frombuffer(token_table, np.uint8),
        "token_index": np.asarray(token_index, np.int32),  # [P]
        "span_table": np.asarray(list(spans), np.int64).reshape(-1, 2),  # [S, 2]
        "span_index": np.asarray(span_index, np.int32),  # [C]
        "max_context": np.asarray(max_context, np.bool_),  # [C]
    }


def _object_array(values) -> np.ndarray:
    """A 1-D object array of `values` (strings or tuples, kept whole)."""
    array = np.empty(len(values), object)
    for i, value in enumerate(values):
        array[i] = value
    return array


def _features_from_columns(columns, tokenizer, max_seq_length) -> list:
    """The sidecar's arrays (`_metadata_columns`) -> the full `SquadFeature`s again."""
    token_table = json.loads(columns["token_table"].tobytes().decode("utf-8"))
    token_index = columns["token_index"]  # [P]
    cls_id, sep_id = feature_lib.special_token_ids(tokenizer)
    # Each distinct token is looked up once, not each of the P tokens (a fifth of the old
    # reload's time).
    ids = np.asarray(tokenizer.convert_tokens_to_ids(token_table), np.int64)[token_index]
    ids = ids.tolist()  # [P]
    tokens = _object_array(token_table)[token_index].tolist()  # [P]
    span_table = [tuple(span) for span in columns["span_table"].tolist()]  # [S]
    spans = _object_array(span_table)[columns["span_index"]].tolist()  # [C]
    max_context = columns["max_context"].tolist()  # [C]
    features, first, first_context = [], 0, 0  # Where the window's tokens start in [P], [C].
    for unique_id, example_index, span_index, doc_offset, num_tokens in columns["windows"].tolist():
        end, context_end = first + num_tokens, first_context + num_tokens - doc_offset - 1
        positions = range(doc_offset, num_tokens - 1)  # Its context tokens.
        features.append(
            SquadFeature(
                unique_id=unique_id,
                example_index=example_index,
                doc_span_index=span_index,
                tokens=tokens[first:end],
                token_to_orig_map=dict(
                    zip(positions, spans[first_context:context_end], strict=True)
                ),
                token_is_max_context=dict(
                    zip(positions, max_context[first_context:context_end], strict=True)
                ),
                # [CLS] query [SEP] context [SEP]
                **pack_window(
                    ids[first + 1 : first + doc_offset - 1],
                    ids[first + doc_offset : end - 1],
                    max_seq_length,
                    cls_id,
                    sep_id,
                ),
            )
        )
        first, first_context = end, context_end
    return features


@contextlib.contextmanager
def _no_garbage_collection():
    """Pauses CPython's cyclic garbage collector: building millions of small lists, dicts and
    tuples at once (none in a cycle) makes it scan them again and again, ~1.6x the time of
    `_features_from_columns` (one collection when it resumes scans them once)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def metadata_path(records_path: str) -> str:
    """The sidecar of a prediction feature cache."""
    return records_path[: -len(".tfrecord")] + ".meta.npz"


def write_metadata(path: str, features) -> None:
    """Writes the post-processing metadata of `features` to an .npz file, atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, **_metadata_columns(features))  # No dates: the same bytes each time.
    fileio.write_bytes(path, buffer.getvalue())


def read_metadata(path: str, tokenizer, max_seq_length: int) -> list:
    """The `SquadFeature`s of a sidecar written by `write_metadata`.

    Raises:
        MetadataError: the file is cut short, damaged or of another format version.
    """
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as columns, _no_garbage_collection():
            version = int(columns["format_version"])
            if version == METADATA_FORMAT_VERSION:
                return _features_from_columns(columns, tokenizer, max_seq_length)
    except _DAMAGED_METADATA_ERRORS as e:
        raise MetadataError(f"{path} is truncated or damaged ({e})") from None
    raise MetadataError(f"{path} has format version {version}, not {METADATA_FORMAT_VERSION}")
