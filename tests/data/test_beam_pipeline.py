"""The Beam pipeline's pure functions, without a runner (the DirectRunner test is slow)."""

import dataclasses

import pytest
import tensorflow as tf

from albert.data import corpus

beam_pipeline = pytest.importorskip("albert.data.beam_pipeline")


def test_parse_pipeline_options():
    text = "runner=DirectRunner, --direct_num_workers=2,"
    assert beam_pipeline.parse_pipeline_options(text) == [
        "--runner=DirectRunner",
        "--direct_num_workers=2",
    ]


def test_a_bucket_part_is_sorted_and_named_after_its_bucket(tmp_path):
    entries = [(9, b"late"), (1, b"early"), (5, b"middle")]
    shard, (bucket, path) = beam_pipeline._write_part((5, entries), str(tmp_path), 2)
    assert (shard, bucket) == (2, 5)  # Buckets 4 and 5 make shard 2.
    assert path.endswith("part-000005")
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == [b"early", b"middle", b"late"]


def test_a_shard_is_its_parts_in_bucket_order(tmp_path):
    parts = []
    for bucket in (3, 2):
        path = tmp_path / f"part-{bucket}"
        path.write_bytes(f"bucket {bucket};".encode())
        parts.append((bucket, str(path)))
    temporaries = [str(tmp_path / "shard-0"), str(tmp_path / "shard-1")]
    assert beam_pipeline._write_shard((1, parts), temporaries) == 1
    assert (tmp_path / "shard-1").read_bytes() == b"bucket 2;bucket 3;"


def test_the_corpus_counters_are_every_reader_count_but_files():
    names = [field.name for field in dataclasses.fields(corpus.CorpusStats)]
    assert list(beam_pipeline.CORPUS_COUNTERS) == [name for name in names if name != "files"]
