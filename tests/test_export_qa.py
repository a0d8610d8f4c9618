"""The QA SavedModel's `answer` is the text predictions.json gives for the same span: the
original characters of the context (case, accents, spacing kept), no surrounding whitespace."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from albert.data import squad, squad_alignment, squad_features, squad_postprocessing
from albert.export_qa import (
    QuestionAnsweringError,
    _QuestionAnsweringServing,
    export_question_answering,
)
from albert.export_qa_spans import best_span, doc_windows, first_best, max_context
from albert.modeling import AlbertBackbone, AlbertQuestionAnswering
from albert.text_ops import InGraphTokenizer
from albert.tokenization import FullTokenizer, load_spm_model
from tests.helpers import tiny_config

TESTS = Path(__file__).resolve().parent
SPM_MODEL = str(TESTS / "fixtures" / "tokenizer" / "tiny.model")
SHARED_SQUAD = TESTS.parents[1] / "shared" / "data" / "squad" / "dev-v2.0.json"
MAX_SEQ_LENGTH, MAX_QUERY_LENGTH, MAX_ANSWER_LENGTH = 150, 24, 7
CONFIG = tiny_config(vocab_size=1000, max_position_embeddings=MAX_SEQ_LENGTH, type_vocab_size=2)


def _questions(path, seed):
    """(question, context) pairs of the dev sample, contexts cut at a random spot so that each
    fits one window; the answers are not needed."""
    rng = np.random.default_rng(seed)
    data = json.loads(SHARED_SQUAD.read_text(encoding="utf-8"))["data"]
    pairs = [
        (qa["question"], p["context"][: int(rng.integers(120, 220))])
        for article in data
        for p in article["paragraphs"]
        for qa in p["qas"]
    ]
    _write_dev(path, pairs)
    return pairs


def _write_dev(path, pairs):
    """A SQuAD file with one unanswered question per (question, context) pair, ids q0, q1..."""
    paragraphs = [
        {"context": context, "qas": [{"id": f"q{i}", "question": question, "answers": []}]}
        for i, (question, context) in enumerate(pairs)
    ]
    Path(path).write_text(json.dumps({"version": "1.1", "data": [{"paragraphs": paragraphs}]}))


def _model_inputs(features):
    return {
        name: np.stack([f.model_inputs(False)[name] for f in features])
        for name in ("input_ids", "input_mask", "segment_ids")
    }


def _predictions_json(data, model, n_best_size, with_near_ties=False):
    """run_squad's v1.1 answers for `data` (squad.load_features), by question id; with
    `with_near_ties`, also each question's answers whose probability is within float32
    rounding (a relative 1e-5) of the best's: the SavedModel's graph may order those either
    way on another CPU's kernels."""
    results = squad_postprocessing.results_by_unique_id(
        [f.unique_id for f in data.features], model(_model_inputs(data.features), training=False)
    )
    predictions, nbest = squad_postprocessing.compute_predictions_v1(
        data.examples, data.features, results, n_best_size, MAX_ANSWER_LENGTH
    )
    answers = [predictions[f"q{i}"] for i in range(len(predictions))]
    if not with_near_ties:
        return answers
    near = []
    for i in range(len(predictions)):
        entries = nbest[f"q{i}"]
        best = entries[0]["probability"]
        near.append({e["text"] for e in entries if e["probability"] >= best * (1 - 1e-5)})
    return answers, near


def _served_answers(model, path, questions, contexts, max_seq_length, max_query_length, **kw):
    """The answers the exported SavedModel of `model` serves."""
    export_dir = export_question_answering(
        model, SPM_MODEL, True, str(path), max_seq_length, max_query_length, MAX_ANSWER_LENGTH, **kw
    )
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    out = serve(question=tf.constant(list(questions)), context=tf.constant(list(contexts)))
    return [answer.decode("utf-8") for answer in out["answer"].numpy()]


def _model(seed):
    model = AlbertQuestionAnswering(AlbertBackbone(CONFIG))
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        # Large weights, so that the best span moves from question to question.
        if "LayerNorm" not in variable.path:
            variable.assign(rng.normal(0.0, 0.5, variable.shape).astype("float32"))
    return model


