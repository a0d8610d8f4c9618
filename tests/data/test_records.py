"""The TensorFlow-free record encoder against tf.train.Example, and records read back."""

import re

import numpy as np
import pytest
import tensorflow as tf

from albert.config import AlbertConfig
from albert.data.create_pretraining_data import PretrainingDataConfig, create_pretraining_data
from albert.data.example_proto import ExampleEncoder, encode_varint
from albert.data.masking import InstanceBatch, MaskingVocabulary, create_masked_lm_batch
from albert.data.pretraining import InstanceOptions
from albert.data.records import (
    RecordError,
    expand_file_patterns,
    padding_record,
    parse_examples,
    pretraining_dataset,
    serialize_instance,
)
from albert.tasks.pretraining import PretrainingTask
from albert.training.failures import describe_failure
from tests.helpers import TINY_TEXT, train_tiny_spm


def _random_batch(rng, num, seq_length, predictions, vocab_size):
    """An InstanceBatch with arbitrary (not masked-by-rule) contents, edge cases included."""
    lengths = rng.integers(5, seq_length + 1, num)
    lengths[0] = seq_length  # No padding.
    len_a = np.array([rng.integers(1, n - 3) for n in lengths])
    ids = np.zeros([num, seq_length], np.int32)
    boundary = np.zeros([num, seq_length], np.uint8)
    positions, masked_ids, counts = [], [], []
    for m, n in enumerate(lengths):
        ids[m, :n] = rng.integers(0, vocab_size, n)
        boundary[m, :n] = rng.integers(0, 2, n)
        k = 0 if m == 1 else int(rng.integers(1, min(predictions, n) + 1))  # m=1: none.
        positions.append(np.sort(rng.choice(n, k, replace=False)))
        masked_ids.append(rng.integers(0, vocab_size, k))
        counts.append(k)
    return InstanceBatch(
        input_ids=ids,
        lengths=lengths,
        len_a=len_a,
        token_boundary=boundary,
        masked_lm_positions=np.concatenate(positions).astype(np.int32),
        masked_lm_ids=np.concatenate(masked_ids).astype(np.int32),
        prediction_offsets=np.concatenate([[0], np.cumsum(counts)]),
        next_sentence_labels=rng.integers(0, 2, num),
    )


def test_varint():
    assert [encode_varint(v) for v in (0, 1, 127, 128, 300, 16384)] == [
        b"\x00",
        b"\x01",
        b"\x7f",
        b"\x80\x01",
        b"\xac\x02",
        b"\x80\x80\x01",
    ]


@pytest.mark.parametrize(
    "seq_length, predictions, vocab_size", [(7, 3, 99), (128, 20, 30000), (300, 77, 200003)]
)
def test_encoder_matches_tf_train_example_bytes(seq_length, predictions, vocab_size):
    rng = np.random.default_rng(seq_length)
    batch = _random_batch(rng, 13, seq_length, predictions, vocab_size)
    records = ExampleEncoder(seq_length, predictions, vocab_size).encode_batch(batch)
    segment_ids = batch.segment_ids()
    for m, record in enumerate(records):
        n = batch.lengths[m]
        positions, masked_ids = batch.predictions(m)
        expected = serialize_instance(
            batch.input_ids[m, :n].tolist(),
            segment_ids[m, :n].tolist(),
            batch.token_boundary[m, :n].tolist(),
            positions.tolist(),
            masked_ids.tolist(),
            int(batch.next_sentence_labels[m]),
            seq_length,
            predictions,
        )
        example = tf.train.Example.FromString(expected)
        assert tf.train.Example.FromString(record) == example
        assert record == example.SerializeToString(deterministic=True)


def test_encoder_rejects_a_batch_of_another_length():
    batch = _random_batch(np.random.default_rng(0), 3, 9, 2, 99)
    with pytest.raises(ValueError, match="length 9"):
        ExampleEncoder(10, 2, 99).encode_batch(batch)


