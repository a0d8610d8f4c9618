"""FullTokenizer against HF transformers 4.x ids recorded in tests/fixtures/tokenizer."""

import json
import os

import pytest
import sentencepiece as spm

from albert.tokenization import (
    FullTokenizer,
    TokenizerError,
    basic_tokenize,
    encode_pieces,
    preprocess_text,
)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tokenizer")
MODEL = os.path.join(FIXTURES, "tiny.model")
# Categories where this project follows the original ALBERT, not HF (see tokenization.py).
DIVERGENT = ("quotes", "final_sigma")


def load_records():
    with open(os.path.join(FIXTURES, "hf_ids.json"), encoding="utf-8") as f:
        return json.load(f)["records"]


RECORDS = load_records()


def record_id(record):
    return f"{record['category']}-lower{int(record['do_lower_case'])}-{record['text'][:20]!r}"


@pytest.fixture(scope="module")
def tokenizers():
    return {lower: FullTokenizer(spm_model_file=MODEL, do_lower_case=lower) for lower in (1, 0)}


def test_fixture_covers_every_category():
    categories = {r["category"] for r in RECORDS}
    assert categories == {
        "cased",
        "accented",
        "final_sigma",
        "cjk",
        "indic_thai",
        "emoji",
        "digit_comma",
        "whitespace",
        "mixed",
        "quotes",
    }
    assert {r["do_lower_case"] for r in RECORDS} == {True, False}


@pytest.mark.parametrize(
    "record",
    [r for r in RECORDS if r["category"] not in DIVERGENT]
    + [r for r in RECORDS if r["category"] == "final_sigma" and not r["do_lower_case"]],
    ids=record_id,
)
def test_ids_match_hf(tokenizers, record):
    tokenizer = tokenizers[record["do_lower_case"]]
    pieces = tokenizer.tokenize(record["text"])
    assert pieces == record["pieces"]
    assert tokenizer.convert_tokens_to_ids(pieces) == record["ids"]


@pytest.mark.parametrize("record", [r for r in RECORDS if r["category"] == "quotes"], ids=record_id)
def test_quotes_kept_unlike_hf(tokenizers, record):
    # The original leaves `` and '' alone; HF turns both into ".
    tokenizer = tokenizers[record["do_lower_case"]]
    ours = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(record["text"]))
    assert ours != record["ids"]
    assert "``" in preprocess_text(record["text"])
    as_hf = record["text"].replace("``", '"').replace("''", '"')
    assert tokenizer.convert_tokens_to_ids(tokenizer.tokenize(as_hf)) == record["ids"]


def test_final_sigma_follows_str_lower_unlike_hf(tokenizers):
    # The original lower-cases the whole text (ΟΔΟΣ -> οδος); HF one character at a time
    # (ΟΔΟΣ -> οδοσ).
    (record,) = [r for r in RECORDS if r["category"] == "final_sigma" and r["do_lower_case"]]
    text, cased = record["text"], tokenizers[False]
    ours = tokenizers[True].tokenize(text)
    assert ours == cased.tokenize(text.lower())
    assert "ς" in "".join(ours)
    assert record["pieces"] == cased.tokenize("".join(c.lower() for c in text))
    assert ours != record["pieces"]


def _digit_comma_branches(sp_model):
    """Which branches of the digit-comma rule the fixture strings take."""
    branches = set()
    for record in RECORDS:
        text = preprocess_text(record["text"], lower=record["do_lower_case"])
        for piece in sp_model.encode(text, out_type=str):
            if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
                first = sp_model.encode(piece[:-1].replace("▁", ""), out_type=str)[0]
                if piece.startswith("▁") or not first.startswith("▁"):
                    branches.add("keep")
                else:
                    branches.add("drop_lone" if first == "▁" else "strip")
    return branches


def test_fixture_exercises_every_digit_comma_branch():
    assert _digit_comma_branches(spm.SentencePieceProcessor(model_file=MODEL)) == {
        "keep",
        "drop_lone",
        "strip",
    }