# Slow tier: builds, exports and serves a model (~11 s).
@pytest.mark.slow
@pytest.mark.skipif(not SHARED_SQUAD.exists(), reason="no shared SQuAD data")
def test_served_answers_are_the_predictions_json_text(tmp_path):
    pairs = _questions(tmp_path / "dev.json", seed=0)
    model = _model(seed=1)
    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL, do_lower_case=True)
    data = squad.load_features(
        str(tmp_path / "dev.json"), tokenizer, False, MAX_SEQ_LENGTH, 64, MAX_QUERY_LENGTH
    )
    assert len(data.features) == len(pairs)  # one window each, as the SavedModel reads
    predictions = _predictions_json(data, model, n_best_size=20)
    questions, contexts = zip(*pairs, strict=True)
    served = _served_answers(
        model, tmp_path / "export", questions, contexts, MAX_SEQ_LENGTH, MAX_QUERY_LENGTH
    )

    assert all(answer and answer == answer.strip() for answer in served), served
    assert served == predictions


@pytest.mark.slow  # builds, exports and serves a model (~12 s)
@pytest.mark.skipif(not SHARED_SQUAD.exists(), reason="no shared SQuAD data")
def test_long_contexts_are_read_in_windows_as_predictions_json(tmp_path):
    # run_squad reads a context longer than a window in windows doc_stride apart and answers
    # from the window where the span's start has the most context. The SavedModel read the
    # first window only: an answer later in the context was never found. The batch mixes
    # whole dev contexts (several windows each) with one-window and empty ones.
    max_seq_length, max_query_length, doc_stride = 48, 12, 10
    data = json.loads(SHARED_SQUAD.read_text(encoding="utf-8"))["data"]
    pairs = [
        (qa["question"], p["context"])
        for article in data
        for p in article["paragraphs"]
        for qa in p["qas"]
    ]
    pairs[1:1] = [("x?", "x"), ("what?", "   "), ("who?", "The river flows to the sea.")]
    _write_dev(tmp_path / "dev.json", pairs)
    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL, do_lower_case=True)
    squad_data = squad.load_features(
        str(tmp_path / "dev.json"), tokenizer, False, max_seq_length, doc_stride, max_query_length
    )
    model = _model(seed=2)
    predictions, near_ties = _predictions_json(
        squad_data, model, n_best_size=20, with_near_ties=True
    )
    questions, contexts = zip(*pairs, strict=True)
    served = _served_answers(
        model,
        tmp_path / "export",
        questions,
        contexts,
        max_seq_length,
        max_query_length,
        doc_stride=doc_stride,
    )
    # Each served answer is predictions.json's, or (on a float32 tie, as q12's two best spans
    # within 1.2e-7 on a Zen 2) one of the answers tied with it.
    for i, (answer, predicted) in enumerate(zip(served, predictions, strict=True)):
        assert answer == predicted or answer in near_ties[i], (i, answer, predicted)
    assert sum(len(tied) == 1 for tied in near_ties) > len(pairs) * 3 // 4  # few ties
    # Most answers come from windows after the first: reading only the first fails here.
    first_windows = [f for f in squad_data.features if f.doc_span_index == 0]
    first_only = _predictions_json(
        dataclasses.replace(squad_data, features=first_windows), model, n_best_size=20
    )
    assert sum(a != b for a, b in zip(first_only, predictions, strict=True)) > len(pairs) // 2


