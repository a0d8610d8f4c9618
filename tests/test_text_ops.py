"""In-graph tokenization: same ids as FullTokenizer, BERT's packing, SavedModel round trip."""

import json
import os
import subprocess
import sys
import textwrap
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from albert.text_ops import InGraphTokenizer, normalize_text, pack_inputs, truncate_segment_lengths
from albert.tokenization import FullTokenizer, TokenizerError, preprocess_text

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "tokenizer")
MODEL = os.path.join(FIXTURES, "tiny.model")

with open(os.path.join(FIXTURES, "hf_ids.json"), encoding="utf-8") as _f:
    RECORDS = json.load(_f)["records"]
TEXTS = sorted({r["text"] for r in RECORDS})
TEXTS += ["a\x00b \x00ΑΣ\x00Α", "x70,\u00a0\u2028 1,000,000,", "٣,٤ ²,", "ΣΑΣ' ΣΑΣ.ΑΣ"]


@pytest.fixture(scope="module", params=[True, False], ids=["lower", "cased"])
def tokenizers(request):
    return (
        InGraphTokenizer(MODEL, do_lower_case=request.param),
        FullTokenizer(spm_model_file=MODEL, do_lower_case=request.param),
    )


def python_ids(tokenizer, text):
    return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))


def test_tokenize_matches_full_tokenizer_in_tf_function(tokenizers):
    in_graph, full = tokenizers
    ids = tf.function(in_graph.tokenize)(tf.constant(TEXTS))
    assert ids.dtype == tf.int32
    for text, row in zip(TEXTS, ids.to_list(), strict=True):
        assert row == python_ids(full, text), repr(text)


def test_tokenize_matches_hf_fixture(tokenizers):
    in_graph, full = tokenizers
    # "quotes" and lower-cased "final_sigma" follow the original, not HF (test_tokenization).
    records = [
        r
        for r in RECORDS
        if r["do_lower_case"] == in_graph.do_lower_case
        and r["category"] != "quotes"
        and not (r["category"] == "final_sigma" and r["do_lower_case"])
    ]
    ids = in_graph.tokenize(tf.constant([r["text"] for r in records])).to_list()
    assert ids == [r["ids"] for r in records]


def test_tokenize_scalar_and_tf_data(tokenizers):
    in_graph, full = tokenizers
    text = "In 1990, the town had 12,500 people."
    scalar = in_graph.tokenize(tf.constant(text))
    assert scalar.shape.rank == 1 and scalar.numpy().tolist() == python_ids(full, text)
    dataset = tf.data.Dataset.from_tensor_slices(TEXTS[:5]).map(in_graph.tokenize)
    assert [x.numpy().tolist() for x in dataset] == [python_ids(full, t) for t in TEXTS[:5]]


def _code_point_sample():
    """Latin to Glagolitic, CJK symbols, Hangul, compatibility and full-width forms.

    Only characters that Unicode 3.2 already had: TF's case tables predate Unicode 14, which
    Python 3.11 follows, so the two differ on some characters added since (0x888, 0xFBC2...).
    """
    ranges = [(0x1, 0x2C00), (0x3000, 0x3400), (0xAC00, 0xAD00), (0xF900, 0x10000)]
    assigned = unicodedata.ucd_3_2_0.category
    return [
        chr(c)
        for lo, hi in ranges
        for c in range(lo, hi)
        if not 0xD800 <= c < 0xE000 and assigned(chr(c)) != "Cn"
    ]


@pytest.mark.parametrize("lower", [True, False])
def test_normalize_matches_preprocess_text_per_code_point(lower):
    # Each character sits where final-sigma, whitespace and digit-comma contexts apply.
    texts = ["Σa" + c + "Σ 1" + c + ",5Σ " + c for c in _code_point_sample()]
    got = normalize_text(tf.constant(texts), lower).numpy()
    bad = [
        t for t, g in zip(texts, got, strict=True) if preprocess_text(t, lower=lower) != g.decode()
    ]
    assert not bad, bad[:5]


def test_normalize_keeps_shape():
    strings = tf.constant([["A  B", "ΟΔΟΣ"], ["\x00C", " "]])
    assert normalize_text(strings).numpy().tolist() == [
        [b"a b", "οδος".encode()],
        [b"\x00c", b""],
    ]


