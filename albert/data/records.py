"""The pretraining TFRecord schema (the original's feature names), its writer and reader.

Every feature is written exactly as the original `create_pretraining_data.py` writes it, so
files made by either project are read by both:

    input_ids, input_mask, segment_ids, token_boundary   int64 [max_seq_length], 0-padded
    masked_lm_positions, masked_lm_ids                   int64 [max_predictions_per_seq]
    masked_lm_weights                                    float [max_predictions_per_seq]
    next_sentence_labels                                 int64 [1] (the SOP label)

The reader adds `is_real_example` (int32 [B]): 1 for every record, 0 for the padding records
that give every input pipeline the same number of full eval batches (their
`masked_lm_weights` are 0 too, so no loss or metric counts them).
"""

from __future__ import annotations

import os

import tensorflow as tf
from absl import logging

from albert.errors import AlbertError

SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids", "token_boundary")
PREDICTION_FEATURES = ("masked_lm_positions", "masked_lm_ids")


class RecordError(AlbertError):
    """Input records that do not exist or do not match the flags."""


def _int64_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _float_feature(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def serialize_instance(
    input_ids,
    segment_ids,
    token_boundary,
    masked_lm_positions,
    masked_lm_ids,
    next_sentence_label,
    max_seq_length,
    max_predictions_per_seq,
):
    """One training instance -> serialized tf.train.Example bytes, padded as the original.

    Args:
        input_ids, segment_ids, token_boundary: sequences of ints, length <= max_seq_length.
        masked_lm_positions, masked_lm_ids: sequences of ints, length <= max_predictions_per_seq.
        next_sentence_label: 0 (original order) or 1 (swapped / random next).

    Returns:
        bytes of a serialized tf.train.Example.
    """
    if len(input_ids) > max_seq_length or len(masked_lm_positions) > max_predictions_per_seq:
        raise RecordError(
            f"Instance with {len(input_ids)} tokens and {len(masked_lm_positions)} predictions "
            f"exceeds max_seq_length={max_seq_length} / "
            f"max_predictions_per_seq={max_predictions_per_seq}."
        )
    seq_pad = [0] * (max_seq_length - len(input_ids))
    pred_pad = [0] * (max_predictions_per_seq - len(masked_lm_positions))
    features = {
        "input_ids": _int64_feature(list(input_ids) + seq_pad),
        "input_mask": _int64_feature([1] * len(input_ids) + seq_pad),
        "segment_ids": _int64_feature(list(segment_ids) + seq_pad),
        "token_boundary": _int64_feature(list(token_boundary) + seq_pad),
        "masked_lm_positions": _int64_feature(list(masked_lm_positions) + pred_pad),
        "masked_lm_ids": _int64_feature(list(masked_lm_ids) + pred_pad),
        "masked_lm_weights": _float_feature(
            [1.0] * len(masked_lm_positions) + [0.0] * len(pred_pad)
        ),
        "next_sentence_labels": _int64_feature([next_sentence_label]),
    }
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString(deterministic=True)  # the same bytes in every process


def feature_spec(max_seq_length, max_predictions_per_seq):
    """The tf.io parsing spec for one pretraining record."""
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in SEQUENCE_FEATURES}
    for name in PREDICTION_FEATURES:
        spec[name] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64)
    spec["masked_lm_weights"] = tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32)
    spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    return spec


def parse_examples(serialized, max_seq_length, max_predictions_per_seq):
    """Batch of serialized records [B] -> dict of int32 / float32 tensors.

    The original's older files have no `token_boundary`; it is not needed for training, so it
    is dropped here and records with or without it both parse. `is_real_example` [B] is 1
    unless the record says otherwise (only `padding_record` does).
    """
    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    del spec["token_boundary"]
    spec[IS_REAL_EXAMPLE] = tf.io.FixedLenFeature([], tf.int64, default_value=1)
    features = tf.io.parse_example(serialized, spec)
    # int64 is slow or unsupported on TPU; every id fits int32.
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in features.items()}


IS_REAL_EXAMPLE = "is_real_example"


def padding_record(max_seq_length, max_predictions_per_seq):
    """A serialized record of zeros with `masked_lm_weights` 0 and `is_real_example` 0: it
    fills the last eval batches of a pipeline without counting in any loss or metric."""
    example = tf.train.Example.FromString(
        serialize_instance([], [], [], [], [], 0, max_seq_length, max_predictions_per_seq)
    )
    example.features.feature[IS_REAL_EXAMPLE].int64_list.value.append(0)
    return example.SerializeToString(deterministic=True)