@pytest.mark.slow  # builds, exports and serves a model (~9 s)
def test_a_question_budget_over_half_the_window_is_served_as_fine_tuning_reads_it(tmp_path):
    # run_squad trains with any max_query_length that leaves context room (here 20 of 40);
    # the served inputs must be the windows of its features: the question's first
    # max_query_length tokens whole, the context cut to the rest.
    max_seq_length, max_query_length, doc_stride = 40, 20, 8
    question = "Which river flows to the sea past the old mill and the people of the town " * 2
    contexts = ["The river flows to the sea. " * 6, "Gold came to the town."]
    _write_dev(tmp_path / "dev.json", [(question, context) for context in contexts])
    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL, do_lower_case=True)
    assert len(tokenizer.tokenize(question)) > max_query_length
    assert len(tokenizer.tokenize(contexts[0])) > max_seq_length
    data = squad.load_features(
        str(tmp_path / "dev.json"), tokenizer, False, max_seq_length, doc_stride, max_query_length
    )
    model = _model(seed=3)
    results = squad_postprocessing.results_by_unique_id(
        [f.unique_id for f in data.features], model(_model_inputs(data.features), training=False)
    )
    predictions, nbest = squad_postprocessing.compute_predictions_v1(
        data.examples, data.features, results, 20, MAX_ANSWER_LENGTH
    )

    export_dir = export_question_answering(
        model,
        SPM_MODEL,
        True,
        str(tmp_path / "export"),
        max_seq_length,
        max_query_length,
        MAX_ANSWER_LENGTH,
        doc_stride=doc_stride,
    )
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    out = serve(question=tf.constant([question] * 2), context=tf.constant(contexts))
    assert [a.decode() for a in out["answer"].numpy()] == [predictions["q0"], predictions["q1"]]
    scores = [nbest[q][0]["start_log_prob"] + nbest[q][0]["end_log_prob"] for q in ("q0", "q1")]
    assert np.max(np.abs(out["score"].numpy() - scores)) < 1e-4


@pytest.mark.slow  # builds, exports and serves a model (~9 s)
def test_answers_after_unknown_pieces_are_the_predictions_json_text(tmp_path):
    # "``", "⁄" (from "½") and "ß" are unknown to the fixture's model: their pieces are
    # <unk>, which covers their characters, not the five of the string "<unk>".
    max_seq_length, max_query_length = 128, 12
    words = "The final score was TOTAL at the river of gold and people came free ".split()
    rng = np.random.default_rng(4)
    contexts = [
        f"{unknown} {' '.join(rng.permutation(words)[:9])}. {unknown}{unknown} "
        f"{' '.join(rng.permutation(words)[:6])}."
        for unknown in ["``", "½", "Straße", "``—", "`` ½ ß", "a½b", "``quoted''", "ß½"]
    ]
    questions = ["What was the score?"] * len(contexts)
    _write_dev(tmp_path / "dev.json", zip(questions, contexts, strict=True))
    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL, do_lower_case=True)
    unknown_id = tokenizer.sp_model.unk_id()
    assert all(
        unknown_id in tokenizer.convert_tokens_to_ids(tokenizer.tokenize(c)) for c in contexts
    )
    data = squad.load_features(
        str(tmp_path / "dev.json"), tokenizer, False, max_seq_length, 64, max_query_length
    )
    assert len(data.features) == len(contexts)
    model = _model(seed=0)
    # Every start and end tried, here and in the SavedModel: the same span, so the same text.
    predictions = _predictions_json(data, model, n_best_size=max_seq_length)
    served = _served_answers(
        model,
        tmp_path / "export",
        questions,
        contexts,
        max_seq_length,
        max_query_length,
        n_best_size=max_seq_length,
    )
    assert served == predictions


@pytest.mark.slow  # builds, exports and serves a model (~9 s)
def test_spans_come_from_the_n_best_starts_and_ends_as_predictions_json(tmp_path):
    # run_squad pairs only the n_best_size highest start and end logits of the whole input
    # (question and padding included); where none of those pairs is a valid span it answers
    # "". The SavedModel must pick its span among the same pairs.
    max_seq_length, max_query_length = 64, 12
    contexts = [
        "x",
        "Über die Brücke gingen 2,500 Menschen am Montag.",
        "Tabs\tand\nnewlines\r\nmixed   here.",
        "The river flows to the sea past the old mill.",
        "He paid $3.50 (three-fifty) on 12/05/2019 at 10:30pm!!",
    ]
    questions = ["x?", "wie viele?", "what?", "where does it flow?", "how much?"]
    _write_dev(tmp_path / "dev.json", zip(questions, contexts, strict=True))
    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL, do_lower_case=True)
    data = squad.load_features(
        str(tmp_path / "dev.json"), tokenizer, False, max_seq_length, 32, max_query_length
    )
    assert len(data.features) == len(contexts)
    model = _model(seed=0)
    predictions = _predictions_json(data, model, n_best_size=20)
    assert "" in predictions  # a question whose 20 best starts miss the context
    served = _served_answers(
        model, tmp_path / "export", questions, contexts, max_seq_length, max_query_length
    )
    assert served == predictions


