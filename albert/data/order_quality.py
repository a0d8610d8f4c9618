"""How much like a random sample of the corpus a window of consecutive records is.

The measure: in each window of `window` consecutive records of a shard, the fraction of record
pairs that share source text, i.e. at least one n-gram of token ids (masked tokens restored
from `masked_lm_ids`, special tokens left out). Re-masked copies of the same text (dupe
passes) and neighbouring chunks of one document share n-grams; unrelated text almost never
does. A file in corpus order scores far above a uniformly shuffled copy of the same records,
which is what the original's in-memory global shuffle gives.
"""

from __future__ import annotations

import itertools

import numpy as np


def parse_tokens(record: bytes, num_special_ids: int = 5) -> np.ndarray:
    """A serialized pretraining record -> its token ids with masked positions restored."""
    import tensorflow as tf

    feature = tf.train.Example.FromString(record).features.feature
    ids = np.array(feature["input_ids"].int64_list.value)
    length = int(np.sum(feature["input_mask"].int64_list.value))
    positions = np.array(feature["masked_lm_positions"].int64_list.value)
    masked_ids = np.array(feature["masked_lm_ids"].int64_list.value)
    weights = np.array(feature["masked_lm_weights"].float_list.value)
    used = weights > 0
    ids[positions[used]] = masked_ids[used]
    ids = ids[:length]
    return ids[ids >= num_special_ids]


def ngrams(tokens: np.ndarray, n: int) -> set:
    """The set of n-grams (as tuples) of a token sequence."""
    return {tuple(tokens[i : i + n].tolist()) for i in range(len(tokens) - n + 1)}


def sharing_fraction(token_lists: list, n: int = 8) -> float:
    """The fraction of pairs of sequences in `token_lists` that share an n-gram."""
    owners = {}
    for index, tokens in enumerate(token_lists):
        for gram in ngrams(tokens, n):
            owners.setdefault(gram, []).append(index)
    pairs = set()
    for indices in owners.values():
        if len(indices) > 1:
            pairs.update(itertools.combinations(sorted(set(indices)), 2))
    total = len(token_lists) * (len(token_lists) - 1) // 2
    return len(pairs) / max(total, 1)


def window_sharing(shards: list, window: int = 256, n: int = 8) -> float:
    """Mean `sharing_fraction` over the full windows of consecutive records of every shard.

    Args:
        shards: one list of token arrays (from `parse_tokens`) per shard, in file order.
        window: records per window; a shard's last partial window is left out.
        n: the n-gram length that counts as shared text.
    """
    fractions = [
        sharing_fraction(tokens[start : start + window], n)
        for tokens in shards
        for start in range(0, len(tokens) - window + 1, window)
    ]
    if not fractions:
        raise ValueError(f"No shard holds a full window of {window} records.")
    return float(np.mean(fractions))


def uniform_window_sharing(shards: list, window: int = 256, n: int = 8, seed: int = 0) -> float:
    """`window_sharing` of the same records uniformly shuffled (the original's statistics)."""
    everything = [tokens for shard in shards for tokens in shard]
    order = np.random.default_rng(seed).permutation(len(everything))
    shuffled = [everything[i] for i in order]
    return window_sharing([shuffled], window, n)
