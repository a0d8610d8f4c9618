"""Whole-word n-gram masking for a batch of `[CLS] A [SEP] B [SEP]` pairs (numpy + a small loop).

The rule is the original's (reference section 5): `num_to_predict = min(max_predictions_per_seq,
max(1, round(len * masked_lm_prob)))` tokens are masked, as whole words. The candidate words of
an instance are visited in a random order; at each an n-gram length n in 1..ngram is drawn with
p(n) proportional to 1/n (reversed when not `favor_shorter_ngram`); n-grams are n consecutive
candidate words (the slice is shorter at the end of the instance, as the original's). n is
shortened while the n-gram would pass the budget, and the candidate is skipped if it still
does or overlaps what is already masked. Each masked token becomes [MASK] (80%), stays (10%)
or becomes a uniformly random id (10%). [CLS] and [SEP] are never masked.

Everything that does not depend on earlier choices (word spans, visiting order, the n draws,
the 80/10/10 draws) is computed for the whole batch at once; only the budgeted n-gram walk is
a Python loop. Per-instance numpy calls would cost more than the masking itself.

Choices where the original has a quirk:
- All draws come from a seeded generator (the original draws n from the unseeded global numpy
  RNG, so its output cannot be reproduced).
- [CLS] and [SEP] end a word: the first piece after them starts one even when it is a
  continuation piece (A or B cut at the front). The original glues such a piece to the word
  before the [SEP]. An n-gram may still hold the last word of A and the first of B, as in the
  original (never the [SEP] between them).
- With a WordPiece vocabulary (no SentencePiece model) a piece starts a word unless it begins
  with "##"; the SentencePiece rule would glue most English WordPiece words together.

Shape letters: M = instances in the batch, T = max_seq_length, V = vocabulary size,
K = predictions in the whole batch, G = candidate words in the whole batch.
"""

from __future__ import annotations

import string
from typing import NamedTuple

import numpy as np

from albert.errors import AlbertError

# The original's set: ASCII punctuation less ' < = > (its `_is_start_piece` in
# create_pretraining_data.py); a piece holding any of those four starts a word.
_SPECIAL_PUNCTUATION = frozenset(string.punctuation) - set("'<=>")
_LETTERS_AND_PUNCTUATION = frozenset(string.ascii_letters) | _SPECIAL_PUNCTUATION


class VocabularyError(AlbertError):
    """A vocabulary that lacks what pretraining data needs."""


def is_start_piece(piece: str) -> bool:
    """Whether a SentencePiece piece starts a new word (the original's rule).

    True if the piece begins with "▁" or "<", is one character of ASCII punctuation less
    `'`, `<`, `=`, `>`, or holds any character that is neither an ASCII letter nor in that set
    (so digits, non-Latin script and pieces such as `''`, `==` or `x'` start a word).
    """
    if piece.startswith(("▁", "<")) or piece in _SPECIAL_PUNCTUATION:
        return True
    return any(char not in _LETTERS_AND_PUNCTUATION for char in piece)


class MaskingVocabulary:
    """What masking needs from a tokenizer's vocabulary.

    Args:
        vocab: dict piece -> id (`FullTokenizer.vocab`); must hold [CLS], [SEP] and [MASK].
        wordpiece: the vocabulary is BERT WordPiece ("##" continuations) rather than
            SentencePiece, which changes what starts a word.

    Raises:
        VocabularyError: a special piece is missing.

    Example:
        >>> vocab = MaskingVocabulary(FullTokenizer(spm_model_file="30k-clean.model").vocab)
    """

    def __init__(self, vocab: dict, wordpiece: bool = False):
        missing = [p for p in ("[CLS]", "[SEP]", "[MASK]") if p not in vocab]
        if missing:
            raise VocabularyError(
                f"The vocabulary has no {', '.join(missing)}; use a model trained with these "
                "control symbols (albert.data.vocab trains one)."
            )
        self.cls_id = vocab["[CLS]"]
        self.sep_id = vocab["[SEP]"]
        self.mask_id = vocab["[MASK]"]
        self.size = max(vocab.values()) + 1
        starts = np.zeros([self.size], dtype=np.uint8)  # [V]
        for piece, index in vocab.items():
            starts[index] = not piece.startswith("##") if wordpiece else is_start_piece(piece)
        # token_boundary is 1 at [CLS] and [SEP] too (the original's record layout).
        starts[[self.cls_id, self.sep_id]] = 1
        self.token_boundary = starts