def _assert_every_span_is_the_predictions_json_text(contexts, do_lower_case):
    """`_original_text` of every token span of each context is `answer_text`'s."""
    sp_model = load_spm_model(SPM_MODEL)
    serving = _QuestionAnsweringServing(
        _model(seed=0),
        InGraphTokenizer(SPM_MODEL, do_lower_case=do_lower_case),
        tf_text.SentencepieceTokenizer(model=sp_model.serialized_model_proto()),
        sp_model.unk_id(),
        MAX_SEQ_LENGTH,
        MAX_QUERY_LENGTH,
        MAX_ANSWER_LENGTH,
        n_best_size=20,
        doc_stride=128,
    )
    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL, do_lower_case=do_lower_case)
    for context in contexts:
        tokens = tokenizer.tokenize(context)
        starts, ends = squad_alignment.align_tokens(context, tokens, do_lower_case)
        spans = [(i, j) for i in range(len(tokens)) for j in range(i, len(tokens))]
        first, last = (tf.constant(index) for index in zip(*spans, strict=True))
        batch = tf.constant([context] * len(spans))
        ids = serving.tokenizer.tokenize(batch)
        served = serving._original_text(batch, ids, first, last).numpy()
        expected = [context[starts[i] : ends[j] + 1].strip() for i, j in spans]
        assert [text.decode("utf-8") for text in served] == expected, context


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_a_decomposed_accent_stays_with_the_answer_it_ends(do_lower_case):
    # Text written decomposed (macOS, some scraped pages: "e" + U+0301) normalises the accent
    # to nothing; predictions.json keeps it with the character before it ("café"), and so
    # must the served answer of every span (it was "cafe", and "A" for "Å").
    contexts = ["the cafe\u0301 bar", "A\u030a end", "x n\u0303", "cre\u0300me bru\u0302le\u0301e"]
    _assert_every_span_is_the_predictions_json_text(contexts, do_lower_case)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_characters_sentencepiece_drops_do_not_shift_later_answers(do_lower_case):
    # SentencePiece drops control and format characters (a zero-width space, a byte order
    # mark, bidi marks, BEL) that scraped text carries; predictions.json's alignment leaves
    # them outside every token. Counted as a character each, they shifted every later answer
    # of the context: "a\u200bb river" served "a\u200b" for the span "a b".
    contexts = [
        "a\u200bb river flows\u200b to the sea",
        "\ufeffThe BOM starts here and then",
        "ctrl\x07char here bell then",
        "zero\u200cwidth\u200dj oiner",
        "right\u200fto\u200eleft marks",
    ]
    _assert_every_span_is_the_predictions_json_text(contexts, do_lower_case)


@pytest.fixture(scope="module")
def serving():
    """The QA serving module of `_model(seed=0)`, its `serve` traced once for the module: the
    tests that take it run on one pytest-xdist worker."""
    sp_model = load_spm_model(SPM_MODEL)
    return _QuestionAnsweringServing(
        _model(seed=0),
        InGraphTokenizer(SPM_MODEL),
        tf_text.SentencepieceTokenizer(model=sp_model.serialized_model_proto()),
        sp_model.unk_id(),
        MAX_SEQ_LENGTH,
        MAX_QUERY_LENGTH,
        MAX_ANSWER_LENGTH,
        n_best_size=20,
        doc_stride=128,
    )


@pytest.mark.xdist_group("export_qa_serving")
@pytest.mark.parametrize("rows", [(2, 4), (1, 3), (3, 1), (0, 1)])
def test_questions_and_contexts_of_unequal_rows_are_a_clear_error(serving, rows):
    # TF Serving's columnar format lets a client send 1 question and 3 contexts; that failed
    # deep in the ragged ops ("indices[1] = 1 is not in [0, 1)").
    with pytest.raises(tf.errors.InvalidArgumentError, match="question and context must"):
        serving.serve(
            tf.constant(["who?"] * rows[0], tf.string),
            tf.constant(["the river"] * rows[1], tf.string),
        )


