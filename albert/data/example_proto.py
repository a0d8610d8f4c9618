"""Pretraining records as tf.train.Example bytes, written without TensorFlow.

Worker processes of `create_pretraining_data` must not load TensorFlow (seconds of start-up and
hundreds of MB each), so they encode the record themselves in the protobuf wire format. The
bytes are exactly what `tf.train.Example.SerializeToString(deterministic=True)` gives for the
message `albert.data.records.serialize_instance` builds (tests/data/test_records.py checks
this): the features in sorted key order, every list packed.

Wire layout (protobuf encoding: a tag byte, then a varint length for nested messages):

    Example   { features = 1 : Features }
    Features  { feature  = 1 : repeated entry { key = 1 : string, value = 2 : Feature } }
    Feature   { float_list = 2 : FloatList, int64_list = 3 : Int64List }
    FloatList / Int64List { value = 1 : packed floats (4 bytes, little-endian) / varints }

Every value here is a non-negative int below 2**21 (vocabulary ids and positions), so a
varint takes at most 3 bytes.
"""

from __future__ import annotations

import functools

import numpy as np

_TAG_FIELD_1 = b"\x0a"  # field 1, length-delimited
_TAG_FIELD_2 = b"\x12"  # field 2, length-delimited
_TAG_FIELD_3 = b"\x1a"  # field 3, length-delimited
_FLOAT_ONE = np.float32(1.0).tobytes()
_FLOAT_ZERO = np.float32(0.0).tobytes()
_MAX_VARINT_BYTES = 3