def bert_truncate(tokens_a, tokens_b, max_num_tokens):
    """The original `_truncate_seq_pair`, as a loop."""
    tokens_a, tokens_b = list(tokens_a), list(tokens_b)
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()
    return tokens_a, tokens_b


def test_truncate_segment_lengths_matches_bert_loop():
    grid = [(a, b, t) for a in range(13) for b in range(13) for t in range(1, 12)]
    length_a, length_b, budget = (tf.constant(v, tf.int64) for v in zip(*grid, strict=True))
    new_a, new_b = truncate_segment_lengths(length_a, length_b, budget)
    expected = [tuple(map(len, bert_truncate(range(a), range(b), t))) for a, b, t in grid]
    assert list(zip(new_a.numpy().tolist(), new_b.numpy().tolist(), strict=True)) == expected


def reference_pack(segments, max_seq_length, cls_id=2, sep_id=3):
    """[CLS] A [SEP] (B [SEP]) from Python lists, BERT-style truncation and zero padding."""
    if len(segments) == 2:
        a, b = bert_truncate(*segments, max_seq_length - 3)
        parts = [a, b]
    else:
        parts = [list(segments[0])[: max_seq_length - 2]]
    ids, types = [cls_id], [0]
    for index, part in enumerate(parts):
        ids += list(part) + [sep_id]
        types += [index] * (len(part) + 1)
    pad = max_seq_length - len(ids)
    return ids + [0] * pad, [1] * len(ids) + [0] * pad, types + [0] * pad


@pytest.mark.parametrize("num_segments", [1, 2])
@pytest.mark.parametrize("max_seq_length", [4, 7, 11])
def test_pack_inputs_matches_reference(num_segments, max_seq_length):
    rng = np.random.default_rng(max_seq_length * 10 + num_segments)
    segments = [
        [rng.integers(5, 99, size=rng.integers(0, 12)).tolist() for _ in range(3)]
        for _ in range(num_segments)
    ]
    packed = pack_inputs(
        [tf.ragged.constant(s, dtype=tf.int32, ragged_rank=1) for s in segments],
        max_seq_length,
        cls_id=2,
        sep_id=3,
    )
    for name in ("input_ids", "input_mask", "segment_ids"):
        assert packed[name].shape == (3, max_seq_length) and packed[name].dtype == tf.int32
    for row in range(3):
        ids, mask, types = reference_pack([s[row] for s in segments], max_seq_length)
        assert packed["input_ids"][row].numpy().tolist() == ids
        assert packed["input_mask"][row].numpy().tolist() == mask
        assert packed["segment_ids"][row].numpy().tolist() == types


def test_pack_inputs_rejects_bad_arguments():
    ids = tf.ragged.constant([[5, 6]])
    for segments in ([], [ids, ids, ids]):
        with pytest.raises(ValueError, match="one or two segments"):
            pack_inputs(segments, 16, 2, 3)
    with pytest.raises(ValueError, match="max_seq_length.*Received: max_seq_length=3"):
        pack_inputs([ids, ids], 3, 2, 3)


def test_only_input_ids_take_the_pad_id():
    # A pad id other than 0 fills input_ids' padding; segment_ids and input_mask pad with 0.
    ids = tf.ragged.constant([[5, 6], [7]])
    packed = pack_inputs([ids, ids], 8, cls_id=2, sep_id=3, pad_id=9)
    assert packed["input_ids"].numpy().tolist() == [
        [2, 5, 6, 3, 5, 6, 3, 9],
        [2, 7, 3, 7, 3, 9, 9, 9],
    ]
    assert packed["segment_ids"].numpy().tolist() == [
        [0, 0, 0, 0, 1, 1, 1, 0],
        [0, 0, 0, 1, 1, 0, 0, 0],
    ]
    assert packed["input_mask"].numpy().tolist() == [[1] * 7 + [0], [1] * 5 + [0] * 3]