def expand_file_patterns(patterns):
    """Comma-separated globs (or a list of them) -> sorted list of files; errors if none.

    A folder given by name is an error (reading it would fail inside tf.data). Hidden names
    (a leading ".") are left out: they are the temporary files and folders of
    writers that are running or were killed (`albert.fileio`), never finished data.
    """
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p.strip()]
    files = []
    for pattern in patterns:
        matched = tf.io.gfile.glob(pattern.strip())
        hidden = [m for m in matched if os.path.basename(m.rstrip("/")).startswith(".")]
        if hidden:
            logging.warning(
                "Skipping %d hidden files matching %r (temporary files of a writer), e.g. %s.",
                len(hidden),
                pattern,
                hidden[0],
            )
        matched = [m for m in matched if m not in hidden]
        if not matched:
            raise RecordError(f"No input file matches {pattern!r}.")
        # A path without wildcards may name a folder (one stat; a glob's matches are not
        # stat-ed, which would cost a request per shard on gs://).
        if not any(c in pattern for c in "*?[") and tf.io.gfile.isdir(matched[0]):
            raise RecordError(
                f"{matched[0]} is a folder; pass its files, e.g. "
                f"--input_file={matched[0].rstrip('/')}/*."
            )
        files.extend(matched)
    return sorted(set(files))


# (files, max_seq_length, max_predictions_per_seq) found to match -> the files with records.
_CHECKED = {}


def check_record_shapes(files, max_seq_length, max_predictions_per_seq):
    """Reads the first record of every file and says clearly when its lengths do not match
    the flags (a mismatch would otherwise fail deep in the input pipeline, mid-run).

    Empty files are skipped: a small corpus written to many shards leaves some empty. Files
    are opened a few at a time in parallel, so thousands of `gs://` shards take seconds, and a
    set of files that matched is not read again (every host's pipeline and every evaluation
    call this).

    Returns:
        The files that hold records, in the order given.

    Raises:
        RecordError: a file that does not hold pretraining records or holds records of
            other lengths, or no record in any file.
    """
    key = (tuple(files), max_seq_length, max_predictions_per_seq)
    if key in _CHECKED:  # Each host's pipeline, every evaluation: read the files once.
        return _CHECKED[key]
    firsts = tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda path: (
            tf.data.TFRecordDataset(path, buffer_size=1 << 16)
            .take(1)
            .map(lambda record: (path, record))
        ),
        cycle_length=16,
        num_parallel_calls=16,
        deterministic=True,
    )
    with_records = set()
    for path, record in _first_records(firsts, files):
        with_records.add(path)
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        if "input_ids" not in feature or "masked_lm_positions" not in feature:
            raise RecordError(f"{path} does not hold ALBERT pretraining records.")
        problem = _schema_problem(feature, max_seq_length, max_predictions_per_seq)
        if problem:  # Before the lengths: a float input_ids has no int64 values to count.
            raise RecordError(
                _schema_message(path, problem, max_seq_length, max_predictions_per_seq)
            )
        seq = len(feature["input_ids"].int64_list.value)
        preds = len(feature["masked_lm_positions"].int64_list.value)
        if seq != max_seq_length or preds != max_predictions_per_seq:
            raise RecordError(
                f"{path} holds records with max_seq_length={seq} and "
                f"max_predictions_per_seq={preds}, but the flags say {max_seq_length} and "
                f"{max_predictions_per_seq}; pass the values the data was created with."
            )
        problem = _schema_problem(feature, max_seq_length, max_predictions_per_seq, lengths=True)
        if problem:
            raise RecordError(
                _schema_message(path, problem, max_seq_length, max_predictions_per_seq)
            )
        _warn_mask_unlike_tokens(path, feature)
    if not with_records:
        raise RecordError(
            f"{files[0]} holds no records"
            + (f" (nor do the other {len(files) - 1} files)." if len(files) > 1 else ".")
        )
    _CHECKED[key] = [path for path in files if path in with_records]
    return _CHECKED[key]


