"""A record damaged in the middle of one of several shards: tf.data's error names no file, so
`record_damage` finds the file after the failure, within a time budget."""

import pytest
import tensorflow as tf

from albert.data import record_damage
from albert.data.records import RecordError

REMEDY = "remove {it} from --input_file"


def _shard(path, records=30):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for r in range(records):
            writer.write(f"record {r} ".encode() * 7)
    return str(path)


def _shards(directory, count):
    return [_shard(directory / f"shard-{i}.tfrecord") for i in range(count)]


def _flip_middle_byte(path, fraction=0.5):
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(int(len(data) * fraction))
        f.write(bytes([data[int(len(data) * fraction)] ^ 0xFF]))


def _read_interleaved(paths):
    """Every record of `paths`, one file after another in turn, as the pretraining reader."""
    files = tf.data.Dataset.from_tensor_slices(paths)
    for _ in files.interleave(tf.data.TFRecordDataset, cycle_length=len(paths)):
        pass


def test_the_interleaved_reader_names_no_file(tmp_path):
    paths = _shards(tmp_path, 3)
    _flip_middle_byte(paths[1])
    with pytest.raises(tf.errors.DataLossError) as caught:
        _read_interleaved(paths)
    assert "corrupted record at" in str(caught.value)
    assert not any(path in str(caught.value) for path in paths)


def test_the_damaged_shard_is_named(tmp_path):
    paths = _shards(tmp_path, 4)
    _flip_middle_byte(paths[2])
    with pytest.raises(RecordError) as caught:
        with record_damage.naming_damaged_file(paths, "--input_file", REMEDY, RecordError):
            _read_interleaved(paths)
    offset = record_damage.damaged_offset(caught.value.__cause__)
    assert str(caught.value) == (
        f"{paths[2]} is damaged (corrupted record at byte {offset}): remove it from --input_file."
    )


def test_two_damaged_shards_are_both_named(tmp_path):
    # The run stops at the middle of the last shard (the first damage in interleaved order);
    # the search reads the shards in order and stops at the one the run stopped on, so the
    # first shard, damaged nearer its end, is always read first and named too.
    paths = _shards(tmp_path, 3)
    _flip_middle_byte(paths[0], fraction=0.9)
    _flip_middle_byte(paths[2])
    with pytest.raises(tf.errors.DataLossError) as caught:
        _read_interleaved(paths)
    message = record_damage.describe_damage(caught.value, paths, "--input_file", REMEDY)
    assert message.startswith(f"{paths[0]} (corrupted record at byte ")
    assert f", {paths[2]} (corrupted record at byte " in message
    assert paths[1] not in message
    assert message.endswith("are damaged: remove them from --input_file.")


def test_a_truncated_shard_is_named(tmp_path):
    paths = _shards(tmp_path, 2)
    with open(paths[1], "r+b") as f:
        f.truncate(len(f.read()) - 9)
    with pytest.raises(tf.errors.DataLossError) as caught:
        _read_interleaved(paths)
    message = record_damage.describe_damage(caught.value, paths, "--input_file", REMEDY)
    assert message.startswith(f"{paths[1]} is damaged (truncated record at byte ")


def test_out_of_time_says_how_many_files_were_checked(tmp_path, monkeypatch):
    paths = _shards(tmp_path, 3)
    _flip_middle_byte(paths[1])
    with pytest.raises(tf.errors.DataLossError) as caught:
        _read_interleaved(paths)
    offset = record_damage.damaged_offset(caught.value)
    monkeypatch.setenv(record_damage.SEARCH_SECONDS_ENV, "0")
    message = record_damage.describe_damage(caught.value, paths, "--input_file", REMEDY)
    assert message == (
        f"A record of --input_file is damaged (corrupted record at byte {offset}), but not in "
        f"any of the 0 files larger than {offset} bytes checked within 0 s; 3 of its 3 files "
        "were not checked: rerun with ALBERT_DAMAGE_SEARCH_SECONDS set higher (in seconds) "
        "to check them."
    )


def test_files_smaller_than_the_offset_are_not_read(tmp_path, monkeypatch):
    small, large = _shard(tmp_path / "small", records=2), _shard(tmp_path / "large")
    _flip_middle_byte(large)
    read = []
    real = tf.data.TFRecordDataset
    monkeypatch.setattr(
        tf.data, "TFRecordDataset", lambda path, **kw: read.append(path) or real(path, **kw)
    )
    with pytest.raises(tf.errors.DataLossError) as caught:
        list(real(large))
    damaged, checked, unread = record_damage.find_damaged_files(
        [small, large], record_damage.damaged_offset(caught.value), seconds=60
    )
    assert [path for path, _ in damaged] == [large] and (checked, unread) == (1, 0)
    assert read == [large]


def test_other_data_loss_passes_through(tmp_path):
    paths = _shards(tmp_path, 2)
    # A checkpoint's data loss reports no record offset; intact files do not hold the record.
    for message in ("Unable to open table file /x/model.ckpt-5.index", "corrupted record at 40"):
        with pytest.raises(tf.errors.DataLossError):
            with record_damage.naming_damaged_file(paths, "--input_file", REMEDY, RecordError):
                raise tf.errors.DataLossError(None, None, message)


def test_a_file_damaged_elsewhere_does_not_end_the_search(tmp_path, monkeypatch):
    # Read one at a time: the first file is damaged, but not where the run stopped; the
    # search goes on to the file that fails at that offset.
    monkeypatch.setattr(record_damage, "_READERS", 1)
    # Files of several batches: a search told to stop leaves the second between two.
    paths = [_shard(tmp_path / f"{name}.tfrecord", records=20_000) for name in "ab"]
    _flip_middle_byte(paths[0], 0.2)
    _flip_middle_byte(paths[1], 0.6)
    with pytest.raises(tf.errors.DataLossError) as caught:
        for _ in tf.data.TFRecordDataset(paths[1]):
            pass
    offset = record_damage.damaged_offset(caught.value)
    damaged, read, unread = record_damage.find_damaged_files(paths, offset, 60.0)
    assert [path for path, _ in damaged] == paths
    assert damaged[1][1] == f"corrupted record at byte {offset}"
