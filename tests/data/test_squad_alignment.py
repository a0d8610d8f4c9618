"""Pieces -> characters of the original text, on contexts that normalisation changes."""

import os
import unicodedata

import pytest

from albert.data.squad_alignment import (
    align_strings,
    align_tokens,
    char_span_to_token_span,
    normalize_with_offsets,
)
from albert.tokenization import FullTokenizer, preprocess_text
from tests.helpers import train_tiny_spm

FIXTURE_MODEL = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "fixtures",
    "tokenizer",
    "tiny.model",
)

TRICKY_TEXTS = [
    "Beyoncé Giselle Knowles-Carter (born 1981) is a singer.",
    "  leading and trailing spaces  ",
    "a naïve café   with\tmultiple \t spaces\nand lines",
    "It cost 1,000,000 dollars in 1990, then 12,500, or 25,000,",
    "Tokyo (東京) is the capital of Japan (日本); 東京は日本の首都です.",
    "ﬁnance ½ x² ｆｕｌｌ width, Ångström and Zoë",
    "안녕하세요 언어 and e\u0301te\u0301 (decomposed accents)",
    "The ΟΔΟΣ street; ΣΑΣ.",
    "a \u00a8 b stray diaeresis",
    "\u0301 starts with a lone accent",
]


@pytest.fixture(scope="module", params=["helpers", "fixture"])
def model_file(request, tmp_path_factory):
    if request.param == "helpers":
        return train_tiny_spm(tmp_path_factory.mktemp("spm"), vocab_size=150)
    return FIXTURE_MODEL


def is_blank(text):
    """Text the tokenizer sees as nothing but spaces (e.g. a lone "¨", which is NFKD " ̈")."""
    return not preprocess_text(text).strip()


def words_with_offsets(text):
    """(start, end inclusive, word) of every whitespace-separated word."""
    found, start = [], None
    for i, char in enumerate(text + " "):
        if char.isspace() and start is not None:
            found.append((start, i - 1, text[start:i]))
            start = None
        elif not char.isspace() and start is None:
            start = i
    return found


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_normalized_text_is_what_the_tokenizer_sees(text, lower):
    normalized, offsets = normalize_with_offsets(text, lower)
    assert normalized == unicodedata.normalize("NFKC", preprocess_text(text, lower=lower))
    assert len(offsets) == len(normalized)
    assert offsets == sorted(offsets)
    for char, offset in zip(normalized, offsets, strict=True):
        source_form = unicodedata.normalize("NFKC", preprocess_text(text[offset], lower=lower))
        if text[offset] == "Σ" and lower:
            source_form += "ς"  # Final sigma: lower-cased in context.
        assert char in source_form or (char == " " and text[offset].isspace())


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_every_word_and_run_of_words_comes_back_exactly(model_file, text, lower):
    tokenizer = FullTokenizer(spm_model_file=model_file, do_lower_case=lower)
    tokens = tokenizer.tokenize(text)
    starts, ends = align_tokens(text, tokens, lower)
    assert len(starts) == len(ends) == len(tokens)
    words = [word for word in words_with_offsets(text) if not is_blank(word[2])]
    for i, (start, _, _) in enumerate(words):
        for end_word in words[i : i + 3]:  # One, two and three words.
            first, last = char_span_to_token_span(starts, ends, start, end_word[1])
            assert text[starts[first] : ends[last] + 1] == text[start : end_word[1] + 1]


@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_any_character_span_comes_back_as_a_superset(model_file, text):
    tokenizer = FullTokenizer(spm_model_file=model_file, do_lower_case=True)
    starts, ends = align_tokens(text, tokenizer.tokenize(text), True)
    for a in range(len(text)):
        for b in range(a, min(len(text), a + 12)):
            if is_blank(text[a]) or is_blank(text[b]):
                continue  # Answers start and end on a character the tokenizer keeps.
            first, last = char_span_to_token_span(starts, ends, a, b)
            assert starts[first] <= a and ends[last] >= b


