"""Whole-word n-gram masking against the specification (a literal transcription of it)."""

import collections
import random

import numpy as np
import pytest

from albert.data import masking
from albert.data.masking import (
    MaskingVocabulary,
    VocabularyError,
    create_masked_lm_batch,
    is_start_piece,
)
from albert.data.pretraining import InstanceOptions, create_instance_batches
from tests.data.pretraining_testing import SPECIALS, NumberedCorpus


def test_is_start_piece_follows_the_reference_rule():
    starts = ["▁the", "▁", "<unk>", ",", "-", "1", "9s", "ab1", "é", "力", "ᴵᴺ"]
    # ' < = > are not in the original's punctuation set: any piece holding one starts a word.
    starts += ["x'", "''", "==", "'", "=", ">", "a=b"]
    continuations = ["ing", "s", "--", "a.b", "[CLS]", "(s)"]
    assert all(is_start_piece(p) for p in starts)
    assert not any(is_start_piece(p) for p in continuations)


def test_masking_vocabulary_needs_the_control_symbols():
    with pytest.raises(VocabularyError, match=r"\[MASK\]"):
        MaskingVocabulary({"[CLS]": 0, "[SEP]": 1, "▁a": 2})
    wordpiece = MaskingVocabulary({**SPECIALS, "the": 5, "##s": 6}, wordpiece=True)
    assert wordpiece.token_boundary.tolist() == [1, 1, 1, 1, 1, 1, 0]


def _reference_masked_count_and_runs(ids, len_a, options, vocab, rng):
    """The specification, transcribed literally (token lists, shuffled n-gram candidates)."""
    specials = {0, len_a + 1, len(ids) - 1}
    cand_indexes = []
    for i, token in enumerate(ids):
        if i in specials:
            continue
        new_word = (
            i - 1 in specials or vocab.token_boundary[token] or not options.do_whole_word_mask
        )
        if new_word or not cand_indexes:
            cand_indexes.append([i])
        else:
            cand_indexes[-1].append(i)
    budget = min(options.max_predictions_per_seq, max(1, round(len(ids) * options.masked_lm_prob)))
    spans = [
        [cand_indexes[w : w + n] for n in range(1, options.ngram + 1)]
        for w in range(len(cand_indexes))
    ]
    rng.shuffle(spans)
    pvals = options.ngram_probabilities()
    covered, masked_words = set(), []
    for candidate in spans:
        if len(covered) >= budget:
            break
        n = rng.choices(range(1, options.ngram + 1), weights=pvals)[0]
        while n > 1 and len(covered) + sum(map(len, candidate[n - 1])) > budget:
            n -= 1
        tokens = [i for word in candidate[n - 1] for i in word]
        if len(covered) + len(tokens) > budget or covered & set(tokens):
            continue
        covered.update(tokens)
        masked_words.extend(tuple(word) for word in candidate[n - 1])
    return len(covered), _word_runs(cand_indexes, set(masked_words))


def _word_runs(cand_indexes, masked_words):
    """Lengths of the maximal runs of consecutive masked words."""
    runs, current = [], 0
    for word in cand_indexes:
        if tuple(word) in masked_words:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs + [current] if current else runs


def _masked_batch(corpus, options, seed, dupes):
    options = InstanceOptions(**{**options.__dict__, "dupe_factor": dupes})
    rng, np_rng = random.Random(seed), np.random.default_rng(seed)
    return list(
        create_instance_batches(corpus.documents, options, corpus.masking_vocab, rng, np_rng)
    )


def _unmasked(batch, m):
    ids = batch.input_ids[m, : batch.lengths[m]].copy()
    positions, originals = batch.predictions(m)
    ids[positions] = originals
    return ids