def _schema_problem(feature, max_seq_length, max_predictions_per_seq, lengths=False):
    """What is wrong with one record's features against `feature_spec`, or None: a missing
    feature or one of the wrong kind (int64 / float), or with `lengths`, one of the wrong
    length.

    Without this, such a record passes the length check of `input_ids` and
    `masked_lm_positions` and fails later inside the input pipeline, as a TensorFlow
    traceback that names no file. `token_boundary` is not read (`parse_examples`), so it
    is not checked.
    """
    for name, spec in feature_spec(max_seq_length, max_predictions_per_seq).items():
        if name == "token_boundary":
            continue
        if name not in feature:
            return f"feature {name} is missing"
        kind = "float_list" if spec.dtype == tf.float32 else "int64_list"
        written = feature[name].WhichOneof("kind")
        if written != kind:
            return f"{name} is {(written or 'empty').replace('_list', '')}, not {kind[:-5]}"
        length = len(getattr(feature[name], kind).value)
        if lengths and length != spec.shape[0]:
            return f"{name} holds {length} values, not {spec.shape[0]}"
    return None


def _warn_mask_unlike_tokens(path, feature):
    """Warns when the first record's input_mask is not 1 for each token and 0 for the
    padding (id 0) after them, as create_pretraining_data writes it.

    The model attends where input_mask is 1, as the original does with whatever mask a
    record holds (so this is no error); records from another tool whose mask covers the
    padding, or none of the tokens, would otherwise train on it without a word.
    """
    mask = list(feature["input_mask"].int64_list.value)
    ids = feature["input_ids"].int64_list.value
    # The tokens end at the last non-zero id ([SEP]); padding ids are 0.
    length = max((i + 1 for i, token in enumerate(ids) if token), default=0)
    if mask == [1] * length + [0] * (len(mask) - length):
        return
    logging.warning(
        "%s: the input_mask of its first record is not 1 for each of its %d tokens and 0 for "
        "the padding after them (it holds %d ones); the model attends where it is 1, as the "
        "original does. Check how these records were made.",
        path,
        length,
        sum(1 for m in mask if m),
    )


def _schema_message(path, problem, max_seq_length, max_predictions_per_seq):
    return (
        f"{path} holds records whose {problem}; pretraining records hold int64 "
        f"{', '.join(SEQUENCE_FEATURES[:3])} [{max_seq_length}], "
        f"{', '.join(PREDICTION_FEATURES)} [{max_predictions_per_seq}], float "
        f"masked_lm_weights [{max_predictions_per_seq}] and int64 next_sentence_labels [1]: "
        "rebuild them with create_pretraining_data."
    )


def _first_records(firsts, files):
    """Yields (path, first record) from `firsts`; a file that is not TFRecords is a
    RecordError naming it (TensorFlow's error names no file)."""
    try:
        for path, record in firsts:
            yield path.numpy().decode(), record
    except tf.errors.DataLossError:
        for path in files:  # Only on this error path: find the file, one at a time.
            try:
                for _ in tf.data.TFRecordDataset(path).take(1):
                    pass
            except tf.errors.DataLossError:
                if _is_gzip(path):
                    raise RecordError(
                        f"{path} is gzip-compressed; pretraining TFRecords are read "
                        f"uncompressed (as the original's): decompress it (gunzip -c {path} > "
                        "shard.tfrecord) and pass the result in --input_file."
                    ) from None
                raise RecordError(
                    f"{path} is not a TFRecord file (its first record is corrupt); pass only "
                    "the pretraining records in --input_file."
                ) from None
        raise


def _is_gzip(path):
    """Whether the file starts with gzip's magic bytes (`TFRecordWriter(options="GZIP")`
    writes such files; they fail to read as plain TFRecords with a checksum error)."""
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


# Files read at once: every shard of a host up to this many (more would cost a read buffer each).
MAX_INTERLEAVED_FILES = 64
MIN_SHUFFLE_BUFFER = 1024


def _check_share(shared, pipeline_id, num_pipelines):
    """Raises RecordError when pipeline `pipeline_id` of `num_pipelines`, holding only its
    share (records pipeline_id, pipeline_id + n, ...) of the `shared` files, would get no
    record: repeating an empty share in training never yields a batch (the run would hang)."""
    for path in shared:
        if sum(1 for _ in tf.data.TFRecordDataset(path).take(num_pipelines)) > pipeline_id:
            return
    raise RecordError(
        f"Input pipeline {pipeline_id} of {num_pipelines} (one per host or worker) gets no "
        f"record: the {len(shared)} input file(s) hold fewer records than there are "
        "pipelines; write more data (or train on fewer hosts)."
    )


