"""Sentence pairs (SOP / NSP), truncation and tokenization of documents."""

import collections
import random

import numpy as np
import pytest

from albert.data.pretraining import (
    InstanceOptions,
    InstanceOptionsError,
    PieceIds,
    create_pairs_from_document,
    tokenize_document,
    truncation_counts,
)
from albert.tokenization import FullTokenizer
from tests.data.pretraining_testing import NumberedCorpus, origins
from tests.helpers import train_tiny_spm


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_predictions_per_seq", 600),
        ("max_predictions_per_seq", 0),
        ("masked_lm_prob", 0.0),
        ("masked_lm_prob", 1.5),
        ("short_seq_prob", -0.1),
        ("max_seq_length", 4),
        ("ngram", 0),
        ("dupe_factor", 0),
    ],
)
def test_options_out_of_range_name_the_flag(field, value):
    with pytest.raises(InstanceOptionsError, match=f"--{field}"):
        InstanceOptions(**{field: value}).validate()


def test_ngram_probabilities():
    np.testing.assert_allclose(InstanceOptions().ngram_probabilities(), [6 / 11, 3 / 11, 2 / 11])
    reversed_ = InstanceOptions(favor_shorter_ngram=False).ngram_probabilities()
    np.testing.assert_allclose(reversed_, [2 / 11, 3 / 11, 6 / 11])


def test_tokenize_document_matches_the_tokenizer(tmp_path):
    tokenizer = FullTokenizer(spm_model_file=train_tiny_spm(tmp_path))
    sentences = ["The fox, 1,000 times.", "  ", "力加勝北区 Ünïcode ᴵᴺ", "Bake the bread."]
    document = tokenize_document(sentences, tokenizer)
    expected = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(s)) for s in sentences]
    expected = [ids for ids in expected if ids]  # The blank sentence has no tokens.
    assert document.ids.tolist() == [i for ids in expected for i in ids]
    assert document.bounds == np.cumsum([0] + [len(ids) for ids in expected]).tolist()
    assert PieceIds(tokenizer).unknown_id == 1 and 1 in document.ids  # <unk> for the CJK text.
    assert tokenize_document(["", " "], tokenizer) is None


def test_truncation_counts_match_the_token_by_token_loop():
    for len_a in range(1, 15):
        for len_b in range(1, 15):
            for max_num_tokens in range(2, 30):
                a, b = len_a, len_b
                while a + b > max_num_tokens:
                    if a > b:
                        a -= 1
                    else:
                        b -= 1
                assert truncation_counts(len_a, len_b, max_num_tokens) == (len_a - a, len_b - b)


def test_truncation_cuts_both_ends_and_keeps_pairs_in_range():
    corpus = NumberedCorpus(6, [2, 3], [30, 60])
    options = InstanceOptions(max_seq_length=23, short_seq_prob=0.0)
    rng = random.Random(3)
    front_cut = back_cut = 0
    for _ in range(20):
        for index in range(len(corpus.documents)):
            for a, b, _ in create_pairs_from_document(corpus.documents, index, options, rng):
                assert len(a) >= 1 and len(b) >= 1 and len(a) + len(b) <= 20
                for part in (a, b):
                    assert np.all(np.diff(part) == 1)  # A contiguous stretch of the text.
                    d, s = corpus.origin[int(part[0])]
                    document = corpus.documents[d]
                    front_cut += int(part[0]) != document.ids[document.bounds[s]]
                    last = corpus.origin[int(part[-1])][1]
                    back_cut += int(part[-1]) != document.ids[document.bounds[last + 1] - 1]
    assert front_cut > 100 and back_cut > 100