@pytest.mark.parametrize(
    "max_seq_length, masked_lm_prob, favor_shorter_ngram",
    [(101, 0.2, True), (101, 0.2, False), (23, 0.1, False)],  # The last: a budget of 1-2.
)
def test_masking_matches_the_specification_in_distribution(
    max_seq_length, masked_lm_prob, favor_shorter_ngram
):
    corpus = NumberedCorpus(12, [8, 12], [5, 9, 14])
    options = InstanceOptions(
        max_seq_length=max_seq_length,
        max_predictions_per_seq=20,
        masked_lm_prob=masked_lm_prob,
        favor_shorter_ngram=favor_shorter_ngram,
    )
    vocab = corpus.masking_vocab
    ours, reference = collections.Counter(), collections.Counter()
    counts_ours, counts_reference = [], []
    rng = random.Random(5)
    for batch in _masked_batch(corpus, options, seed=4, dupes=80 if max_seq_length > 50 else 20):
        for m in range(len(batch.lengths)):
            ids, len_a = _unmasked(batch, m), int(batch.len_a[m])
            positions, _ = batch.predictions(m)
            count, runs = _reference_masked_count_and_runs(ids, len_a, options, vocab, rng)
            counts_reference.append(count)
            reference.update(min(r, 4) for r in runs)
            cand = _candidate_lists(ids, len_a, vocab)
            masked_words = {tuple(w) for w in cand if set(w) <= set(positions.tolist())}
            counts_ours.append(len(positions))
            ours.update(min(r, 4) for r in _word_runs(cand, masked_words))
    assert len(counts_ours) > 1000
    assert abs(np.mean(counts_ours) - np.mean(counts_reference)) < 0.1
    for n in (1, 2, 3, 4):
        p_ours = ours[n] / sum(ours.values())
        p_reference = reference[n] / sum(reference.values())
        assert abs(p_ours - p_reference) < 0.025, (n, ours, reference)
    # The runs follow p(n) ~ 1/n (or its reverse), blurred by the budget and adjacent n-grams.
    if max_seq_length < 50:
        return
    if favor_shorter_ngram:
        assert ours[1] > 0.5 * sum(ours.values()) and ours[1] > ours[2] > ours[3]
    else:
        assert ours[3] > max(ours[1], ours[2])


def test_cls_and_sep_end_words():
    vocab = MaskingVocabulary({**SPECIALS, "▁a": 5, "b": 6})
    a, b = np.array([5, 6], np.int32), np.array([6, 6, 5], np.int32)  # B starts mid-word.
    options = InstanceOptions(max_seq_length=11)
    batch = create_masked_lm_batch([(a, b, 0)], options, vocab, np.random.default_rng(0))
    assert _unmasked(batch, 0).tolist() == [2, 5, 6, 3, 6, 6, 5, 3]
    _, starts, ends, _ = masking._candidate_words(
        _unmasked(batch, 0)[None], batch.lengths, batch.len_a, vocab, whole_word=True
    )
    assert starts.tolist() == [1, 4, 6] and ends.tolist() == [3, 6, 7]
    np.testing.assert_array_equal(batch.token_boundary[0], [1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0])


def _candidate_lists(ids, len_a, vocab):
    specials = {0, len_a + 1, len(ids) - 1}
    words = []
    for i, token in enumerate(ids):
        if i in specials:
            continue
        if i - 1 in specials or vocab.token_boundary[token] or not words:
            words.append([i])
        else:
            words[-1].append(i)
    return words


def test_masking_invariants():
    corpus = NumberedCorpus(15, [5, 10], [4, 11])
    options = InstanceOptions(max_seq_length=47, max_predictions_per_seq=5, short_seq_prob=0.3)
    vocab = corpus.masking_vocab
    replacements = collections.Counter()
    fractions = []
    for batch in _masked_batch(corpus, options, seed=7, dupes=60):
        assert batch.input_ids.shape[1] == 47
        for m in range(len(batch.lengths)):
            n, len_a = int(batch.lengths[m]), int(batch.len_a[m])
            ids = _unmasked(batch, m)
            assert ids[0] == vocab.cls_id and ids[len_a + 1] == vocab.sep_id == ids[-1]
            assert not batch.input_ids[m, n:].any() and not batch.token_boundary[m, n:].any()
            positions, originals = batch.predictions(m)
            budget = min(5, max(1, round(n * 0.15)))
            assert len(positions) <= budget  # 0 when every word is longer than the budget.
            assert np.all(np.diff(positions) > 0)  # Sorted, no position twice.
            assert not {0, len_a + 1, n - 1} & set(positions.tolist())
            for word in _candidate_lists(ids, len_a, vocab):  # Whole words only.
                assert len(set(word) & set(positions.tolist())) in (0, len(word))
            fractions.append(len(positions) / budget)
            out = batch.input_ids[m, positions]
            replacements["mask"] += int(np.sum(out == vocab.mask_id))
            replacements["keep"] += int(np.sum(out == originals))
            replacements["random"] += int(np.sum((out != vocab.mask_id) & (out != originals)))
            assert np.all(
                batch.token_boundary[m, :n] == vocab.token_boundary[ids] | _special(n, len_a)
            )
    total = sum(replacements.values())
    assert total > 7000
    assert abs(replacements["mask"] / total - 0.8) < 0.015, replacements
    assert abs(replacements["keep"] / total - 0.1) < 0.012, replacements
    assert abs(replacements["random"] / total - 0.1) < 0.012, replacements
    assert np.mean(fractions) > 0.9  # The budget is nearly always filled.