def test_digit_comma_intended_rule(tokenizers):
    # Python 3 runs of the original give ▁ ▁1 , 000 (a stray "▁"); the intent is ▁ 1 , 000.
    assert tokenizers[True].tokenize("1,000") == ["▁", "1", ",", "000"]
    raw = tokenizers[True].sp_model.encode("1,000", out_type=str)
    assert raw == ["▁", "1,", "000"]


def test_preprocess_text():
    text = "  Héllo\t\tWORLD \n ﬁne  "
    assert preprocess_text(text) == "Hello WORLD fine"
    assert preprocess_text(text, lower=True) == "hello world fine"
    assert preprocess_text("a  b", remove_space=False) == "a  b"
    assert preprocess_text("naïve ``x''") == "naive ``x''"


@pytest.mark.parametrize("lower", [True, False])
def test_tokenize_normalises_idempotently(tokenizers, lower):
    for record in RECORDS:
        normalised = preprocess_text(record["text"], lower=lower)
        assert tokenizers[lower].tokenize(normalised) == tokenizers[lower].tokenize(record["text"])


def test_encode_pieces_sampling_covers_the_text(tokenizers):
    sp_model = tokenizers[True].sp_model
    text = "the river flows to the sea and the sea is deep"
    for _ in range(5):
        pieces = encode_pieces(sp_model, text, sample=True)
        assert "".join(pieces).replace("▁", " ").strip() == text


def test_vocab_and_id_round_trip(tokenizers):
    tokenizer = tokenizers[True]
    assert len(tokenizer.vocab) == tokenizer.sp_model.get_piece_size() == 1000
    assert [tokenizer.vocab[t] for t in ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")] == [
        0,
        1,
        2,
        3,
        4,
    ]
    ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("The river, 1,000 times."))
    assert tokenizer.convert_tokens_to_ids(tokenizer.convert_ids_to_tokens(ids)) == ids
    assert tokenizer.convert_tokens_to_ids(["no-such-piece"]) == [1]
    assert tokenizer.tokenize("Zoë, 1,000".encode()) == tokenizer.tokenize("Zoë, 1,000")


def test_errors_name_the_file(tmp_path):
    with pytest.raises(TokenizerError, match="neither was given"):
        FullTokenizer()
    missing = str(tmp_path / "missing.model")
    with pytest.raises(TokenizerError, match="spm_model_file.*missing.model.*does not exist"):
        FullTokenizer(spm_model_file=missing)
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"not a model")
    with pytest.raises(TokenizerError, match="garbage.model.*is not a SentencePiece model"):
        FullTokenizer(spm_model_file=str(garbage))
    with pytest.raises(TokenizerError, match="vocab_file.*does not exist"):
        FullTokenizer(vocab_file=str(tmp_path / "vocab.txt"))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(TokenizerError, match="is empty"):
        FullTokenizer(vocab_file=str(empty))
    assert issubclass(TokenizerError, ValueError)


# --- WordPiece fallback -------------------------------------------------------------------

WORDPIECE_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "un",
    "##want",
    "##ed",
    "want",
    ",",
    "runn",
    "##ing",
    "博",
    "推",
    "ah",
    "##zz",
    "zz",
    "hello",
    "!",
    "häl",
    "##lo",
]


@pytest.fixture
def wordpiece(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(WORDPIECE_VOCAB) + "\n", encoding="utf-8")
    return lambda lower: FullTokenizer(vocab_file=str(path), do_lower_case=lower)


