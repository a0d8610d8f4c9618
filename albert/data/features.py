"""Fine-tuning features shared by GLUE, SQuAD and RACE: packing, padding, a TFRecord cache.

A feature is a dict of name -> int, float, or a fixed-length list of ints or floats, for
example the original's classifier features:

    input_ids, input_mask, segment_ids   int [max_seq_length], 0-padded
    label_ids                            int (class) or float (regression)
    is_real_example                      int: 1, or 0 for a padding feature

Tokenizing a large task (MNLI, QQP) takes minutes, so `load_or_create_features` writes the
features once as a TFRecord file (`tf.train.Example`, ints as int64, floats as float32) with a
JSON schema beside it, and later runs read that file back. The schema is written last and both
files are moved into place only when complete, so an interrupted run leaves no half cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import tensorflow as tf
from absl import logging

from albert import fileio
from albert.errors import AlbertError

# Bump when the feature layout changes, so old caches are not read as new ones.
CACHE_FORMAT_VERSION = 1
PADDING_FEATURE_NAME = "is_real_example"


class FeatureError(AlbertError):
    """Features that cannot be packed, written or read back (a user-facing error)."""


# --- Packing -------------------------------------------------------------------------


def truncate_pair(ids_a, ids_b, max_length):
    """BERT's rule: drop the last token of the longer segment until both fit.

    When both are equally long, `ids_b` loses a token, so a tie never shortens `ids_a` first.

    Args:
        ids_a, ids_b: lists of token ids (not modified).
        max_length: the most tokens the two may hold together.

    Returns:
        (ids_a, ids_b) truncated copies with len(a) + len(b) <= max_length.
    """
    ids_a, ids_b = list(ids_a), list(ids_b)
    while len(ids_a) + len(ids_b) > max_length:
        if len(ids_a) > len(ids_b):
            ids_a.pop()
        else:
            ids_b.pop()
    return ids_a, ids_b


def pack_segments(ids_a, ids_b, max_seq_length, cls_id, sep_id, pair=None):
    """One or two segments -> `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, 0-padded.

    Segment ids are 0 for `[CLS]`, A and its `[SEP]`, 1 for B and the final `[SEP]`. A single
    segment keeps its first max_seq_length - 2 tokens; a pair is cut by `truncate_pair` to
    max_seq_length - 3 tokens.

    Args:
        ids_a: token ids of the first segment.
        ids_b: token ids of the second segment, or None (or empty) for a single segment.
        max_seq_length: T, the padded length.
        cls_id, sep_id: ids of `[CLS]` and `[SEP]`.
        pair: True packs two segments even when `ids_b` is empty (`[CLS] A [SEP] [SEP]`, as
            the original's RACE always does); None decides by `ids_b`, as its GLUE code.

    Returns:
        dict with `input_ids`, `input_mask`, `segment_ids`: lists of T ints.

    Raises:
        FeatureError: max_seq_length leaves no room for a token of each segment.
    """
    pair = bool(ids_b) if pair is None else pair
    num_special = 3 if pair else 2
    if max_seq_length <= num_special:
        raise FeatureError(
            f"--max_seq_length={max_seq_length} is too small: it must exceed the "
            f"{num_special} special tokens ([CLS], [SEP]) of each input."
        )
    if pair:
        ids_a, ids_b = truncate_pair(ids_a, ids_b or [], max_seq_length - 3)
        input_ids = [cls_id, *ids_a, sep_id, *ids_b, sep_id]
        segment_ids = [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
    else:
        ids_a = list(ids_a)[: max_seq_length - 2]
        input_ids = [cls_id, *ids_a, sep_id]
        segment_ids = [0] * len(input_ids)
    padding = [0] * (max_seq_length - len(input_ids))
    return {
        "input_ids": input_ids + padding,
        "input_mask": [1] * len(input_ids) + padding,
        "segment_ids": segment_ids + padding,
    }


def special_token_ids(tokenizer):
    """(cls_id, sep_id) of a tokenizer whose vocabulary must hold `[CLS]` and `[SEP]`.

    Raises:
        FeatureError: either token is missing from `tokenizer.vocab`.
    """
    vocab = getattr(tokenizer, "vocab", None)
    if vocab is not None:
        missing = [token for token in ("[CLS]", "[SEP]") if token not in vocab]
        if missing:
            raise FeatureError(
                f"The tokenizer's vocabulary has no {' or '.join(missing)}; pass the "
                "vocabulary (--spm_model_file / --vocab_file) the ALBERT model was trained with."
            )
    cls_id, sep_id = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    return cls_id, sep_id


# --- Padding to whole batches ---------------------------------------------------------


def _is_sequence(value):
    return isinstance(value, (list, tuple, np.ndarray))


def _is_float_valued(value):
    values = list(value) if _is_sequence(value) else [value]
    return any(isinstance(v, (float, np.floating)) for v in values)


def padding_feature(like):
    """A feature shaped and typed as `like`, every value 0 and `is_real_example` 0."""
    feature = {}
    for name, value in like.items():
        zero = 0.0 if _is_float_valued(value) else 0
        feature[name] = [zero] * len(value) if _is_sequence(value) else zero
    feature[PADDING_FEATURE_NAME] = 0
    return feature


def pad_features(features, batch_size):
    """Appends padding features until the count is a multiple of `batch_size`.

    Fixed-shape batches (TPU, `drop_remainder=True`) would otherwise drop the last examples
    of an eval or predict set. Padding features carry `is_real_example` 0: weight them 0 in
    metrics and drop their predictions.

    Args:
        features: list of feature dicts, each with `is_real_example` 1 (not modified).
        batch_size: the fixed batch size.

    Returns:
        A new list: `features` followed by 0 to batch_size - 1 padding features.
    """
    if not features:
        raise FeatureError("There are no features to pad; the input split is empty.")
    num_padding = -len(features) % batch_size
    return list(features) + [padding_feature(features[0]) for _ in range(num_padding)]


def pad_dataset(dataset, num_examples, batch_size):
    """`pad_features` for an unbatched `tf.data.Dataset` of feature dicts.

    Args:
        dataset: finite dataset of dicts holding `is_real_example`.
        num_examples: how many elements `dataset` has.
        batch_size: the fixed batch size.

    Returns:
        `dataset` followed by zero-valued elements with `is_real_example` 0, so that its
        length is a multiple of `batch_size`.

    Raises:
        FeatureError: the elements have no `is_real_example`.
    """
    return dataset.concatenate(padding_dataset(dataset.element_spec, -num_examples % batch_size))


def padding_dataset(element_spec, count):
    """`count` zero-valued elements of `element_spec` (a dict holding `is_real_example`,
    which is 0 in them as every other value).

    Raises:
        FeatureError: the elements have no `is_real_example`.
    """
    if PADDING_FEATURE_NAME not in element_spec:
        raise FeatureError(f"The dataset has no {PADDING_FEATURE_NAME!r} to mark padding with.")
    zeros = {name: tf.zeros(spec.shape, spec.dtype) for name, spec in element_spec.items()}
    return tf.data.Dataset.from_tensors(zeros).repeat(count)


# --- Cache --------------------------------------------------------------------------


def file_fingerprint(path, digest=None):
    """Feeds the bytes of `path` into `digest` (a hashlib object, new sha256 if None)."""
    if digest is None:
        digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest


def tokenizer_fingerprint(tokenizer):
    """12 hex digits that change with the tokenizer's model file and `do_lower_case`.

    Args:
        tokenizer: an `albert.tokenization.FullTokenizer` (anything with `spm_model_file` or
            `vocab_file`, and `do_lower_case`).

    Raises:
        FeatureError: the tokenizer names no model file, so a cache could not tell tokenizers
            apart.
    """
    model_file = getattr(tokenizer, "spm_model_file", None) or getattr(
        tokenizer, "vocab_file", None
    )
    if not model_file:
        raise FeatureError(
            "Cannot cache features for a tokenizer without `spm_model_file` or `vocab_file`; "
            "pass no cache directory, or build the tokenizer from its model file."
        )
    digest = hashlib.sha256(f"v{CACHE_FORMAT_VERSION}".encode())
    file_fingerprint(model_file, digest)
    digest.update(f"do_lower_case={bool(getattr(tokenizer, 'do_lower_case', True))}".encode())
    return digest.hexdigest()[:12]


def infer_schema(feature):
    """{name: {"dtype": "int64" | "float32", "shape": [] | [n]}} of one feature dict."""
    schema = {}
    for name, value in sorted(feature.items()):
        schema[name] = {
            "dtype": "float32" if _is_float_valued(value) else "int64",
            "shape": [len(value)] if _is_sequence(value) else [],
        }
    return schema


def _serialize(feature, schema, index):
    """One feature dict -> tf.train.Example bytes, checked against `schema`."""
    if feature.keys() != schema.keys():
        raise FeatureError(
            f"Feature {index} has keys {sorted(feature)}, the first one {sorted(schema)}."
        )
    entries = {}
    for name, spec in schema.items():
        value = feature[name]
        values = list(value) if _is_sequence(value) else [value]
        if len(values) != (spec["shape"] or [1])[0]:
            raise FeatureError(
                f"Feature {index} has {len(values)} values for {name!r}, the first one "
                f"{(spec['shape'] or [1])[0]}; every feature must have the same lengths."
            )
        if spec["dtype"] == "float32":
            entries[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            entries[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    # Deterministic: map entries in key order, so the same features give the same bytes in
    # every process (Python's hash seed changes the order otherwise).
    example = tf.train.Example(features=tf.train.Features(feature=entries))
    return example.SerializeToString(deterministic=True)


def schema_path(records_path):
    """Where the JSON schema of a feature TFRecord file lives."""
    return records_path + ".json"


def write_feature_records(path, features):
    """Writes feature dicts to a TFRecord file and its schema, atomically.

    Args:
        path: the TFRecord file to create (its directory is created if needed).
        features: non-empty list of dicts with the same keys and value lengths.

    Raises:
        FeatureError: no features, or features that differ in keys or lengths.
    """
    if not features:
        raise FeatureError(f"No features to write to {path}; the input split is empty.")
    schema = infer_schema(features[0])
    with fileio.atomic_path(path) as temporary, tf.io.TFRecordWriter(temporary) as writer:
        for index, feature in enumerate(features):
            writer.write(_serialize(feature, schema, index))
    # The schema marks the cache complete, so it is written last; `num_bytes` lets a reader
    # tell a records file cut short (a copy interrupted, a full disk) from a complete one.
    meta = {"num_examples": len(features), "num_bytes": tf.io.gfile.stat(path).length}
    schema_text = json.dumps({**meta, "features": schema}, indent=1)
    fileio.write_text(schema_path(path), schema_text)


def read_feature_records(path, num_shards=1, shard_index=0):
    """A TFRecord file of `write_feature_records` -> (dataset, num_examples).

    Args:
        path: the records file (its schema beside it).
        num_shards, shard_index: read every `num_shards`-th record from `shard_index` on
            (an input host's share), skipped before parsing.

    Returns:
        An unbatched `tf.data.Dataset` of dicts (int64 values as int32, which TPUs need and
        every id fits; floats as float32; shapes as written) and the number of elements in
        the file (all shards).

    Raises:
        FeatureError: the file or its schema is missing.
    """
    if not (tf.io.gfile.exists(path) and tf.io.gfile.exists(schema_path(path))):
        raise FeatureError(f"No feature cache at {path} (or its schema {schema_path(path)}).")
    with tf.io.gfile.GFile(schema_path(path)) as f:
        meta = json.load(f)
    spec = {
        name: tf.io.FixedLenFeature(entry["shape"], tf.as_dtype(entry["dtype"]))
        for name, entry in meta["features"].items()
    }

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}

    dataset = tf.data.TFRecordDataset(path)
    if num_shards > 1:
        dataset = dataset.shard(num_shards, shard_index)
    parse = tf.autograph.experimental.do_not_convert(parse)  # Python branches only
    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset, meta["num_examples"]


def features_to_dataset(features):
    """Feature dicts in memory -> (unbatched `tf.data.Dataset`, count), typed as the cache."""
    if not features:
        raise FeatureError("No features to make a dataset of; the input split is empty.")
    schema = infer_schema(features[0])
    columns = {
        name: np.asarray(
            [feature[name] for feature in features],
            dtype=np.float32 if entry["dtype"] == "float32" else np.int32,
        )
        for name, entry in schema.items()
    }
    return tf.data.Dataset.from_tensor_slices(columns), len(features)


@dataclasses.dataclass
class CachedFeatures:
    """What `load_or_create_features` returns.

    Attributes:
        dataset: unbatched `tf.data.Dataset` of feature dicts.
        num_examples: number of elements of `dataset`.
        from_cache: True when the features were read from an existing cache file.
        path: the cache file, or None when no cache directory was given.
    """

    dataset: tf.data.Dataset
    num_examples: int
    from_cache: bool
    path: str | None


def cache_damage(path) -> str | None:
    """Why the feature cache at `path` cannot be read, or None when it looks intact.

    Cheap checks only: the schema parses, and the records file has the size the schema
    recorded (a cache from before `num_bytes` was recorded is scanned once instead, which
    finds a cut-short file through TFRecord's checksums).
    """
    try:
        with tf.io.gfile.GFile(schema_path(path)) as f:
            meta = json.load(f)
    except ValueError:  # not JSON, or not UTF-8
        meta = None
    if not (
        isinstance(meta, dict)
        and isinstance(meta.get("features"), dict)
        and isinstance(meta.get("num_examples"), int)
    ):
        return f"damaged (its schema {schema_path(path)} is not a complete JSON schema)"
    size = tf.io.gfile.stat(path).length
    if "num_bytes" in meta:
        if size != meta["num_bytes"]:
            return f"truncated ({size} of {meta['num_bytes']} bytes)"
        return None
    try:
        count = sum(1 for _ in tf.data.TFRecordDataset(path))
    except tf.errors.DataLossError:
        return "truncated or corrupted (a record fails its checksum)"
    if count != meta["num_examples"]:
        return f"truncated ({count} of {meta['num_examples']} records)"
    return None


def load_or_create_features(path, create_features):
    """Reads features from the cache file `path`, or creates, writes and reads them.

    Args:
        path: the cache's TFRecord file, or None to keep the features in memory only.
        create_features: function of no arguments returning the list of feature dicts;
            called only when the cache does not hold them yet.

    Returns:
        A `CachedFeatures`. A cache found truncated or damaged (`cache_damage`) is rebuilt,
        with a warning naming it.
    """
    if path is None:
        dataset, count = features_to_dataset(create_features())
        return CachedFeatures(dataset, count, from_cache=False, path=None)
    from_cache = tf.io.gfile.exists(path) and tf.io.gfile.exists(schema_path(path))
    if from_cache:
        damage = cache_damage(path)
        if damage:
            logging.warning("The feature cache %s is %s; rebuilding it.", path, damage)
            from_cache = False
    if not from_cache:
        write_feature_records(path, create_features())
    dataset, count = read_feature_records(path)
    return CachedFeatures(dataset, count, from_cache=from_cache, path=path)