class InstanceBatch(NamedTuple):
    """M masked instances, each `[CLS] A [SEP] B [SEP]`, 0-padded to T.

    Attributes:
        input_ids: [M, T] int32 ids after masking.
        lengths: [M] tokens of each instance (input_mask is 1 below it).
        len_a: [M] tokens of A (segment 0 is `[CLS] A [SEP]`, segment 1 the rest).
        token_boundary: [M, T] uint8, 1 where a piece starts a word and at [CLS]/[SEP].
        masked_lm_positions: [K] int32 sorted positions within each instance, back to back.
        masked_lm_ids: [K] int32 original ids at those positions.
        prediction_offsets: [M + 1]; instance m owns predictions offsets[m]:offsets[m + 1].
        next_sentence_labels: [M] 0 (A then B, as in the text) or 1 (swapped or random B).
    """

    input_ids: np.ndarray
    lengths: np.ndarray
    len_a: np.ndarray
    token_boundary: np.ndarray
    masked_lm_positions: np.ndarray
    masked_lm_ids: np.ndarray
    prediction_offsets: np.ndarray
    next_sentence_labels: np.ndarray

    def segment_ids(self) -> np.ndarray:
        """[M, T] 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`, 0 in the padding."""
        positions = np.arange(self.input_ids.shape[1])
        return ((positions > self.len_a[:, None] + 1) & (positions < self.lengths[:, None])).astype(
            np.int32
        )

    def predictions(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """(masked_lm_positions, masked_lm_ids) of instance m, each [k]."""
        lo, hi = self.prediction_offsets[m], self.prediction_offsets[m + 1]
        return self.masked_lm_positions[lo:hi], self.masked_lm_ids[lo:hi]


def _layout(pairs, max_seq_length, vocab):
    """Pairs (A ids, B ids, label) -> [M, T] unmasked ids, [M] lengths, [M] len_a."""
    ids = np.zeros([len(pairs), max_seq_length], dtype=np.int32)  # [M, T]
    len_a = np.fromiter((len(a) for a, _, _ in pairs), dtype=np.int64, count=len(pairs))
    lengths = len_a + np.fromiter((len(b) for _, b, _ in pairs), np.int64, len(pairs)) + 3
    for row, (a, b, _) in zip(ids, pairs, strict=True):
        row[1 : len(a) + 1] = a
        row[len(a) + 2 : len(a) + 2 + len(b)] = b
    rows = np.arange(len(pairs))
    ids[:, 0] = vocab.cls_id
    ids[rows, len_a + 1] = vocab.sep_id
    ids[rows, lengths - 1] = vocab.sep_id
    return ids, lengths, len_a


def _candidate_words(ids, lengths, len_a, vocab, whole_word):
    """Token boundaries and the candidate words of every instance.

    Returns:
        token_boundary: [M, T] uint8.
        word_starts, word_ends: [G] flat positions (row * T + position) of each word, in
            row-major order; word g covers flat positions word_starts[g]:word_ends[g].
        word_rows: [G] the instance of each word.
    """
    seq_length = ids.shape[1]
    positions = np.arange(seq_length)  # [T]
    valid = positions < lengths[:, None]  # [M, T]
    special = (
        (positions == 0) | (positions == len_a[:, None] + 1) | (positions == lengths[:, None] - 1)
    )
    token_boundary = vocab.token_boundary[ids] * valid  # [M, T]
    if whole_word:
        # Every boundary opens a word, and so does the first piece of A and of B.
        breaks = token_boundary.astype(bool) | (positions == 1) | (positions == len_a[:, None] + 2)
        breaks &= valid
    else:
        breaks = valid
    flat_breaks = np.flatnonzero(breaks)  # [breaks]
    rows = flat_breaks // seq_length
    # A break's span runs to the next break or to the end of its instance.
    span_ends = np.minimum(
        np.append(flat_breaks[1:], breaks.size), rows * seq_length + lengths[rows]
    )
    is_word = ~special.ravel()[flat_breaks]
    return token_boundary, flat_breaks[is_word], span_ends[is_word], rows[is_word]


def _select_ngrams(budgets, row_offsets, order, ngram_lengths, cumulative):
    """The budgeted n-gram walk: which words each instance masks.

    Args:
        budgets: [M] num_to_predict per instance.
        row_offsets: [M + 1]; instance m's words are g in row_offsets[m]:row_offsets[m + 1].
        order: [G] word indexes, each instance's words in a random order (grouped by row).
        ngram_lengths: [G] the n drawn at each visit.
        cumulative: [G + 1] tokens in words 0..g-1, so words g..g+n-1 hold
            cumulative[g + n] - cumulative[g].

    Returns:
        [G] uint8, 1 for every chosen word.
    """
    covered = bytearray(len(order))
    for m, budget in enumerate(budgets):
        lo, hi = row_offsets[m], row_offsets[m + 1]
        num_masked = 0
        for word, n in zip(order[lo:hi], ngram_lengths[lo:hi], strict=True):
            # Words word..word+n-1 fit while cumulative[word + n] <= limit.
            limit = cumulative[word] + budget - num_masked
            n = min(n, hi - word)  # The n-gram slice is shorter at the end of the instance.
            while n > 1 and cumulative[word + n] > limit:
                n -= 1
            if cumulative[word + n] > limit or any(covered[word : word + n]):
                continue
            covered[word : word + n] = b"\x01" * n
            num_masked += cumulative[word + n] - cumulative[word]
            if num_masked >= budget:
                break
    return np.frombuffer(covered, dtype=np.uint8)


def create_masked_lm_batch(pairs, options, vocab, np_rng) -> InstanceBatch:
    """Lays out and masks a batch of sentence pairs.

    Args:
        pairs: list of (A ids [la], B ids [lb], label), la + lb <= max_seq_length - 3.
        options: InstanceOptions (max_seq_length, max_predictions_per_seq, masked_lm_prob,
            ngram, favor_shorter_ngram, do_whole_word_mask).
        vocab: MaskingVocabulary.
        np_rng: np.random.Generator; the batch draws from it in a fixed order.

    Returns:
        InstanceBatch.
    """
    seq_length = options.max_seq_length
    ids, lengths, len_a = _layout(pairs, seq_length, vocab)
    token_boundary, word_starts, word_ends, word_rows = _candidate_words(
        ids, lengths, len_a, vocab, options.do_whole_word_mask
    )
    num_words = len(word_starts)
    row_offsets = np.searchsorted(word_rows, np.arange(len(pairs) + 1)).tolist()
    # Each instance's words in a random order: sort by (row, random key).
    order = np.lexsort((np_rng.random(num_words), word_rows)).tolist()
    cdf = np.cumsum(options.ngram_probabilities())
    ngram_lengths = (np.searchsorted(cdf, np_rng.random(num_words), side="right") + 1).tolist()
    word_lengths = word_ends - word_starts  # [G]
    cumulative = [0, *np.cumsum(word_lengths).tolist()]
    budgets = [
        min(options.max_predictions_per_seq, max(1, round(length * options.masked_lm_prob)))
        for length in lengths.tolist()
    ]
    covered = _select_ngrams(budgets, row_offsets, order, ngram_lengths, cumulative)  # [G]
    chosen = np.flatnonzero(covered)  # Sorted: rows in order, words in order within a row.
    # Expand the chosen words into their token positions (flat, sorted).
    sizes = word_lengths[chosen]
    firsts = np.cumsum(sizes) - sizes
    flat_positions = np.repeat(word_starts[chosen] - firsts, sizes) + np.arange(sizes.sum())  # [K]
    flat_ids = ids.ravel()
    masked_lm_ids = flat_ids[flat_positions]
    # u < 0.8: [MASK]; 0.8 <= u < 0.9: keep; u >= 0.9: a uniformly random id.
    u, r = np_rng.random([2, len(flat_positions)])
    output = flat_ids.copy()
    output[flat_positions[u < 0.8]] = vocab.mask_id
    replace = u >= 0.9
    output[flat_positions[replace]] = (r[replace] * vocab.size).astype(np.int32)
    per_row = np.bincount(flat_positions // seq_length, minlength=len(pairs))
    return InstanceBatch(
        input_ids=output.reshape(ids.shape),
        lengths=lengths,
        len_a=len_a,
        token_boundary=token_boundary,
        masked_lm_positions=(flat_positions % seq_length).astype(np.int32),
        masked_lm_ids=masked_lm_ids,
        prediction_offsets=np.concatenate([[0], np.cumsum(per_row)]),
        next_sentence_labels=np.array([label for _, _, label in pairs], dtype=np.int64),
    )