def test_wordpiece_splits_words_into_continuations(wordpiece):
    tokenizer = wordpiece(True)
    tokens = tokenizer.tokenize("UNwant\u00e9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert tokenizer.convert_tokens_to_ids(tokens) == [5, 6, 7, 9, 10, 11]
    assert tokenizer.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
    assert tokenizer.convert_ids_to_tokens([17, 18]) == ["hello", "!"]


def test_wordpiece_cjk_punctuation_and_control(wordpiece):
    assert wordpiece(True).tokenize("ah博推zz\x00\ufffd\x07 Hello!") == [
        "ah",
        "博",
        "推",
        "zz",
        "hello",
        "!",
    ]
    assert basic_tokenize(" \tHeLLo!how  \n Are yoU?  ", True) == [
        "hello",
        "!",
        "how",
        "are",
        "you",
        "?",
    ]


# BERT's `_is_chinese_char` blocks (first, last code point), as its tokenization.py lists them.
ORIGINAL_CJK_BLOCKS = [
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
]


def test_wordpiece_cjk_blocks_are_the_originals_to_their_edges():
    # Each character of the blocks is a word of its own, from the first code point to the
    # last; the code points just outside stay inside their word.
    for first, last in ORIGINAL_CJK_BLOCKS:
        inside = f"a{chr(first)}b{chr(last)}c"
        assert basic_tokenize(inside, False) == ["a", chr(first), "b", chr(last), "c"]
        outside = f"a{chr(first - 1)}b{chr(last + 1)}c"
        if not any(
            lo <= cp <= hi for cp in (first - 1, last + 1) for lo, hi in ORIGINAL_CJK_BLOCKS
        ):
            assert basic_tokenize(outside, False) == [outside]


def test_wordpiece_drops_only_format_and_control_characters(wordpiece):
    """The original's `_clean_text` drops categories Cc and Cf only; a private-use (Co) or
    unassigned (Cn) character stays in its word, which then has no WordPiece: [UNK]."""
    tokenizer = wordpiece(True)
    assert tokenizer.tokenize("ah \u200b\x7f zz") == ["ah", "zz"]  # Cf, Cc: dropped
    assert tokenizer.tokenize("ah \ue000 zz") == ["ah", "[UNK]", "zz"]  # Co
    assert tokenizer.tokenize("ah \u0378 zz") == ["ah", "[UNK]", "zz"]  # Cn
    assert basic_tokenize("zz\ue000zz", False) == ["zz\ue000zz"]


def test_wordpiece_accents_kept_without_lower_casing(wordpiece):
    assert wordpiece(False).tokenize("hällo") == ["häl", "##lo"]
    assert wordpiece(True).tokenize("HÄLLO") == ["[UNK]"]  # "hallo" is not in the vocab.
    assert basic_tokenize("HäLLo", False) == ["HäLLo"]
    assert basic_tokenize("HäLLo", True) == ["hallo"]


def test_wordpiece_vocab_without_unk_fails_loudly(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[CLS]\nhello\n", encoding="utf-8")
    tokenizer = FullTokenizer(vocab_file=str(path))
    assert tokenizer.convert_tokens_to_ids(tokenizer.tokenize("Hello")) == [1]
    with pytest.raises(TokenizerError, match="vocab.txt.*neither 'world' nor \\[UNK\\]"):
        tokenizer.convert_tokens_to_ids(["hello", "world"])


def test_bytes_with_invalid_utf8_are_decoded_as_the_original(wordpiece, tokenizers):
    """The original's convert_to_unicode drops bytes that are not UTF-8 instead of failing."""
    assert wordpiece(True).tokenize(b"ah \xffzz \xe5\x8d\x9a") == ["ah", "zz", "博"]
    assert tokenizers[1].tokenize(b"a\xff b") == tokenizers[1].tokenize("a b")


def test_wordpiece_vocab_ids_follow_the_original_load_vocab(tmp_path):
    """The original reads lines split at "\\n" only, keeps each line's first field (a blank
    line is " "), and numbers distinct tokens in order: a repeated token takes no id."""
    path = tmp_path / "vocab.txt"
    lines = ["[UNK]", "hello", "hello", "", "", "page\u2028break", "world\x0c", "\t", "!"]
    path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    tokenizer = FullTokenizer(vocab_file=str(path))
    assert tokenizer.vocab == {
        "[UNK]": 0,
        "hello": 1,
        " ": 2,
        "page": 3,
        "world": 4,
        "!": 5,
    }
    assert tokenizer.convert_tokens_to_ids(tokenizer.tokenize("Hello world!")) == [1, 4, 5]


def test_wordpiece_long_word_is_unknown(wordpiece):
    assert wordpiece(True).tokenize("zz" * 101) == ["[UNK]"]  # Longer than 200 characters.
    assert wordpiece(True).tokenize("ah" + "zz" * 99) == ["ah"] + ["##zz"] * 99
