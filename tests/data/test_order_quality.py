"""The order-quality measure on hand-made records: restored masks, n-grams, full windows."""

import numpy as np

from albert.data import order_quality
from albert.data.records import serialize_instance


def test_parse_tokens_restores_masked_tokens_and_drops_specials_and_padding():
    # [CLS]=2 7 [MASK]=4 9 [SEP]=3, padded to 9; position 2 held 8 before masking. The
    # second prediction slot is padding (weight 0): its position 0 must not be touched.
    record = serialize_instance([2, 7, 4, 9, 5, 3], [0] * 6, [1] * 6, [2], [8], 0, 9, 2)
    np.testing.assert_array_equal(order_quality.parse_tokens(record), [7, 8, 9, 5])


def test_ngrams_include_the_last_one():
    assert order_quality.ngrams(np.array([1, 2, 3, 4]), 3) == {(1, 2, 3), (2, 3, 4)}
    assert order_quality.ngrams(np.array([1, 2]), 3) == set()


def test_sharing_fraction_counts_pairs_once():
    shared = np.arange(10, 20)
    tokens = [shared, shared[::-1], np.concatenate([shared, shared]), np.arange(50, 60)]
    # Pairs sharing an 8-gram: (0, 2) only (1 is reversed, 3 is other text), of 6 pairs.
    assert order_quality.sharing_fraction(tokens, n=8) == 1 / 6


def test_window_sharing_averages_the_full_windows_only():
    same, other = np.arange(10, 20), np.arange(50, 60)
    # Windows of 2: (same, same) shares -> 1.0, (other, same) -> 0.0; the last record is a
    # partial window. A window starting at every record would add (same, other) -> 0.0.
    shard = [same, same, other, same, other]
    assert order_quality.window_sharing([shard], window=2, n=8) == 0.5
    assert order_quality.window_sharing([[same, same]], window=2, n=8) == 1.0
