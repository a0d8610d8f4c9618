"""Packing, truncation, batch padding and the TFRecord feature cache."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert.data.features import (
    FeatureError,
    features_to_dataset,
    load_or_create_features,
    pack_segments,
    pad_dataset,
    pad_features,
    read_feature_records,
    schema_path,
    special_token_ids,
    tokenizer_fingerprint,
    truncate_pair,
    write_feature_records,
)
from albert.tokenization import FullTokenizer

CLS, SEP = 2, 3
MODEL = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "fixtures", "tokenizer", "tiny.model"
)


def test_truncate_pair_drops_from_the_longer_and_from_b_on_ties():
    # 5 + 3 > 5: a (5) is longer -> a=4; a (4) longer -> a=3; 3 == 3 tie -> b loses -> 3 + 2.
    a, b = truncate_pair([11, 12, 13, 14, 15], [21, 22, 23], 5)
    assert (a, b) == ([11, 12, 13], [21, 22])
    a, b = truncate_pair([11], [21, 22, 23, 24, 25, 26], 4)
    assert (a, b) == ([11], [21, 22, 23])


def test_truncate_pair_does_not_modify_its_inputs():
    ids_a, ids_b = [1, 2, 3], [4, 5]
    truncate_pair(ids_a, ids_b, 2)
    assert ids_a == [1, 2, 3] and ids_b == [4, 5]


def test_pack_pair_layout_and_padding():
    packed = pack_segments([11, 12, 13], [21, 22], 9, CLS, SEP)
    assert packed["input_ids"] == [2, 11, 12, 13, 3, 21, 22, 3, 0]
    assert packed["input_mask"] == [1, 1, 1, 1, 1, 1, 1, 1, 0]
    assert packed["segment_ids"] == [0, 0, 0, 0, 0, 1, 1, 1, 0]


def test_pack_pair_truncates_to_fit_three_special_tokens():
    packed = pack_segments([11, 12, 13, 14, 15], [21, 22, 23], 7, CLS, SEP)
    # 7 - 3 = 4 tokens: a 5 -> 4 -> 3, tie 3/3 -> b 2, then a 3 > b 2 -> a 2.
    assert packed["input_ids"] == [2, 11, 12, 3, 21, 22, 3]
    assert packed["segment_ids"] == [0, 0, 0, 0, 1, 1, 1]
    assert packed["input_mask"] == [1] * 7


def test_pack_single_segment_keeps_its_first_tokens():
    packed = pack_segments(list(range(10, 20)), None, 6, CLS, SEP)
    assert packed["input_ids"] == [2, 10, 11, 12, 13, 3]
    assert packed["segment_ids"] == [0] * 6
    # An empty second segment is a single segment, as in the original.
    assert pack_segments([10], [], 4, CLS, SEP)["input_ids"] == [2, 10, 3, 0]


def test_pack_rejects_a_length_without_room():
    with pytest.raises(FeatureError, match="max_seq_length=3"):
        pack_segments([10], [20], 3, CLS, SEP)


def test_special_token_ids_of_the_tiny_model_and_a_missing_token():
    assert special_token_ids(FullTokenizer(spm_model_file=MODEL)) == (2, 3)

    class NoSep:
        vocab = {"[CLS]": 5}

        def convert_tokens_to_ids(self, tokens):
            return [self.vocab[t] for t in tokens]

    with pytest.raises(FeatureError, match=r"\[SEP\]"):
        special_token_ids(NoSep())


def _features(count, seq=5):
    return [
        {
            "input_ids": [i + 1] * seq,
            "input_mask": [1] * seq,
            "label_ids": float(i) / 2,
            "is_real_example": 1,
        }
        for i in range(count)
    ]


def test_pad_features_to_a_multiple_of_the_batch():
    features = _features(7)
    padded = pad_features(features, 3)
    assert len(padded) == 9 and len(features) == 7
    assert padded[:7] == features
    for pad in padded[7:]:
        assert pad == {
            "input_ids": [0] * 5,
            "input_mask": [0] * 5,
            "label_ids": 0.0,
            "is_real_example": 0,
        }
        assert isinstance(pad["label_ids"], float)
    assert len(pad_features(features[:6], 3)) == 6


def test_write_and_read_back_exact_values_and_types(tmp_path):
    features = _features(4, seq=7)
    features[2]["input_ids"][6] = 29999
    path = str(tmp_path / "cache" / "f.tfrecord")
    write_feature_records(path, features)
    assert sorted(os.listdir(tmp_path / "cache")) == ["f.tfrecord", "f.tfrecord.json"]
    dataset, count = read_feature_records(path)
    assert count == 4
    assert dataset.element_spec["input_ids"] == tf.TensorSpec([7], tf.int32)
    assert dataset.element_spec["label_ids"] == tf.TensorSpec([], tf.float32)
    assert dataset.element_spec["is_real_example"] == tf.TensorSpec([], tf.int32)
    rows = list(dataset.as_numpy_iterator())
    assert len(rows) == 4
    for row, feature in zip(rows, features, strict=True):
        for name, value in feature.items():
            assert np.array_equal(row[name], np.asarray(value, row[name].dtype)), name


_SERIALIZE_TWICE = """
import hashlib, sys
from albert.data import features, records
feature = {"input_ids": [5, 6, 7], "input_mask": [1, 1, 0], "segment_ids": [0, 1, 1],
           "label_ids": 1, "is_real_example": 1}