def _special(n, len_a):
    special = np.zeros([n], dtype=np.uint8)
    special[[0, len_a + 1, n - 1]] = 1
    return special


def test_masked_fraction_is_masked_lm_prob_without_a_cap():
    corpus = NumberedCorpus(10, [10], [6, 9])
    options = InstanceOptions(max_seq_length=97, max_predictions_per_seq=97, masked_lm_prob=0.2)
    ratios = [
        len(batch.predictions(m)[0]) / batch.lengths[m]
        for batch in _masked_batch(corpus, options, seed=1, dupes=10)
        for m in range(len(batch.lengths))
    ]
    assert abs(np.mean(ratios) - 0.2) < 0.01


def test_piece_masking_without_whole_words_masks_single_pieces():
    corpus = NumberedCorpus(8, [10], [9])
    options = InstanceOptions(max_seq_length=50, ngram=1, do_whole_word_mask=False)
    continuation_masked = 0
    for batch in _masked_batch(corpus, options, seed=2, dupes=5):
        for m in range(len(batch.lengths)):
            positions, originals = batch.predictions(m)
            continuation_masked += int(np.sum(corpus.masking_vocab.token_boundary[originals] == 0))
    assert continuation_masked > 0


def test_same_seed_same_batch_and_empty_input():
    corpus = NumberedCorpus(5, [6], [5])
    options = InstanceOptions(max_seq_length=30)
    first = _masked_batch(corpus, options, seed=9, dupes=2)
    again = _masked_batch(corpus, options, seed=9, dupes=2)
    other = _masked_batch(corpus, options, seed=10, dupes=2)
    for x, y in zip(first, again, strict=True):
        for field in x._fields:
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field))
    assert not np.array_equal(first[0].input_ids, other[0].input_ids)
    empty = create_masked_lm_batch([], options, corpus.masking_vocab, np.random.default_rng(0))
    assert empty.input_ids.shape == (0, 30) and len(empty.prediction_offsets) == 1


def test_random_replacements_are_uniform_over_the_whole_vocabulary():
    # The original draws the 10% replacements with randint(0, len(vocab) - 1): every id,
    # the last one included, and none beyond the vocabulary.
    vocab = MaskingVocabulary({**SPECIALS, **{f"▁w{i}": i for i in range(5, 13)}})  # V = 13
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(5, 13, 10, dtype=np.int32), rng.integers(5, 13, 9), 0)] * 3000
    options = InstanceOptions(max_seq_length=22, max_predictions_per_seq=3, ngram=1)
    batch = create_masked_lm_batch(pairs, options, vocab, np.random.default_rng(1))
    replaced = collections.Counter()
    for m in range(len(pairs)):
        positions, originals = batch.predictions(m)
        out = batch.input_ids[m, positions]
        replaced.update(out[(out != vocab.mask_id) & (out != originals)].tolist())
    assert set(replaced) == set(range(13)) - {vocab.mask_id}, replaced
    counts = np.array([replaced[i] for i in range(13) if i != vocab.mask_id])
    assert counts.min() > 0.75 * counts.mean(), replaced


def test_a_short_instance_whose_budget_rounds_to_zero_still_masks_one_token():
    # round(5 * 0.1) == 0 (round half to even): the max(1, ...) of the original gives 1.
    vocab = MaskingVocabulary({**SPECIALS, "▁a": 5, "▁b": 6})
    options = InstanceOptions(max_seq_length=9, masked_lm_prob=0.1)
    pairs = [(np.array([5], np.int32), np.array([6], np.int32), 0)] * 20
    batch = create_masked_lm_batch(pairs, options, vocab, np.random.default_rng(0))
    assert batch.lengths.tolist() == [5] * 20
    assert np.diff(batch.prediction_offsets).tolist() == [1] * 20
