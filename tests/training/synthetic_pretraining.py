"""Synthetic but learnable pretraining records and a tiny config, for the training tests.

Segment A counts up from a random start in [5, 50), segment B counts up in [50, 95); a
swapped pair (SOP label 1) puts B first. Masked tokens are predictable from their
neighbours, and the order from the token ranges, so a tiny model learns both quickly.
"""

import json

import numpy as np

from albert.data import records
from tests.helpers import tiny_config

VOCAB_SIZE = 99
MAX_SEQ_LENGTH = 32
MAX_PREDICTIONS = 5
CLS, SEP, MASK = 2, 3, 4

# Small enough to learn these records in a few hundred steps; every key, as a config file holds.
TINY_CONFIG = tiny_config(
    vocab_size=VOCAB_SIZE,
    embedding_size=16,
    hidden_size=24,
    num_hidden_layers=2,
    num_hidden_groups=1,
    num_attention_heads=2,
    intermediate_size=40,
    inner_group_num=1,
    max_position_embeddings=64,
    type_vocab_size=2,
).to_dict()


def write_config(path, **changes):
    with open(path, "w") as f:
        json.dump({**TINY_CONFIG, **changes}, f)
    return str(path)


def _instance(rng, max_seq_length, max_predictions):
    length_a = int(rng.integers(4, (max_seq_length - 3) // 2 + 1))
    length_b = int(rng.integers(4, max_seq_length - 3 - length_a + 1))
    a = [int(rng.integers(5, 50 - length_a)) + i for i in range(length_a)]
    b = [int(rng.integers(50, 95 - length_b)) + i for i in range(length_b)]
    label = int(rng.integers(0, 2))
    first, second = (b, a) if label else (a, b)
    tokens = [CLS, *first, SEP, *second, SEP]
    segments = [0] * (len(first) + 2) + [1] * (len(second) + 1)
    candidates = [i for i, t in enumerate(tokens) if t not in (CLS, SEP)]
    count = int(rng.integers(1, max_predictions + 1))
    positions = sorted(rng.choice(candidates, size=count, replace=False).tolist())
    ids = [tokens[p] for p in positions]
    for p in positions:
        tokens[p] = MASK
    return tokens, segments, positions, ids, label


def write_records(
    path, num_examples, seed=0, max_seq_length=MAX_SEQ_LENGTH, max_predictions=MAX_PREDICTIONS
):
    """Writes `num_examples` synthetic records to the TFRecord file `path`."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for _ in range(num_examples):
            tokens, segments, positions, ids, label = _instance(
                rng, max_seq_length, max_predictions
            )
            writer.write(
                records.serialize_instance(
                    tokens,
                    segments,
                    [1] * len(tokens),
                    positions,
                    ids,
                    label,
                    max_seq_length,
                    max_predictions,
                )
            )
    return str(path)