@pytest.mark.xdist_group("export_qa_serving")
def test_text_that_is_not_utf8_is_a_clear_error(serving):
    # A Latin-1 "café" context was served the answer "" with a high score.
    context = "Le café de la gare est à côté du musée."
    out = serving.serve(tf.constant(["où?"]), tf.constant([context]))
    assert out["answer"].shape == [1]
    with pytest.raises(tf.errors.InvalidArgumentError, match="context must be UTF-8"):
        serving.serve(tf.constant(["où?"]), tf.constant([context.encode("latin-1")]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="question must be UTF-8"):
        serving.serve(tf.constant(["où?".encode("latin-1")]), tf.constant([context]))


def test_an_n_best_size_below_one_is_one_line(tmp_path):
    # No span can be chosen among 0 starts: the export wrote a SavedModel that failed every
    # request ("Reduction axis -1 is empty").
    with pytest.raises(QuestionAnsweringError, match="n_best_size must be positive. Received: 0"):
        export_question_answering(
            _model(seed=0), SPM_MODEL, True, str(tmp_path / "e"), MAX_SEQ_LENGTH, n_best_size=0
        )
    assert list(tmp_path.iterdir()) == []


def test_a_max_seq_length_over_the_position_embeddings_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="max_seq_length=200 exceeds the model's max_position_"):
        export_question_answering(_model(seed=0), SPM_MODEL, True, str(tmp_path / "e"), 200)
    assert list(tmp_path.iterdir()) == []


def test_windows_and_max_context_are_the_features_ones():
    # Context lengths around the window size and its stride multiples, empty ones included;
    # the last row's token 116 scores 1 + 0.01 * 118 in its first window and 2 + 0.01 * 18
    # in its second: equal in exact arithmetic, but the featurizer's floats make the second
    # higher (2.1799999999999997 < 2.18), so the second window is the token's.
    rng = np.random.default_rng(5)
    num_tokens = np.array([0, 1, 7, 8, 9, 15, 16, 17, 40, 3, *rng.integers(0, 60, 20), 119])
    room = np.array([8, 8, 8, 8, 8, 8, 8, 8, 1, 3, *rng.integers(1, 20, 20), 118])
    for doc_stride in (1, 3, 8, 101, 128):
        example, start, length = doc_windows(tf.constant(num_tokens), tf.constant(room), doc_stride)
        expected = [
            (row, *span)
            for row, (tokens, window) in enumerate(zip(num_tokens, room, strict=True))
            for span in squad_features.doc_spans(int(tokens), int(window), doc_stride)
        ]
        got = list(zip(example.numpy(), start.numpy(), length.numpy(), strict=True))
        assert got == expected, doc_stride
        token_index = (
            tf.ragged.range(start, start + length)
            + tf.gather(tf.cumsum(tf.constant(num_tokens), exclusive=True), example)[:, None]
        )
        served = max_context(token_index, length, int(num_tokens.sum())).to_list()
        for row, tokens in enumerate(num_tokens):
            spans = squad_features.doc_spans(int(tokens), int(room[row]), doc_stride)
            best = squad_features.max_context_windows(spans)
            rows = [i for i, e in enumerate(example.numpy()) if e == row]
            for index, (span_start, span_length) in zip(rows, spans, strict=True):
                window = range(span_start, span_start + span_length)
                assert served[index] == [best[p] == index - rows[0] for p in window]


def test_each_question_takes_its_first_best_window():
    score = tf.constant([1.0, 3.0, 3.0, 2.0, np.nan, 5.0, np.nan], tf.float32)
    example = tf.constant([0, 0, 0, 1, 2, 3, 3], tf.int64)
    # Ties: the first window, as predictions.json's stable sort; NaN (a diverged model): a
    # window of its own example, not an index past the windows.
    chosen = first_best(score, example, 4).numpy().tolist()
    assert chosen[:3] == [1, 3, 4] and chosen[3] in (5, 6)