def encode_varint(value: int) -> bytes:
    """A non-negative int -> protobuf varint bytes (7 bits a byte, low bits first)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + encode_varint(len(payload)) + payload


@functools.cache  # Few distinct (key, length) pairs; hit every record.
def _feature_entry_prefix(key: str, feature_tag: bytes, payload_length: int) -> bytes:
    """Bytes of a map entry `key -> Feature{list{packed payload}}`, up to the payload."""
    list_header = _TAG_FIELD_1 + encode_varint(payload_length)
    feature_length = len(list_header) + payload_length
    feature_header = feature_tag + encode_varint(feature_length)
    value_header = _TAG_FIELD_2 + encode_varint(len(feature_header) + feature_length)
    entry_length = len(value_header) + len(feature_header) + feature_length
    key_part = _length_delimited(_TAG_FIELD_1, key.encode())
    entry_length += len(key_part)
    return (
        _TAG_FIELD_1
        + encode_varint(entry_length)
        + key_part
        + value_header
        + feature_header
        + list_header
    )


class ExampleEncoder:
    """Encodes pretraining instances for one (max_seq_length, max_predictions_per_seq).

    Args:
        max_seq_length: T, the padded length of the sequence features.
        max_predictions_per_seq: P, the padded length of the masked-LM features.
        vocab_size: V; ids must lie in [0, V).

    Example:
        >>> encoder = ExampleEncoder(max_seq_length=128, max_predictions_per_seq=20, vocab_size=30000)
        >>> records = encoder.encode_batch(batch)  # an albert.data.masking.InstanceBatch
    """

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int, vocab_size: int):
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        size = max(vocab_size, max_seq_length, 1)
        if size >= 1 << (7 * _MAX_VARINT_BYTES):
            raise ValueError(f"vocab_size {vocab_size} is too large for 3-byte varints.")
        values = np.arange(size, dtype=np.int64)
        # [size, 3] varint bytes of every value, and how many of them are used.
        self._varint_bytes = np.stack(
            [(values >> (7 * k)) & 0x7F | ((values >> (7 * (k + 1))) > 0) * 0x80 for k in range(3)],
            axis=1,
        ).astype(np.uint8)
        self._varint_lengths = 1 + (values >= 1 << 7) + (values >= 1 << 14)
        self._used = np.arange(_MAX_VARINT_BYTES) < self._varint_lengths[:, None]  # [size, 3]
        t, p = max_seq_length, max_predictions_per_seq
        # Whole entries that depend on one small number are built once: input_mask by the
        # instance length, masked_lm_weights by the number of predictions.
        mask_prefix = _feature_entry_prefix("input_mask", _TAG_FIELD_3, t)
        self._input_mask = [mask_prefix + b"\x01" * n + b"\x00" * (t - n) for n in range(t + 1)]
        weights_prefix = _feature_entry_prefix("masked_lm_weights", _TAG_FIELD_2, 4 * p)
        self._weights = [
            weights_prefix + _FLOAT_ONE * k + _FLOAT_ZERO * (p - k) for k in range(p + 1)
        ]
        self._labels = [
            _feature_entry_prefix("next_sentence_labels", _TAG_FIELD_3, 1) + bytes([label])
            for label in (0, 1)
        ]
        # 0/1 features are one byte a value, so their entry prefix is fixed too.
        self._segment_prefix = _feature_entry_prefix("segment_ids", _TAG_FIELD_3, t)
        self._boundary_prefix = _feature_entry_prefix("token_boundary", _TAG_FIELD_3, t)

    def _varints(self, values: np.ndarray) -> tuple[bytes, list]:
        """[N] non-negative ints -> (their varints back to back, [N + 1] byte offsets)."""
        lengths = self._varint_lengths[values]
        offsets = [0, *np.cumsum(lengths).tolist()]
        return self._varint_bytes[values][self._used[values]].tobytes(), offsets

    def encode_batch(self, batch) -> list:
        """InstanceBatch -> list of M serialized tf.train.Example, 0-padded as the original.

        Args:
            batch: albert.data.masking.InstanceBatch with T = max_seq_length.

        Returns:
            M bytes objects, in the batch's order.
        """
        t, p = self.max_seq_length, self.max_predictions_per_seq
        if batch.input_ids.shape[1] != t:
            raise ValueError(f"Batch of length {batch.input_ids.shape[1]}, encoder of {t}.")
        valid = np.arange(t) < batch.lengths[:, None]  # [M, T]
        used = self._used[batch.input_ids] & valid[:, :, None]  # [M, T, 3]
        ids_bytes = self._varint_bytes[batch.input_ids][used].tobytes()
        ids_offsets = [0, *np.cumsum(used.sum(axis=(1, 2))).tolist()]
        lm_ids_bytes, lm_ids_offsets = self._varints(batch.masked_lm_ids)
        positions_bytes, positions_offsets = self._varints(batch.masked_lm_positions)
        boundary_bytes = batch.token_boundary.astype(np.uint8).tobytes()  # 0 in the padding.
        records = []
        rows = zip(
            batch.lengths.tolist(),
            batch.len_a.tolist(),
            batch.next_sentence_labels.tolist(),
            batch.prediction_offsets[:-1].tolist(),
            batch.prediction_offsets[1:].tolist(),
            strict=True,
        )
        for m, (n, len_a, label, lo, hi) in enumerate(rows):
            seq_pad = b"\x00" * (t - n)
            pred_pad = b"\x00" * (p - hi + lo)
            ids_payload = ids_bytes[ids_offsets[m] : ids_offsets[m + 1]] + seq_pad
            lm_ids_payload = lm_ids_bytes[lm_ids_offsets[lo] : lm_ids_offsets[hi]] + pred_pad
            positions_payload = (
                positions_bytes[positions_offsets[lo] : positions_offsets[hi]] + pred_pad
            )
            features = b"".join(
                (
                    _feature_entry_prefix("input_ids", _TAG_FIELD_3, len(ids_payload)),
                    ids_payload,
                    self._input_mask[n],
                    _feature_entry_prefix("masked_lm_ids", _TAG_FIELD_3, len(lm_ids_payload)),
                    lm_ids_payload,
                    _feature_entry_prefix(
                        "masked_lm_positions", _TAG_FIELD_3, len(positions_payload)
                    ),
                    positions_payload,
                    self._weights[hi - lo],
                    self._labels[label],
                    self._segment_prefix,
                    b"\x00" * (len_a + 2),
                    b"\x01" * (n - len_a - 2),
                    seq_pad,
                    self._boundary_prefix,
                    boundary_bytes[m * t : (m + 1) * t],
                )
            )
            records.append(_TAG_FIELD_1 + encode_varint(len(features)) + features)
        return records