def test_masked_batch_round_trips_through_pretraining_dataset(tmp_path):
    vocab = MaskingVocabulary(
        {"<pad>": 0, "<unk>": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
        | {f"▁{i}": i for i in range(5, 99)}
    )
    rng = np.random.default_rng(0)
    pairs = [
        (
            rng.integers(5, 99, rng.integers(1, 8)).astype(np.int32),
            rng.integers(5, 99, rng.integers(1, 8)).astype(np.int32),
            m % 2,
        )
        for m in range(6)
    ]
    options = InstanceOptions(max_seq_length=19, max_predictions_per_seq=3)
    batch = create_masked_lm_batch(pairs, options, vocab, rng)
    path = str(tmp_path / "batch.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in ExampleEncoder(19, 3, vocab.size).encode_batch(batch):
            writer.write(record)
    features = next(iter(pretraining_dataset(path, 6, 19, 3, is_training=False)))
    positions = np.arange(19)
    np.testing.assert_array_equal(features["input_ids"], batch.input_ids)
    np.testing.assert_array_equal(features["input_mask"], positions < batch.lengths[:, None])
    np.testing.assert_array_equal(features["segment_ids"], batch.segment_ids())
    np.testing.assert_array_equal(features["next_sentence_labels"][:, 0], [0, 1, 0, 1, 0, 1])
    for m in range(6):
        k = batch.prediction_offsets[m + 1] - batch.prediction_offsets[m]
        positions_m, ids_m = batch.predictions(m)
        np.testing.assert_array_equal(
            features["masked_lm_positions"][m], np.pad(positions_m, (0, 3 - k))
        )
        np.testing.assert_array_equal(features["masked_lm_ids"][m], np.pad(ids_m, (0, 3 - k)))
        np.testing.assert_array_equal(features["masked_lm_weights"][m], [1.0] * k + [0.0] * (3 - k))


def test_created_files_read_back(tmp_path):
    spm_model = train_tiny_spm(tmp_path, do_lower_case=True)
    text = tmp_path / "text.txt"
    text.write_text("\n".join(TINY_TEXT.splitlines() * 3))
    config = PretrainingDataConfig(
        input_file=str(text),
        output_file=f"{tmp_path}/a.tfrecord,{tmp_path}/b.tfrecord",
        spm_model_file=spm_model,
        num_workers=1,
        instance=InstanceOptions(max_seq_length=64, max_predictions_per_seq=7, dupe_factor=2),
    )
    summary = create_pretraining_data(config)
    dataset = pretraining_dataset(summary.output_files, 1, 64, 7, is_training=False)
    count = 0
    for features in dataset:
        n = int(features["input_mask"].numpy().sum())
        weights = features["masked_lm_weights"].numpy()[0]
        k = int(weights.sum())
        positions = features["masked_lm_positions"].numpy()[0]
        assert np.all(np.diff(positions[:k]) > 0) and np.all(positions[k:] == 0)
        assert 0 < positions[:k].min() and positions[:k].max() < n - 1
        assert np.all(features["input_ids"].numpy()[0, n:] == 0)
        count += 1
    assert count == summary.instances > 20
    raw = next(iter(tf.data.TFRecordDataset(summary.output_files[0]))).numpy()
    boundary = tf.train.Example.FromString(raw).features.feature["token_boundary"].int64_list.value
    assert len(boundary) == 64 and boundary[0] == 1


def _write_labelled_files(tmp_path, num_files, records_per_file):
    """Files whose records say which file they are in (next_sentence_labels = file index)."""
    paths = []
    for f in range(num_files):
        paths.append(str(tmp_path / f"shard-{f}"))
        with tf.io.TFRecordWriter(paths[-1]) as writer:
            for r in range(records_per_file):
                writer.write(serialize_instance([2, 5, 3], [0, 0, 0], [1, 1, 1], [1], [r], f, 7, 2))
    return paths


def test_evaluation_batches_come_from_every_shard(tmp_path):
    paths = _write_labelled_files(tmp_path, 3, 10)
    first = next(iter(pretraining_dataset(paths, 6, 7, 2, is_training=False)))
    assert first["next_sentence_labels"][:, 0].numpy().tolist() == [0, 1, 2, 0, 1, 2]
    everything = pretraining_dataset(paths, 6, 7, 2, is_training=False).unbatch()
    assert sum(1 for _ in everything) == 30  # Each record once.


def test_training_mixes_shards_within_a_batch(tmp_path):
    paths = _write_labelled_files(tmp_path, 4, 300)
    dataset = pretraining_dataset(paths, 64, 7, 2, is_training=True, seed=1)
    labels = next(iter(dataset))["next_sentence_labels"][:, 0].numpy()
    assert set(labels.tolist()) == {0, 1, 2, 3}


def test_hidden_temporary_files_are_not_read(tmp_path):
    paths = _write_labelled_files(tmp_path, 2, 1)
    (tmp_path / ".shard-2.tmp-0123").write_bytes(b"partial")  # A killed writer's file.
    (tmp_path / ".albert-shuffle-host-1").mkdir()
    assert expand_file_patterns(f"{tmp_path}/*") == paths
    with pytest.raises(RecordError, match="No input file matches"):
        expand_file_patterns(f"{tmp_path}/.shard-*")


def test_an_empty_first_shard_is_not_an_error(tmp_path):
    # A small corpus written to many shards leaves some empty (`create_pretraining_data`
    # writes every shard); a glob that lists an empty one first must still read the rest.
    (tmp_path / "shard-0").write_bytes(b"")
    (tmp_path / "more").mkdir()
    paths = [str(tmp_path / "shard-0"), *_write_labelled_files(tmp_path / "more", 1, 3)]
    dataset = pretraining_dataset(paths, 1, 7, 2, is_training=False)
    assert sum(1 for _ in dataset) == 3


def test_records_of_another_length_in_any_file_are_one_clear_error(tmp_path):
    paths = _write_labelled_files(tmp_path, 1, 1)
    other = str(tmp_path / "seq-9")
    with tf.io.TFRecordWriter(other) as writer:
        writer.write(serialize_instance([2, 5, 3], [0, 0, 0], [1, 1, 1], [1], [5], 0, 9, 2))
    with pytest.raises(RecordError, match="seq-9 holds records with max_seq_length=9"):
        pretraining_dataset([*paths, other], 1, 7, 2, is_training=False)


def test_training_pipelines_read_every_record_equally_often(tmp_path):
    # 3 files on 2 workers: whole files alone gave one worker files 0 and 2 and the other
    # file 1, and as every worker takes the same number of steps, file 1 was read twice as
    # often as the others.
    paths = _write_labelled_files(tmp_path, 3, 30)
    counts = np.zeros(3)
    for pipeline in range(2):
        context = tf.distribute.InputContext(2, pipeline, 2)
        dataset = pretraining_dataset(paths, 30, 7, 2, True, input_context=context, seed=1)
        for batch in dataset.take(60):
            counts += np.bincount(batch["next_sentence_labels"][:, 0].numpy(), minlength=3)
    assert np.all(np.abs(counts / counts.sum() - 1 / 3) < 0.03), counts
    # And one pass of evaluation reads each record once, in equal shares.
    records = [
        _record_keys(pretraining_dataset(paths, 1, 7, 2, False, input_context=context))
        for context in (tf.distribute.InputContext(2, p, 2) for p in range(2))
    ]
    assert len(records[0]) == len(records[1]) == 45
    assert sorted(records[0] + records[1]) == sorted(
        _record_keys(pretraining_dataset(paths, 1, 7, 2, False))
    )


def _record_keys(dataset):
    return [(int(b["next_sentence_labels"][0, 0]), int(b["masked_lm_ids"][0, 0])) for b in dataset]


def test_a_file_that_is_not_tfrecords_is_named(tmp_path):
    # `--input_file=data/*` in a folder that also holds a note: one line naming the note.
    paths = _write_labelled_files(tmp_path, 1, 1)
    note = tmp_path / "shard-README.txt"
    note.write_text("Made from the 2026 Wikipedia dump.\n")
    with pytest.raises(RecordError, match="shard-README.txt is not a TFRecord file"):
        pretraining_dataset([*paths, str(note)], 1, 7, 2, is_training=False)


def test_a_folder_as_input_file_is_one_clear_error(tmp_path):
    _write_labelled_files(tmp_path, 1, 1)
    with pytest.raises(RecordError, match="is a folder.*--input_file=.*/\\*"):
        expand_file_patterns(str(tmp_path))


def test_empty_shards_leave_no_pipeline_without_records(tmp_path):
    # A small corpus in many shards: a worker whose files were all empty got no record (and
    # in training, repeating its empty files, hung). Empty files are left out before the
    # files are shared out.
    paths = _write_labelled_files(tmp_path, 1, 3)
    (tmp_path / "shard-1").write_bytes(b"")
    paths.append(str(tmp_path / "shard-1"))
    shares = [
        _record_keys(pretraining_dataset(paths, 1, 7, 2, False, input_context=context))
        for context in (tf.distribute.InputContext(2, p, 2) for p in range(2))
    ]
    assert shares == [[(0, 0), (0, 2)], [(0, 1)]]


def test_a_training_pipeline_without_records_is_one_clear_error(tmp_path):
    # One file of one record on 2 hosts: host 1's share is empty, and repeating it hung.
    paths = _write_labelled_files(tmp_path, 1, 1)
    context = tf.distribute.InputContext(2, 1, 2)
    with pytest.raises(RecordError, match="Input pipeline 1 of 2 .* gets no record"):
        pretraining_dataset(paths, 1, 7, 2, True, input_context=context, seed=1)
    first = tf.distribute.InputContext(2, 0, 2)  # host 0 has the record
    assert next(iter(pretraining_dataset(paths, 1, 7, 2, True, input_context=first, seed=1)))
    (tmp_path / "two").mkdir()
    two = _write_labelled_files(tmp_path / "two", 1, 2)  # two records: one for each host
    assert next(iter(pretraining_dataset(two, 1, 7, 2, True, input_context=context, seed=1)))


def _write_records(path, instances):
    with tf.io.TFRecordWriter(path) as writer:
        for input_ids, masked_lm_ids in instances:
            writer.write(
                serialize_instance(input_ids, [0, 0, 0], [1, 1, 1], [1], masked_lm_ids, 0, 7, 2)
            )
    return path


@pytest.mark.parametrize("bad", [([2, 1441, 3], [5]), ([2, 5, 3], [1441])])
def test_token_ids_beyond_the_vocabulary_are_one_clear_error(tmp_path, bad):
    # An XLA-compiled step looks such ids up without an error (it trained on NaN to the end,
    # exit 0): the pipeline checks every batch, and the CLI prints one sentence.
    path = _write_records(str(tmp_path / "shard"), [([2, 5, 3], [5]), bad])
    assert sum(1 for _ in pretraining_dataset(path, 1, 7, 2, False, vocab_size=1442)) == 2
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        list(pretraining_dataset(path, 1, 7, 2, is_training=False, vocab_size=1000))
    assert describe_failure(raised.value).startswith(
        "A token id (1441) is outside the model's vocabulary of 1000"
    )


def test_the_pretraining_task_checks_ids_against_its_config(tmp_path):
    path = _write_records(str(tmp_path / "shard"), [([2, 1441, 3], [5])])
    config = AlbertConfig.from_json_file("albert_tiny")  # vocab_size 1000
    task = PretrainingTask(config, path, 1, 1, 7, 2)
    for dataset in (
        task.train_dataset(tf.distribute.InputContext(), seed=1),
        task.eval_dataset(tf.distribute.InputContext(), num_steps=1),
    ):
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"1441 is not in \[0, 1000\)"):
            next(iter(dataset))


def _one_record(tmp_path, change):
    """A file of one 7/2 record whose tf.train.Example features `change(features)` edits."""
    example = tf.train.Example.FromString(
        serialize_instance([2, 5, 3], [0, 0, 0], [1, 1, 1], [1], [5], 0, 7, 2)
    )
    change(example.features.feature)
    path = str(tmp_path / "shard")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(example.SerializeToString())
    return path


def _as_floats(name):
    def change(feature):
        values = list(feature[name].int64_list.value)
        del feature[name]
        feature[name].float_list.value.extend(values)

    return change


def _as_ints(name):
    def change(feature):
        values = list(feature[name].float_list.value)
        del feature[name]
        feature[name].int64_list.value.extend(int(v) for v in values)

    return change


def _shortened(name):
    def change(feature):
        del feature[name].int64_list.value[-1]

    return change


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda f: f.pop("masked_lm_weights"), "feature masked_lm_weights is missing"),
        (lambda f: f.pop("next_sentence_labels"), "feature next_sentence_labels is missing"),
        (lambda f: f.pop("segment_ids"), "feature segment_ids is missing"),
        (_as_floats("input_ids"), "input_ids is float, not int64"),
        (_as_ints("masked_lm_weights"), "masked_lm_weights is int64, not float"),
        (_shortened("input_mask"), "input_mask holds 6 values, not 7"),
        (_shortened("masked_lm_ids"), "masked_lm_ids holds 1 values, not 2"),
    ],
    ids=["no_weights", "no_labels", "no_segments", "float_ids", "int_weights", "mask", "ids"],
)
def test_records_unlike_the_schema_are_one_clear_error(tmp_path, change, problem):
    # They passed the length check of input_ids and masked_lm_positions, then failed mid-run
    # inside tf.data with a traceback naming no file (or, float input_ids, as "length 0").
    path = _one_record(tmp_path, change)
    with pytest.raises(RecordError) as error:
        pretraining_dataset(path, 1, 7, 2, is_training=False)
    assert str(error.value).startswith(f"{path} holds records whose {problem}; ")
    assert str(error.value).endswith(
        "pretraining records hold int64 input_ids, input_mask, segment_ids [7], "
        "masked_lm_positions, masked_lm_ids [2], float masked_lm_weights [2] and int64 "
        "next_sentence_labels [1]: rebuild them with create_pretraining_data."
    )