def test_tokenizer_pack_uses_model_special_ids():
    in_graph = InGraphTokenizer(MODEL)
    assert (in_graph.cls_id, in_graph.sep_id, in_graph.pad_id) == (2, 3, 0)
    a, b = in_graph.tokenize(["Hello world"]), in_graph.tokenize(["It costs 1,000."])
    packed = in_graph.pack([a, b], 9)
    expected = reference_pack([a.to_list()[0], b.to_list()[0]], 9)
    assert packed["input_ids"].numpy().tolist()[0] == expected[0]


def test_model_without_control_symbols_is_rejected(tmp_path):
    import sentencepiece as spm

    text = tmp_path / "text.txt"
    text.write_text("the river flows to the sea\nthe sea is deep and wide\n" * 20)
    prefix = str(tmp_path / "plain")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=prefix, vocab_size=20, minloglevel=2
    )
    with pytest.raises(TokenizerError, match=r"plain.model.*has no \[CLS\] piece"):
        InGraphTokenizer(prefix + ".model")
    with pytest.raises(TokenizerError, match="does not exist"):
        InGraphTokenizer(str(tmp_path / "missing.model"))


def test_pack_pads_with_zero_whatever_the_pad_piece(tmp_path):
    """Fine-tuning's features (`pack_segments`, as the original) pad `input_ids` with 0; a
    model whose <pad> is another id once got that id in the served padding instead."""
    import sentencepiece as spm

    from albert.data.features import pack_segments

    text = tmp_path / "text.txt"
    text.write_text("the river flows to the sea\nthe sea is deep and wide\n" * 20)
    prefix = str(tmp_path / "pad5")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=prefix,
        vocab_size=24,
        unk_id=0,
        pad_id=5,
        control_symbols=["[CLS]", "[SEP]"],
        minloglevel=2,
    )
    in_graph = InGraphTokenizer(prefix + ".model")
    full = FullTokenizer(spm_model_file=prefix + ".model")
    assert spm.SentencePieceProcessor(model_file=prefix + ".model").pad_id() == 5
    texts = ["the sea", "deep river"]
    packed = in_graph.pack([in_graph.tokenize(texts[:1]), in_graph.tokenize(texts[1:])], 24)
    ids_a, ids_b = (python_ids(full, t) for t in texts)
    expected = pack_segments(ids_a, ids_b, 24, in_graph.cls_id, in_graph.sep_id)
    assert expected["input_mask"][-1] == 0  # There is padding to compare.
    assert packed["input_ids"].numpy().tolist()[0] == expected["input_ids"]


class _Serving(tf.Module):
    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)] * 2)
    def serve(self, text_a, text_b):
        ids = self.tokenizer.tokenize(tf.concat([text_a, text_b], axis=0))  # [2B, (P)]
        segments = [ids[: tf.shape(text_a)[0]], ids[tf.shape(text_a)[0] :]]
        features = self.tokenizer.pack(segments, max_seq_length=13)
        return features | {"ids": segments[0].to_tensor(default_value=-1)}


_LOAD_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
    texts = json.load(open(sys.argv[2], encoding="utf-8"))
    loaded = tf.saved_model.load(sys.argv[1])
    out = loaded.serve(tf.constant(texts), tf.constant(texts[::-1]))
    print(json.dumps({k: v.numpy().tolist() for k, v in out.items()}))
    """
)


@pytest.mark.slow
def test_saved_model_reloads_in_fresh_process(tmp_path):
    full = FullTokenizer(spm_model_file=MODEL, do_lower_case=True)
    texts = TEXTS[:6] + ["It costs 1,000,000 dollars."]
    export_dir = str(tmp_path / "serving")
    tf.saved_model.save(_Serving(InGraphTokenizer(MODEL, do_lower_case=True)), export_dir)
    (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-c", _LOAD_SCRIPT, export_dir, str(tmp_path / "texts.json")],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),  # The fresh process must not need this repository.
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for text, row in zip(texts, out["ids"], strict=True):
        assert [i for i in row if i != -1] == python_ids(full, text)
    for row, (a, b) in enumerate(zip(texts, texts[::-1], strict=True)):
        expected = reference_pack([python_ids(full, a), python_ids(full, b)], 13)
        assert out["input_ids"][row] == expected[0]
        assert out["input_mask"][row] == expected[1]
        assert out["segment_ids"][row] == expected[2]