def pretraining_dataset(
    input_files,
    batch_size,
    max_seq_length,
    max_predictions_per_seq,
    is_training,
    input_context=None,
    seed=None,
    num_cpu_threads=4,
    eval_steps=None,
    vocab_size=None,
    type_vocab_size=None,
):
    """tf.data over pretraining TFRecords, as the original's input_fn but shardable.

    Training reads up to `MAX_INTERLEAVED_FILES` of this pipeline's files at once, one record
    from each in turn (file order reshuffled every pass), through a shuffle buffer of at least
    two steps' worth of records. Evaluation (no shuffle, deterministic) also takes one record
    from each file in turn, so its batches come from every shard rather than from the start of
    the first one. With `eval_steps`, the pipeline yields exactly that many steps of full
    batches for each of its replicas: its records, then `padding_record`s once they run out
    (or none of them past the last step), so every host runs every eval step with the same
    static shapes and the metrics count each evaluated record once.

    Args:
        input_files: comma-separated globs or a list of file names.
        batch_size: per-pipeline batch size (per replica under a strategy's
            `distribute_datasets_from_function`).
        max_seq_length, max_predictions_per_seq: as the records were created.
        is_training: repeat forever and shuffle files and records.
        input_context: a `tf.distribute.InputContext`; whole files are sharded across input
            pipelines (hosts / workers) while they divide evenly, and the records of the
            files left over (all of them when there are fewer files than pipelines).
        seed: shuffle seed, for reproducible order.
        num_cpu_threads: parallel readers (at most the files read at once).
        eval_steps: evaluation only: the number of steps to yield batches for (see above);
            None reads the records once, dropping a last partial batch.
        vocab_size: the model's vocabulary size: a batch holding a token id outside
            [0, vocab_size) fails with an InvalidArgumentError (`check_token_ids`); None
            checks nothing.
        type_vocab_size: the model's number of token types: a batch holding a value the
            model cannot use fails with an InvalidArgumentError (`check_record_values`); None
            checks nothing.

    Returns:
        A `tf.data.Dataset` of dicts with the feature names above ([B, T] / [B, P] / [B, 1]).
    """
    files = input_files if isinstance(input_files, list) else expand_file_patterns(input_files)
    # Empty files are left out: a pipeline given only empty ones would have no record (and,
    # repeating them in training, would never yield).
    files = check_record_shapes(files, max_seq_length, max_predictions_per_seq)
    num_pipelines, pipeline_id, replicas_per_pipeline = 1, 0, 1
    if input_context:
        num_pipelines = input_context.num_input_pipelines
        pipeline_id = input_context.input_pipeline_id
        replicas_per_pipeline = max(1, input_context.num_replicas_in_sync // num_pipelines)
    # Whole files go to one pipeline each while they divide evenly; every pipeline reads its
    # own 1/num_pipelines of the records of the files left over. So the pipelines hold equal
    # shares of the data (with equal files), and as each takes the same number of steps,
    # every record is read equally often.
    whole = len(files) - len(files) % num_pipelines
    own, shared = files[pipeline_id:whole:num_pipelines], files[whole:]
    if is_training and not own:
        _check_share(shared, pipeline_id, num_pipelines)
    num_shards = tf.constant([1] * len(own) + [num_pipelines] * len(shared), tf.int64)
    dataset = tf.data.Dataset.from_tensor_slices((own + shared, num_shards))
    cycle_length = max(1, min(MAX_INTERLEAVED_FILES, len(own) + len(shared)))
    if is_training:
        dataset = dataset.shuffle(len(own) + len(shared), seed=seed).repeat()
    dataset = dataset.interleave(
        lambda path, num_shards: tf.data.TFRecordDataset(path).shard(
            num_shards, pipeline_id % num_shards
        ),
        cycle_length=cycle_length,
        block_length=1,
        num_parallel_calls=min(num_cpu_threads, cycle_length),
        deterministic=not is_training or seed is not None,
    )
    if eval_steps is not None:
        if is_training:
            raise ValueError("`eval_steps` is for evaluation; pass is_training=False.")
        padding = tf.data.Dataset.from_tensors(
            padding_record(max_seq_length, max_predictions_per_seq)
        ).repeat()
        # [steps x local replicas x per-replica batch] records, padded past the data's end.
        dataset = dataset.concatenate(padding).take(eval_steps * replicas_per_pipeline * batch_size)
    if is_training:
        # Two steps' worth of this pipeline's records (every local replica's batch).
        buffer_size = max(MIN_SHUFFLE_BUFFER, 2 * batch_size * replicas_per_pipeline)
        dataset = dataset.shuffle(buffer_size=buffer_size, seed=seed)
    dataset = dataset.batch(batch_size, drop_remainder=True)

    def parse(records):
        features = parse_examples(records, max_seq_length, max_predictions_per_seq)
        if type_vocab_size is not None:
            features = check_record_values(features, max_seq_length, type_vocab_size)
        return features if vocab_size is None else check_token_ids(features, vocab_size)

    # One map, as before the id check: a saved input position of an earlier run still restores.
    # Traced as written (no autograph: it branches on Python values only), which saves
    # converting the dozen functions it calls at every start.
    parse = tf.autograph.experimental.do_not_convert(parse)
    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def check_token_ids(features, vocab_size):
    """`features` as they are, once every id of `input_ids` and `masked_lm_ids` is in
    [0, vocab_size).

    An XLA-compiled step (and a GPU's embedding lookup) reads an id beyond the table without
    an error: data made with a larger vocabulary than the config's trained on NaN to the last
    step. Otherwise this raises an InvalidArgumentError worded as the CPU lookup's own
    ("indices[0] = 1441 is not in [0, 1000)"), which `albert.training.failures` describes in
    one line.

    Args:
        features: a batch of `parse_examples`.
        vocab_size: the model's vocabulary size.
    """
    ids = tf.concat(
        [tf.reshape(features["input_ids"], [-1]), tf.reshape(features["masked_lm_ids"], [-1])], 0
    )
    none, first = _first_bad(ids, (ids < 0) | (ids >= vocab_size))
    message = tf.strings.format(
        "indices[0] = {} is not in [0, {})", (first, tf.constant(vocab_size, ids.dtype))
    )
    return _after([tf.debugging.Assert(none, [message])], features)


def _first_bad(values, bad):
    """(whether no value is `bad`, the first bad value or 0): for an assertion's message."""
    found = tf.boolean_mask(values, bad)
    return tf.size(found) == 0, tf.concat([found, tf.zeros([1], values.dtype)], 0)[0]


def _after(checks, features):
    """`features`, computed only once every op of `checks` has passed."""
    with tf.control_dependencies(checks):
        return {name: tf.identity(value) for name, value in features.items()}


# Starts the message of a failed `check_record_values` check, for `albert.training.failures`.
BAD_RECORD = "Bad pretraining record:"


def check_record_values(features, max_seq_length, type_vocab_size):
    """`features` as they are, once every value the model reads is one it can use.

    Otherwise this raises an InvalidArgumentError whose message is `BAD_RECORD` and one
    sentence, which `albert.training.failures` prints as it is. An XLA-compiled step (and a
    GPU's gather) reads a masked position or segment id beyond its table without an error,
    and a sentence-order label beyond {0, 1} or a NaN weight makes the loss NaN: without
    these checks such records trained silently on wrong values.

    Args:
        features: a batch of `parse_examples`.
        max_seq_length: T: masked_lm_positions must be in [0, T).
        type_vocab_size: the model's token types: segment_ids must be in [0, type_vocab_size).
    """
    # (feature, which values are bad, what they must be)
    rules = (
        (
            "masked_lm_positions",
            lambda v: (v < 0) | (v >= max_seq_length),
            f"positions must be in [0, {max_seq_length}) (--max_seq_length)",
        ),
        (
            "segment_ids",
            lambda v: (v < 0) | (v >= type_vocab_size),
            f"the config (type_vocab_size={type_vocab_size}) allows 0 to {type_vocab_size - 1}",
        ),
        ("next_sentence_labels", lambda v: (v < 0) | (v > 1), "sentence-order labels are 0 or 1"),
        (
            "masked_lm_weights",
            lambda v: ~(tf.math.is_finite(v) & (v >= 0)),
            "weights must be finite and zero or more",
        ),
    )
    checks = []
    for name, is_bad, requirement in rules:
        values = tf.reshape(features[name], [-1])
        none, first = _first_bad(values, is_bad(values))
        message = tf.strings.format(
            f"{BAD_RECORD} its {name} holds {{}}, but {requirement}; rebuild the records with "
            "create_pretraining_data (and pass the --max_seq_length and config they were "
            "made for).",
            first,
        )
        checks.append(tf.debugging.Assert(none, [message]))
    return _after(checks, features)