def test_records_without_token_boundary_still_read(tmp_path):
    path = _one_record(tmp_path, lambda f: f.pop("token_boundary"))
    assert sum(1 for _ in pretraining_dataset(path, 1, 7, 2, is_training=False)) == 1


def _set(name, value):
    def change(feature):
        values = feature[name].float_list.value if name == "masked_lm_weights" else None
        values = values if values is not None else feature[name].int64_list.value
        values[0] = value

    return change


@pytest.mark.parametrize(
    "change, message",
    [
        (_set("masked_lm_positions", 7), "its masked_lm_positions holds 7, but positions must "),
        (_set("masked_lm_positions", -1), "its masked_lm_positions holds -1, but positions "),
        (_set("segment_ids", 2), r"its segment_ids holds 2, but the config \(type_vocab_size=2"),
        (_set("next_sentence_labels", 2), "its next_sentence_labels holds 2, but sentence-order "),
        (_set("masked_lm_weights", float("nan")), "its masked_lm_weights holds nan, but weights"),
        (_set("masked_lm_weights", -1.0), "its masked_lm_weights holds -1, but weights must be "),
    ],
    ids=["position_7", "position_-1", "segment_2", "label_2", "weight_nan", "weight_-1"],
)
def test_values_the_model_cannot_use_are_one_clear_error(tmp_path, change, message):
    # An XLA step (or a GPU gather) read such positions and segment ids without an error, and
    # such labels and weights made the loss NaN: the run trained on them and exited 0.
    path = _one_record(tmp_path, change)
    assert sum(1 for _ in pretraining_dataset(path, 1, 7, 2, is_training=False)) == 1
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        list(pretraining_dataset(path, 1, 7, 2, is_training=False, type_vocab_size=2))
    described = describe_failure(raised.value)
    assert re.match(
        f"A record of --input_file \\(or --eval_input_file\\) is bad: {message}", described
    )
    assert described.endswith(
        "; rebuild the records with create_pretraining_data (and pass the --max_seq_length "
        "and config they were made for)."
    )