def test_equal_scores_take_the_span_predictions_json_takes():
    # Logits of a mixed precision model tie often. predictions.json ranks the pairs by score
    # with a stable sort of starts by rank, then ends by rank; the SavedModel took the first
    # by position: of (5, 5) and (10, 10), both scoring 3, it answered "w5" for "w10".
    rng = np.random.default_rng(6)
    rows, length, n_best_size, max_answer_length = 300, 16, 5, 4
    start_logits = rng.integers(0, 4, (rows, length)).astype(np.float32)  # ties everywhere
    end_logits = rng.integers(0, 4, (rows, length)).astype(np.float32)
    start_logits[0], end_logits[0] = -10.0, -10.0
    start_logits[0, [5, 10]], end_logits[0, [5, 10]] = [1.0, 2.0], [2.0, 1.0]
    is_context = np.zeros((rows, length), bool)
    is_context[:, 4:-1] = True  # [CLS] question [SEP] context [SEP]
    is_max_context = is_context & (rng.random((rows, length)) < 0.8)
    words = [f"w{i}" for i in range(length)]
    context = " ".join(words)
    chars = np.cumsum([0] + [len(word) + 1 for word in words]).tolist()  # each word's first
    examples = [squad.SquadExample(f"q{row}", "", context) for row in range(rows)]
    features = [
        squad_features.SquadFeature(
            unique_id=row,
            example_index=row,
            doc_span_index=0,
            tokens=[],
            token_to_orig_map={
                i: (chars[i], chars[i] + len(words[i]) - 1) for i in np.flatnonzero(is_context[row])
            },
            token_is_max_context={
                i: bool(is_max_context[row, i]) for i in np.flatnonzero(is_context[row])
            },
            input_ids=[],
            input_mask=[],
            segment_ids=[],
            p_mask=[],
        )
        for row in range(rows)
    ]
    results = {
        row: {"start_logits": start_logits[row], "end_logits": end_logits[row]}
        for row in range(rows)
    }
    predictions, _ = squad_postprocessing.compute_predictions_v1(
        examples, features, results, n_best_size, max_answer_length
    )
    start, end, _ = (
        t.numpy()
        for t in best_span(
            tf.constant(start_logits),
            tf.constant(end_logits),
            tf.constant(is_context),
            max_answer_length,
            n_best_size,
            tf.constant(is_max_context),
        )
    )
    served = [" ".join(words[s : e + 1]) if s > 0 else "" for s, e in zip(start, end, strict=True)]
    assert served[0] == "w10"
    assert served == [predictions[f"q{row}"] for row in range(rows)]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_a_span_from_a_lone_underline_piece_keeps_what_predictions_json_keeps(do_lower_case):
    # A "▁" piece alone (before a word split as "▁", "t") covers no character;
    # predictions.json starts such a span right after the token before it and strips
    # whitespace, so it keeps characters that normalise to a space or to nothing there ("´t"
    # of "don´t", a zero-width space). The SavedModel started at the next word ("t").
    contexts = [
        "don\u00b4t and a\u00a8b caf\u00b4e",
        "\u0385 x \u1fed and end",
        "ypo \u0345 gegrammeni",
        "\ufdfa arabic",
        "a\u200b river and\u00a0\u00b4the sea",
        "\u3000\u00b4river x\u00a0 \u02dcnow",
    ]
    _assert_every_span_is_the_predictions_json_text(contexts, do_lower_case)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_a_dropped_character_after_an_unknown_piece_does_not_shift_later_answers(do_lower_case):
    # SentencePiece's offsets give an <unk> piece ("σ", "ß", "``": unknown to the fixture's
    # model) the characters up to the next piece, a dropped one included (BEL):
    # counted, it shifted the answers after it by one ("kσ" served "kσ\x07⅓").
    contexts = [
        "kσ\x07⅓h the river",
        "Straß\x07e flows to the sea",
        "``\x07quoted'' end",
    ]
    _assert_every_span_is_the_predictions_json_text(contexts, do_lower_case)