data = features._serialize(feature, features.infer_schema(feature), 0)
data += records.serialize_instance([2, 5, 3], [0, 0, 1], [1, 0, 1], [1], [5], 1, 4, 2)
data += records.padding_record(4, 2)
print(hashlib.sha256(data).hexdigest())
"""


def test_records_are_the_same_bytes_in_every_process():
    # The protobuf map of an Example's features is serialised in an order that changed from
    # process to process (3 hash seeds gave 3 digests): a rebuilt cache had other bytes.
    digests = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, TF_CPP_MIN_LOG_LEVEL="3")
        out = subprocess.run(
            [sys.executable, "-c", _SERIALIZE_TWICE], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-2000:]
        digests.add(out.stdout.split()[-1])
    assert len(digests) == 1


def test_in_memory_dataset_matches_the_cache(tmp_path):
    features = _features(3)
    path = str(tmp_path / "f.tfrecord")
    write_feature_records(path, features)
    cached, _ = read_feature_records(path)
    memory, count = features_to_dataset(features)
    assert count == 3
    assert cached.element_spec == memory.element_spec
    for a, b in zip(cached.as_numpy_iterator(), memory.as_numpy_iterator(), strict=True):
        for name in a:
            assert np.array_equal(a[name], b[name])


def test_write_rejects_uneven_or_empty_features(tmp_path):
    features = _features(3)
    features[1]["input_ids"] = [1, 2]
    with pytest.raises(FeatureError, match="Feature 1 has 2 values for 'input_ids'"):
        write_feature_records(str(tmp_path / "f.tfrecord"), features)
    assert not os.path.exists(schema_path(str(tmp_path / "f.tfrecord")))
    with pytest.raises(FeatureError, match="empty"):
        write_feature_records(str(tmp_path / "g.tfrecord"), [])


def test_load_or_create_uses_the_cache_the_second_time(tmp_path):
    calls = []

    def create():
        calls.append(1)
        return _features(5)

    path = str(tmp_path / "f.tfrecord")
    first = load_or_create_features(path, create)
    second = load_or_create_features(path, create)
    assert (first.from_cache, second.from_cache) == (False, True)
    assert len(calls) == 1
    assert first.num_examples == second.num_examples == 5
    labels = [row["label_ids"] for row in second.dataset.as_numpy_iterator()]
    assert labels == [0.0, 0.5, 1.0, 1.5, 2.0]
    in_memory = load_or_create_features(None, create)
    assert (in_memory.from_cache, in_memory.path, len(calls)) == (False, None, 2)


def test_read_missing_cache_says_where(tmp_path):
    with pytest.raises(FeatureError, match="No feature cache at"):
        read_feature_records(str(tmp_path / "none.tfrecord"))


def test_pad_dataset_appends_zero_examples():
    dataset, count = features_to_dataset(_features(4))
    rows = list(pad_dataset(dataset, count, 3).as_numpy_iterator())
    assert len(rows) == 6
    assert [int(r["is_real_example"]) for r in rows] == [1, 1, 1, 1, 0, 0]
    assert np.array_equal(rows[5]["input_ids"], np.zeros(5, np.int32))
    assert len(list(pad_dataset(dataset, count, 4).as_numpy_iterator())) == 4


def test_tokenizer_fingerprint_follows_model_bytes_and_lower_casing(tmp_path):
    base = tokenizer_fingerprint(FullTokenizer(spm_model_file=MODEL, do_lower_case=True))
    assert base == tokenizer_fingerprint(FullTokenizer(spm_model_file=MODEL, do_lower_case=True))
    assert base != tokenizer_fingerprint(FullTokenizer(spm_model_file=MODEL, do_lower_case=False))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    other = tokenizer_fingerprint(FullTokenizer(vocab_file=str(vocab)))
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nworld\n")
    assert other != tokenizer_fingerprint(FullTokenizer(vocab_file=str(vocab)))
    assert len(base) == 12

    class Bare:
        do_lower_case = True

    with pytest.raises(FeatureError, match="spm_model_file"):
        tokenizer_fingerprint(Bare())