def test_digit_comma_pieces_give_back_numbers_inside_numbers():
    # The digit-comma rule makes "," its own piece, so "1,000" inside "1,000,000" is a
    # whole-piece answer.
    tokenizer = FullTokenizer(spm_model_file=FIXTURE_MODEL, do_lower_case=True)
    text = "It cost 1,000,000 dollars."
    tokens = tokenizer.tokenize(text)
    assert tokens[tokens.index("1") : tokens.index("1") + 5] == ["1", ",", "000", ",", "000"]
    starts, ends = align_tokens(text, tokens, True)
    a = text.index("1,000")
    first, last = char_span_to_token_span(starts, ends, a, a + 4)
    assert text[starts[first] : ends[last] + 1] == "1,000"


def test_sentencepiece_pieces_that_start_with_hashes_keep_them():
    # "##" is WordPiece's continuation mark, but to SentencePiece it is text: a piece that
    # starts with it stands for those characters too.
    tokenizer = FullTokenizer(spm_model_file=FIXTURE_MODEL, do_lower_case=True)
    text = "C## and ##x"
    tokens = tokenizer.tokenize(text)
    assert "##" in tokens
    starts, ends = align_tokens(text, tokens, True)
    for answer in ("C##", "##x", "##"):
        a = text.index(answer)
        first, last = char_span_to_token_span(starts, ends, a, a + len(answer) - 1)
        assert text[starts[first] : ends[last] + 1] == answer


def test_expansions_and_decomposed_accents_are_taken_whole():
    tokens = ["▁", "f", "in", "ance", "▁", "1", "⁄", "2", "▁ca", "fe"]
    text = "ﬁnance ½ cafe\u0301"
    starts, ends = align_tokens(text, tokens, True)
    spans = [text[s : e + 1] for s, e in zip(starts, ends, strict=True)]
    # "ﬁ" is one character that became "fi": both tokens touching it take it whole. The
    # combining accent normalises to nothing and belongs to the token before it.
    assert spans == ["", "ﬁ", "ﬁn", "ance", "", "½", "½", "½", "ca", "fe\u0301"]
    assert ends[0] == starts[0] - 1  # The leading "▁" matches no character.


def test_hangul_syllables_map_one_to_one():
    # NFKD splits a syllable into 2-3 jamo; SentencePiece's NFKC puts them back.
    text = "안녕 하세요"
    tokens = ["▁안", "녕", "▁하", "세요"]
    starts, ends = align_tokens(text, tokens, True)
    assert [text[s : e + 1] for s, e in zip(starts, ends, strict=True)] == [
        "안",
        "녕",
        "하",
        "세요",
    ]


def test_align_strings_shares_out_a_replaced_stretch():
    # "ab" replaced by "xyzw": each source character gets two target characters.
    assert align_strings("cabd", "cxyzwd") == [(0, 1), (1, 3), (3, 5), (5, 6)]
    # "abcd" replaced by "xy": two source characters share each target one, none is left out.
    assert align_strings("zabcdz", "zxyz") == [(0, 1), (1, 2), (1, 2), (2, 3), (2, 3), (3, 4)]
    assert align_strings("same", "same") == [(0, 1), (1, 2), (2, 3), (3, 4)]
    # A source character with no counterpart gets an empty range.
    assert align_strings("abXc", "abc") == [(0, 1), (1, 2), (2, 2), (2, 3)]
    # Pieces matching both the start and the end of the text keep the leading match: the
    # common prefix and suffix must not overlap (that moved "ab" onto the second "ab").
    assert align_strings("ab", "abab") == [(0, 1), (1, 2)]


def test_wordpiece_tokens_align_too(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "naive", "cafe", "caf", "##e", "(", ")", "東"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = FullTokenizer(vocab_file=str(tmp_path / "vocab.txt"), do_lower_case=True)
    text = "Naïve  CAFÉ (東) Zoë"
    tokens = tokenizer.tokenize(text)
    assert tokens == ["naive", "cafe", "(", "東", ")", "[UNK]"]
    starts, ends = align_tokens(text, tokens, True, wordpiece=True)
    spans = [text[s : e + 1] for s, e in zip(starts, ends, strict=True)]
    assert spans == ["Naïve", "CAFÉ", "(", "東", ")", "Zoë"]


def test_an_answer_between_two_tokens_covers_no_token():
    # Tokens "abc" (0-2) and "efg" (4-6): an answer of only the space at 3 lies inside no
    # token; the first token ending after it (1) comes after the last starting before it (0).
    assert char_span_to_token_span([0, 4], [2, 6], 3, 3) is None
    assert char_span_to_token_span([0, 4], [2, 6], 2, 4) == (0, 1)