def test_sop_labels_are_balanced_and_label_0_keeps_the_text_order():
    corpus = NumberedCorpus(20, [6, 9, 12], [3, 5, 7])
    options = InstanceOptions(max_seq_length=40, short_seq_prob=0.0)
    rng = random.Random(0)
    labels = collections.Counter()
    for _ in range(60):
        for index in range(len(corpus.documents)):
            for a, b, label in create_pairs_from_document(corpus.documents, index, options, rng):
                doc_a, doc_b = origins(corpus, a)[0][0], origins(corpus, b)[0][0]
                sentences_a = {s for _, s in origins(corpus, a)}
                sentences_b = {s for _, s in origins(corpus, b)}
                if doc_a != doc_b:
                    assert label == 1 and len(sentences_a) == 1  # Only a one-sentence chunk.
                    kind = "random"
                elif label == 0:  # A then B, as in the text.
                    assert max(sentences_a) < min(sentences_b)
                    kind = "kept"
                else:  # B then A.
                    assert min(sentences_a) > max(sentences_b)
                    kind = "swapped"
                labels[kind] += 1
    total = sum(labels.values())
    assert total > 1500
    assert 0.46 < labels["kept"] / (labels["kept"] + labels["swapped"]) < 0.54, labels
    assert labels["random"] / total < 0.1, labels


def test_one_sentence_chunks_take_b_from_another_document():
    corpus = NumberedCorpus(5, [3], [40])  # Every sentence fills a chunk by itself.
    options = InstanceOptions(max_seq_length=24, short_seq_prob=0.0)
    rng = random.Random(0)
    pairs = create_pairs_from_document(corpus.documents, 2, options, rng)
    assert len(pairs) == 3
    for a, b, label in pairs:
        assert label == 1
        assert origins(corpus, a)[0][0] == 2 and origins(corpus, b)[0][0] != 2


def test_random_next_sentence_gives_bert_nsp_pairs():
    corpus = NumberedCorpus(20, [6, 9], [3, 5])
    options = InstanceOptions(max_seq_length=30, short_seq_prob=0.0, random_next_sentence=True)
    rng = random.Random(1)
    labels = collections.Counter()
    for index in range(len(corpus.documents)):
        for a, b, label in create_pairs_from_document(corpus.documents, index, options, rng):
            origin_a, origin_b = origins(corpus, a), origins(corpus, b)
            if label == 0:
                assert origin_a[0][0] == origin_b[0][0]
                assert origin_b[0][1] == origin_a[-1][1] + 1
            else:
                assert origin_a[0][0] != origin_b[0][0]  # Never a swap: B is from elsewhere.
            labels[label] += 1
    assert 0.4 < labels[1] / sum(labels.values()) < 0.6, labels


def test_short_seq_prob_makes_shorter_instances():
    corpus = NumberedCorpus(10, [100], [4])
    lengths = {}
    for prob in (0.0, 1.0):
        options = InstanceOptions(max_seq_length=64, short_seq_prob=prob)
        rng = random.Random(2)
        pairs = [
            pair
            for index in range(10)
            for _ in range(5)
            for pair in create_pairs_from_document(corpus.documents, index, options, rng)
        ]
        lengths[prob] = np.mean([len(a) + len(b) for a, b, _ in pairs])
    assert lengths[0.0] > 52 and lengths[1.0] < 40, lengths


def test_a_wordpiece_vocab_without_unk_is_one_clear_error(tmp_path):
    from albert.data.pretraining import PieceIds
    from albert.tokenization import TokenizerError

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
    with pytest.raises(TokenizerError, match="vocab.txt' has no \\[UNK\\]"):
        PieceIds(FullTokenizer(vocab_file=str(vocab)))


def test_short_target_lengths_are_uniform_from_2_to_the_maximum():
    # One-token sentences: the first chunk of a document holds exactly the target length,
    # which short_seq_prob=1 draws uniformly from [2, max_seq_length - 3] as the original.
    corpus = NumberedCorpus(400, [8], [1])
    options = InstanceOptions(max_seq_length=8, short_seq_prob=1.0)
    rng = random.Random(4)
    lengths = collections.Counter()
    for index in range(len(corpus.documents)):
        a, b, _ = create_pairs_from_document(corpus.documents, index, options, rng)[0]
        lengths[len(a) + len(b)] += 1
    assert sorted(lengths) == [2, 3, 4, 5], lengths
    assert min(lengths.values()) > 70, lengths