def test_records_the_model_can_use_pass_the_value_checks(tmp_path):
    # Highest position, segment and label; weights 0 (no prediction) are fine too.
    def change(feature):
        feature["masked_lm_positions"].int64_list.value[:] = [6, 0]
        feature["segment_ids"].int64_list.value[:] = [0, 1, 1, 0, 0, 0, 0]
        feature["next_sentence_labels"].int64_list.value[:] = [1]
        feature["masked_lm_weights"].float_list.value[:] = [0.0, 0.0]

    path = _one_record(tmp_path, change)
    dataset = pretraining_dataset(path, 1, 7, 2, False, vocab_size=99, type_vocab_size=2)
    assert sum(1 for _ in dataset) == 1


def test_the_pretraining_task_checks_values_against_its_config(tmp_path):
    path = _one_record(tmp_path, _set("segment_ids", 2))
    config = AlbertConfig.from_json_file("albert_tiny")  # type_vocab_size 2
    task = PretrainingTask(config, path, 1, 1, 7, 2)
    for dataset in (
        task.train_dataset(tf.distribute.InputContext(), seed=1),
        task.eval_dataset(tf.distribute.InputContext(), num_steps=1),
    ):
        with pytest.raises(tf.errors.InvalidArgumentError, match="its segment_ids holds 2"):
            next(iter(dataset))


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_a_compressed_record_file_says_so(tmp_path, compression):
    # GZIP files were reported as "not a TFRecord file ... pass only the pretraining records".
    path = str(tmp_path / "shard.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options=compression) as writer:
        writer.write(serialize_instance([2, 5, 3], [0, 0, 0], [1, 1, 1], [1], [5], 0, 7, 2))
    with pytest.raises(RecordError) as error:
        pretraining_dataset(path, 1, 7, 2, is_training=False)
    if compression == "GZIP":
        assert str(error.value) == (
            f"{path} is gzip-compressed; pretraining TFRecords are read uncompressed (as the "
            f"original's): decompress it (gunzip -c {path} > shard.tfrecord) and pass the "
            "result in --input_file."
        )
    else:  # No magic bytes to recognise: still one line naming the file.
        assert str(error.value).startswith(f"{path} is not a TFRecord file")


@pytest.mark.parametrize(
    "change, detail",
    [
        (_shortened("input_ids"), "Key: input_ids, Index: 1. Number of int64 values != expected"),
        (lambda f: f.pop("masked_lm_weights"), "Feature: masked_lm_weights (data type: float) is"),
    ],
    ids=["short", "missing"],
)
def test_a_later_record_unlike_the_first_is_one_line(tmp_path, change, detail):
    # Only a file's first record is checked up front; a later one failed inside tf.data as a
    # TensorFlow traceback naming no file.
    good = tf.train.Example.FromString(
        serialize_instance([2, 5, 3], [0, 0, 0], [1, 1, 1], [1], [5], 0, 7, 2)
    )
    bad = tf.train.Example()
    bad.CopyFrom(good)
    change(bad.features.feature)
    path = str(tmp_path / "shard")
    with tf.io.TFRecordWriter(path) as writer:
        for example in (good, bad):
            writer.write(example.SerializeToString())
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        list(pretraining_dataset(path, 2, 7, 2, is_training=False))
    described = describe_failure(raised.value)
    assert described.startswith(
        "A record of --input_file (or --eval_input_file) is unlike the first record of its "
        f"file ({detail}"
    ), described
    assert described.endswith(
        "); every record must hold the same features and lengths: rebuild the records with "
        "create_pretraining_data."
    )


@pytest.mark.parametrize(
    "mask, ones",
    [([1] * 7, 7), ([0] * 7, 0), ([1, 1, 1, 1, 0, 0, 0], 4), ([1, 0, 1, 0, 0, 0, 0], 2)],
    ids=["covers_padding", "none", "one_pad", "hole"],
)
def test_a_mask_unlike_the_tokens_is_warned(tmp_path, caplog, mask, ones):
    # The original attends wherever input_mask is 1, so such records still train (no error).
    def change(feature):
        feature["input_mask"].int64_list.value[:] = mask

    path = _one_record(tmp_path, change)
    assert sum(1 for _ in pretraining_dataset(path, 1, 7, 2, is_training=False)) == 1
    assert (
        f"{path}: the input_mask of its first record is not 1 for each of its 3 tokens and 0 "
        f"for the padding after them (it holds {ones} ones)"
    ) in caplog.text


def test_a_mask_of_the_tokens_is_not_warned(tmp_path, caplog):
    pretraining_dataset(_one_record(tmp_path, lambda f: None), 1, 7, 2, is_training=False)
    assert "input_mask" not in caplog.text


def test_an_instance_longer_than_the_flags_is_refused():
    with pytest.raises(RecordError, match="3 predictions exceeds"):
        serialize_instance([2, 5, 3], [0] * 3, [1] * 3, [1, 1, 1], [5, 5, 5], 0, 4, 2)
    with pytest.raises(RecordError, match="with 5 tokens"):
        serialize_instance([2, 5, 5, 5, 3], [0] * 5, [1] * 5, [1], [5], 0, 4, 2)


def test_a_record_without_is_real_example_is_real():
    # Records of create_pretraining_data (and the original's) have no is_real_example.
    real = serialize_instance([2, 5, 3], [0] * 3, [1] * 3, [1], [5], 0, 4, 2)
    features = parse_examples(tf.constant([real, padding_record(4, 2)]), 4, 2)
    assert features["is_real_example"].numpy().tolist() == [1, 0]


def test_records_with_other_predictions_name_both_lengths(tmp_path):
    other = str(tmp_path / "preds-3")
    with tf.io.TFRecordWriter(other) as writer:
        writer.write(serialize_instance([2, 5, 3], [0] * 3, [1] * 3, [1], [5], 0, 7, 3))
    with pytest.raises(RecordError, match="max_seq_length=7 and max_predictions_per_seq=3"):
        pretraining_dataset([other], 1, 7, 2, is_training=False)


def test_a_negative_token_id_is_one_clear_error(tmp_path):
    path = _write_records(str(tmp_path / "shard"), [([2, 5, 3], [5]), ([2, -1, 3], [5])])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[0\] = -1 is not in"):
        list(pretraining_dataset(path, 1, 7, 2, is_training=False, vocab_size=1000))


def test_eval_steps_count_every_local_replica(tmp_path):
    # One pipeline feeding 2 replicas: each eval step takes a batch for each of them.
    paths = _write_labelled_files(tmp_path, 1, 3)
    context = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2
    )
    dataset = pretraining_dataset(paths, 2, 7, 2, False, input_context=context, eval_steps=2)
    real = [batch["is_real_example"].numpy().tolist() for batch in dataset]
    assert real == [[1, 1], [1, 0], [0, 0], [0, 0]]
