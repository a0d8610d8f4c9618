"""SQuAD reader, windows and features, round trips through post-processing, the cache."""

import gc
import json
import logging
import re
import time
from pathlib import Path

import numpy as np
import pytest

from albert import progress
from albert.data import squad_metadata
from albert.data import squad_postprocessing as postprocessing
from albert.data.squad import SquadDataError, SquadExample, load_features, read_squad_examples
from albert.data.squad_alignment import align_tokens
from albert.data.squad_features import (
    check_window,
    convert_examples_to_features,
    doc_spans,
    is_max_context,
    max_context_windows,
)
from albert.metrics.squad import evaluate_v2
from albert.metrics.squad_threshold import tune_null_threshold
from albert.tokenization import FullTokenizer
from tests.helpers import train_tiny_spm

TESTS = Path(__file__).resolve().parents[1]
MODEL = str(TESTS / "fixtures" / "tokenizer" / "tiny.model")
SHARED_SQUAD = TESTS.parent.parent / "shared" / "data" / "squad" / "dev-v2.0.json"

# Contexts normalisation changes, and answers that are whole words, numbers or CJK characters.
TRICKY = [
    (
        "  Beyoncé Giselle Knowles-Carter (born September 4, 1981) is an American singer.  "
        "Her naïve café   opened in\tHouston with 1,000,000 fans. ",
        [
            "Beyoncé Giselle Knowles-Carter",
            "1981",
            "naïve café",
            "Houston",
            "1,000,000",
            "September 4, 1981",
            "American singer",
            "1,000",
            "fans",
        ],
    ),
    (
        "Tokyo (東京) is the capital of Japan (日本). 東京は日本の首都です。 Zürich had 12,500, "
        "then 25,000, people; ﬁnance ½ ΟΔΟΣ.",
        ["東京", "日本", "の首都です。", "Zürich", "12,500", "25,000", "ﬁnance", "ΟΔΟΣ", "Tokyo"],
    ),
]
LONG_CONTEXT = " ".join(f"w{i}" for i in range(40))


def squad_json(paragraphs, impossible=()):
    """paragraphs: list of (context, [answers]) -> a SQuAD v2.0 dict; one question each."""
    data, count = [], 0
    for context, answers in paragraphs:
        qas = []
        for answer in answers:
            start = (
                (context.index(" " + answer) + 1)
                if " " + answer in context
                else context.index(answer)
            )
            qas.append(
                {
                    "id": f"q{count}",
                    "question": f"Where is {answer}?",
                    "is_impossible": False,
                    "answers": [{"text": answer, "answer_start": start}],
                }
            )
            count += 1
        for question in impossible:
            qas.append(
                {
                    "id": f"q{count}",
                    "question": question,
                    "is_impossible": True,
                    "answers": [],
                    "plausible_answers": [{"text": "x", "answer_start": 0}],
                }
            )
            count += 1
        data.append({"title": "t", "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "v2.0", "data": data}


def write_json(path, content):
    path.write_text(json.dumps(content, ensure_ascii=False), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module", params=[True, False], ids=["lower", "cased"])
def tokenizer(request):
    return FullTokenizer(spm_model_file=MODEL, do_lower_case=request.param)


def test_reader_v1_and_v2(tmp_path):
    content = squad_json([("Paris is in France.", ["France"])], impossible=["Who?"])
    examples = read_squad_examples(write_json(tmp_path / "dev.json", content))
    assert examples == [
        SquadExample("q0", "Where is France?", "Paris is in France.", "France", 12, False),
        SquadExample("q1", "Who?", "Paris is in France.", "", -1, True),  # Plausible ignored.
    ]
    assert examples[0].end_position == 17
    del content["data"][0]["paragraphs"][0]["qas"][1]  # v1.1: no is_impossible key.
    del content["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"]
    (example,) = read_squad_examples(write_json(tmp_path / "v1.json", content))
    assert not example.is_impossible and example.answer_text == "France"


def test_reader_takes_questions_without_answers(tmp_path):
    # A file to predict need not hold answers (the original reads "answers" only to train).
    content = squad_json([("Paris is in France.", ["France"])])
    qa = content["data"][0]["paragraphs"][0]["qas"][0]
    del qa["answers"], qa["is_impossible"]
    (example,) = read_squad_examples(write_json(tmp_path / "test.json", content))
    assert example == SquadExample("q0", "Where is France?", "Paris is in France.", "", -1, False)


def test_reader_errors_name_the_file_and_place(tmp_path):
    with pytest.raises(SquadDataError, match="does not exist"):
        read_squad_examples(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text('{"data": [', encoding="utf-8")
    with pytest.raises(SquadDataError, match="bad.json.*not valid"):
        read_squad_examples(str(tmp_path / "bad.json"))
    content = squad_json([("Paris is in France.", ["France"])])
    del content["data"][0]["paragraphs"][0]["context"]
    with pytest.raises(SquadDataError, match="lacks the key 'context' at article 0 paragraph 0"):
        read_squad_examples(write_json(tmp_path / "nokey.json", content))
    with pytest.raises(SquadDataError, match="lacks the key 'data'"):
        read_squad_examples(write_json(tmp_path / "other.json", {"version": "1.1"}))


def test_doc_spans_and_max_context():
    # 10 tokens, windows of 4 moving by 3: [0-3] [3-6] [6-9].
    spans = doc_spans(10, 4, 3)
    assert spans == [(0, 4), (3, 4), (6, 4)]
    # Token 3: window 0 scores min(3, 0) + 0.04, window 1 min(0, 3) + 0.04: a tie, the first
    # wins. Token 4: only window 1 (min(1, 2) + 0.04). Token 5: window 1 scores 1.04 (left 2,
    # right 1).
    assert [is_max_context(spans, i, 3) for i in range(3)] == [True, False, False]
    assert [is_max_context(spans, i, 4) for i in range(3)] == [False, True, False]
    assert [is_max_context(spans, i, 6) for i in range(3)] == [False, True, False]
    # No window holds a position before the context or past it (-1 read the last token's).
    assert [is_max_context(spans, i, p) for i in range(3) for p in (-1, 10)] == [False] * 6
    assert doc_spans(5, 10, 3) == [(0, 5)]
    assert doc_spans(0, 10, 3) == [(0, 0)]  # An empty context still gets one window.
    assert doc_spans(7, 4, 8) == [(0, 4), (4, 3)]  # A stride past the window moves by its length.


def _max_context_window_by_scan(spans, position):
    """The original's `_check_is_max_context`: every window scored for one token."""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if start <= position <= end:
            score = min(position - start, end - position) + 0.01 * length
            if best_score is None or score > best_score:
                best_score, best_index = score, index
    return best_index


@pytest.mark.parametrize("num_tokens", [0, 1, 9, 10, 57, 300])
@pytest.mark.parametrize("window, stride", [(4, 3), (4, 1), (7, 2), (64, 32), (5, 9)])
def test_max_context_windows_match_the_original_per_token_scan(num_tokens, window, stride):
    spans = doc_spans(num_tokens, window, stride)
    windows = max_context_windows(spans)
    assert len(windows) == num_tokens
    for position in range(num_tokens):
        assert windows[position] == _max_context_window_by_scan(spans, position), position


def test_a_long_window_outscores_a_short_last_one_by_its_length():
    # Windows [0-199] and [190-204]. Token 195 has 4 tokens after it in the first window and
    # 5 before it in the second, but the first is 200 tokens long: 4 + 2.0 > 5 + 0.15, so the
    # 0.01 * length term of the original's score gives it to the first.
    spans = doc_spans(205, 200, 190)
    assert spans == [(0, 200), (190, 15)]
    windows = max_context_windows(spans)
    assert windows[194:197] == [0, 0, 1]
    assert windows == [_max_context_window_by_scan(spans, p) for p in range(205)]


def test_conversion_logs_its_progress(tmp_path, monkeypatch, absl_caplog):
    # SQuAD 2.0's 130k training questions take minutes: a line every PROGRESS_SECONDS.
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)
    tokenizer = FullTokenizer(spm_model_file=MODEL)
    example = SquadExample("q", "what is it", "It is a word here.", "word", 8)
    convert_examples_to_features([example] * 2, tokenizer, 23, 5, 4, is_training=False)
    assert "SQuAD: tokenized 2/2 questions (100%) | " in absl_caplog.text


def test_feature_layout_and_windows(tmp_path):
    tokenizer = FullTokenizer(spm_model_file=train_tiny_spm(tmp_path, 150), do_lower_case=True)
    example = SquadExample("q", "what is the long question here", LONG_CONTEXT, "w7", 21)
    features = convert_examples_to_features([example], tokenizer, 23, 5, 4, is_training=False)
    doc_tokens = tokenizer.tokenize(LONG_CONTEXT)
    starts, ends = align_tokens(LONG_CONTEXT, doc_tokens, True)
    query = tokenizer.tokenize(example.question_text)[:4]  # Truncated to max_query_length.
    spans = doc_spans(len(doc_tokens), 23 - len(query) - 3, 5)
    assert len(features) == len(spans) > 3
    max_context = [[] for _ in doc_tokens]  # Per doc token, its flag in each window.
    for index, feature in enumerate(features):
        n = len(feature.tokens)
        assert feature.tokens[: len(query) + 2] == ["[CLS]", *query, "[SEP]"]
        assert feature.tokens[-1] == "[SEP]" and n <= 23 and feature.doc_span_index == index
        assert feature.unique_id == 1000000000 + index
        assert feature.input_ids == tokenizer.convert_tokens_to_ids(feature.tokens) + [0] * (23 - n)
        assert feature.input_mask == [1] * n + [0] * (23 - n)
        context = range(len(query) + 2, n - 1)
        assert feature.segment_ids == [0] * context.start + [1] * (n - context.start) + [0] * (
            23 - n
        )
        assert feature.p_mask == [0] + [1] * (len(query) + 1) + [0] * len(context) + [1] * (24 - n)
        assert sorted(feature.token_to_orig_map) == list(context)
        span_start, span_length = spans[index]
        assert len(context) == span_length
        for position in context:
            doc_index = span_start + position - context.start
            assert feature.tokens[position] == doc_tokens[doc_index]
            assert feature.token_to_orig_map[position] == (starts[doc_index], ends[doc_index])
            max_context[doc_index].append(feature.token_is_max_context[position])
    # Every context token is in some window and is max context in exactly one.
    assert all(flags.count(True) == 1 for flags in max_context)


def perfect_v2_results(training_features):
    """Beam outputs that put the gold span first, and null odds -10 / +10 per window."""
    results = {}
    for feature in training_features:
        start, end = feature.start_position, feature.end_position
        results[feature.unique_id] = {
            "start_top_log_probs": np.array([-0.1, -3.0, -4.0]),
            "start_top_index": np.array([start, 0, 1]),  # 0 = [CLS], 1 = question: invalid.
            "end_top_log_probs": np.array([-0.1, -2.0, -2.5, -3.0, -3.5, -4.0]),
            "end_top_index": np.array([end, 0, 0, 0, 1, 0]),
            "cls_logits": np.array(10.0 if feature.is_impossible else -10.0),
        }
    return results


def tricky_examples(tmp_path):
    content = squad_json(TRICKY, impossible=["What is not here?"])
    return read_squad_examples(write_json(tmp_path / "tricky.json", content))


@pytest.mark.parametrize("max_seq_length,doc_stride", [(384, 128), (40, 7)])
def test_gold_answers_come_back_exactly(tmp_path, tokenizer, max_seq_length, doc_stride):
    examples = tricky_examples(tmp_path)
    settings = dict(max_seq_length=max_seq_length, doc_stride=doc_stride, max_query_length=8)
    train = convert_examples_to_features(examples, tokenizer, is_training=True, **settings)
    predict = convert_examples_to_features(examples, tokenizer, **settings)
    assert [f.unique_id for f in train] == [f.unique_id for f in predict]
    found = set()
    for feature in train:
        example = examples[feature.example_index]
        if feature.is_impossible:
            assert feature.start_position == feature.end_position == 0
            continue
        text = postprocessing.answer_text(
            example.context_text, feature, feature.start_position, feature.end_position
        )
        assert text == example.answer_text
        found.add(feature.example_index)
    answerable = {i for i, e in enumerate(examples) if not e.is_impossible}
    assert found == answerable  # Every answer is inside some window.
    # v1: logits peaked on the gold tokens of each window give back every answer.
    results = {}
    for feature in train:
        start_logits, end_logits = np.zeros(max_seq_length), np.zeros(max_seq_length)
        start_logits[feature.start_position] = end_logits[feature.end_position] = 9.0
        results[feature.unique_id] = {"start_logits": start_logits, "end_logits": end_logits}
    predictions, _ = postprocessing.compute_predictions_v1(examples, predict, results)
    for example in examples:  # v1 has no null answer: the unanswerable one gets some span.
        if not example.is_impossible:
            assert predictions[example.qas_id] == example.answer_text
    # v2: the same through the beam, with "" for the unanswerable question at threshold 0.
    predictions, _, null_odds = postprocessing.compute_predictions_v2(
        examples, predict, perfect_v2_results(train), null_score_diff_threshold=0.0
    )
    assert predictions == {e.qas_id: e.answer_text for e in examples}
    assert [null_odds[e.qas_id] for e in examples] == [
        10.0 if e.is_impossible else -10.0 for e in examples
    ]


def test_answers_at_window_edges(tokenizer):
    # Every word is an answer, so some answers are the first or last context token of a window.
    examples = [
        SquadExample(f"q{i}", "where", LONG_CONTEXT, match.group(), match.start(), False)
        for i, match in enumerate(re.finditer(r"\S+", LONG_CONTEXT))
    ]
    features = convert_examples_to_features(examples, tokenizer, 20, 4, 2, is_training=True)
    edges = set()
    for feature in features:
        if feature.is_impossible:
            continue
        context = sorted(feature.token_to_orig_map)
        example = examples[feature.example_index]
        if feature.start_position == context[0]:
            edges.add("first")
        if feature.end_position == context[-1]:
            edges.add("last")
        text = postprocessing.answer_text(
            example.context_text, feature, feature.start_position, feature.end_position
        )
        assert text == example.answer_text
    assert edges == {"first", "last"}
    assert {f.example_index for f in features if not f.is_impossible} == set(range(len(examples)))


def test_training_skips_answers_not_at_answer_start(tokenizer, caplog):
    examples = [
        SquadExample("bad", "q", "Paris is in France.", "France", 3, False),
        SquadExample("good", "q", "Paris is in France.", "France", 12, False),
    ]
    with caplog.at_level(logging.WARNING):
        features = convert_examples_to_features(examples, tokenizer, is_training=True)
    assert {f.example_index for f in features} == {1}
    assert "bad" in caplog.text
    # Among thousands of per-question lines, one says how much of the file is unused.
    assert "Skipped 1 of 2 training questions: their answer is missing, not at answer_start" in (
        caplog.text
    )
    # Prediction features do not look at answers: both examples get one.
    assert len(convert_examples_to_features(examples, tokenizer)) == 2


def test_settings_that_leave_no_room_are_errors(tokenizer):
    example = SquadExample("q", "q", "Paris is in France.")
    with pytest.raises(SquadDataError, match="--max_seq_length=10"):
        convert_examples_to_features([example], tokenizer, 10, 4, 8)


def test_a_window_of_one_context_token_and_a_stride_of_one_are_the_smallest():
    # Zero of either would make doc_spans step by 0 forever; one is enough.
    check_window(12, 1, 8)  # 12 - 8 - 3 = 1 context token.
    with pytest.raises(SquadDataError, match="leaves no room for the context"):
        check_window(11, 1, 8)
    with pytest.raises(SquadDataError, match="--doc_stride must be positive"):
        check_window(12, 0, 8)


def test_a_stride_beyond_the_window_gives_windows_end_to_end(tokenizer, caplog):
    # The original's `run_squad_v1 --max_seq_length=128` keeps --doc_stride=128 and
    # --max_query_length=64: windows of at most 61 context tokens. Each window starts where
    # the one before it ended (the step is min(window, doc_stride)), so no token is skipped;
    # a warning says the windows do not overlap.
    check_window(128, 128, 64)
    example = SquadExample("q", "where", LONG_CONTEXT)
    with caplog.at_level(logging.WARNING):
        features = convert_examples_to_features([example], tokenizer, 20, 16, 2)
    assert "do not overlap" in caplog.text
    assert len(features) > 2
    spans = [f.token_to_orig_map[i] for f in features for i in sorted(f.token_to_orig_map)]
    starts, ends = align_tokens(
        LONG_CONTEXT, tokenizer.tokenize(LONG_CONTEXT), tokenizer.do_lower_case
    )
    assert spans == list(zip(starts, ends, strict=True))


def test_cache_is_read_back_without_tokenizing(tmp_path, monkeypatch):
    tokenizer = FullTokenizer(spm_model_file=MODEL, do_lower_case=True)
    squad_file = write_json(tmp_path / "dev.json", squad_json(TRICKY, impossible=["Who?"]))
    settings = dict(max_seq_length=48, doc_stride=16, max_query_length=8)
    first = load_features(squad_file, tokenizer, False, cache_dir=str(tmp_path / "c"), **settings)
    first_train = load_features(
        squad_file, tokenizer, True, cache_dir=str(tmp_path / "c"), **settings
    )
    assert not first.from_cache and not first_train.from_cache

    def no_tokenizing(text):
        raise AssertionError("tokenized although the cache holds the features")

    monkeypatch.setattr(tokenizer, "tokenize", no_tokenizing)
    second = load_features(squad_file, tokenizer, False, cache_dir=str(tmp_path / "c"), **settings)
    second_train = load_features(
        squad_file, tokenizer, True, cache_dir=str(tmp_path / "c"), **settings
    )
    assert second.from_cache and second_train.from_cache
    assert second.features == first.features and second_train.features is None
    assert second.num_features == len(first.features)
    for a, b in zip(first.dataset, second.dataset, strict=True):
        assert {k: v.numpy().tolist() for k, v in a.items()} == {
            k: v.numpy().tolist() for k, v in b.items()
        }
    rows = list(second_train.dataset)
    assert len(rows) == second_train.num_features == len(first.features)
    assert {"start_positions", "end_positions", "is_impossible"} <= set(rows[0])
    assert rows[0]["input_ids"].shape == (48,)


def random_v2_results(features, max_seq_length, seed=0):
    """Beam outputs of an untrained model: random scores and positions for every window."""
    rng = np.random.default_rng(seed)
    return {
        feature.unique_id: {
            "start_top_log_probs": np.sort(rng.normal(size=5))[::-1],
            "start_top_index": rng.choice(max_seq_length, 5, replace=False),
            "end_top_log_probs": rng.normal(size=25),
            "end_top_index": rng.integers(0, max_seq_length, 25),
            "cls_logits": rng.normal(),
        }
        for feature in features
    }


def cache_squad_file(tmp_path):
    """TRICKY, a context of many windows and an empty context, in a SQuAD 2.0 file."""
    content = squad_json([*TRICKY, (LONG_CONTEXT, ["w3", "w38"])], impossible=["Who?"])
    empty = {"id": "empty", "question": "Anything?", "is_impossible": True, "answers": []}
    content["data"].append({"title": "e", "paragraphs": [{"context": "", "qas": [empty]}]})
    return write_json(tmp_path / "dev.json", content)


def test_reloaded_predict_features_equal_fresh_ones(tmp_path):
    tokenizer = FullTokenizer(spm_model_file=MODEL, do_lower_case=True)
    squad_file = cache_squad_file(tmp_path)
    settings = dict(max_seq_length=32, doc_stride=8, max_query_length=8)
    fresh = load_features(squad_file, tokenizer, False, **settings)
    load_features(squad_file, tokenizer, False, cache_dir=str(tmp_path / "c"), **settings)
    reloaded = load_features(
        squad_file, tokenizer, False, cache_dir=str(tmp_path / "c"), **settings
    )
    assert reloaded.from_cache and len(fresh.features) > 40
    assert [] in [list(f.token_to_orig_map) for f in fresh.features]  # the empty context
    assert reloaded.features == fresh.features  # maps hold (first, last) tuples as fresh ones
    for feature in reloaded.features:
        values = [feature.unique_id, *feature.input_ids, *feature.p_mask]
        assert {type(v) for v in values} == {int}
        assert {type(v) for v in feature.token_is_max_context.values()} <= {bool}
    results = random_v2_results(fresh.features, 32)
    assert postprocessing.compute_predictions_v2(
        reloaded.examples, reloaded.features, results
    ) == postprocessing.compute_predictions_v2(fresh.examples, fresh.features, results)


def test_predict_metadata_is_read_as_columns(tmp_path, monkeypatch, absl_caplog):
    """The sidecar is an .npz of columns: read without pickle, each distinct token looked up
    once (not every window's tokens), byte for byte the same when rewritten, and rebuilt when
    it holds another format version."""
    tokenizer = FullTokenizer(spm_model_file=MODEL, do_lower_case=True)
    squad_file = cache_squad_file(tmp_path)
    settings = dict(max_seq_length=32, doc_stride=8, max_query_length=8)
    first = load_features(squad_file, tokenizer, False, cache_dir=str(tmp_path / "c"), **settings)
    sidecar = Path(squad_metadata.metadata_path(first.path))
    assert sidecar.name.endswith(".meta.npz")
    written = sidecar.read_bytes()
    with np.load(sidecar, allow_pickle=False) as columns:
        assert int(columns["format_version"]) == squad_metadata.METADATA_FORMAT_VERSION
        assert len(columns["windows"]) == len(first.features)
    later = time.time() + 3600
    with monkeypatch.context() as patch:
        patch.setattr(time, "time", lambda: later)  # zip members carry no write time
        squad_metadata.write_metadata(str(sidecar), first.features)
    assert sidecar.read_bytes() == written

    looked_up, collecting = [], []
    convert = tokenizer.convert_tokens_to_ids

    def counting_convert(tokens):
        looked_up.extend(tokens)
        collecting.append(gc.isenabled())
        return convert(tokens)

    monkeypatch.setattr(tokenizer, "convert_tokens_to_ids", counting_convert)
    gc.disable()  # The reader pauses the collector and leaves it as it found it.
    try:
        features = squad_metadata.read_metadata(str(sidecar), tokenizer, 32)
        assert not gc.isenabled()
    finally:
        gc.enable()
    features = squad_metadata.read_metadata(str(sidecar), tokenizer, 32)
    assert gc.isenabled() and features == first.features and not any(collecting)
    distinct = {token for feature in first.features for token in feature.tokens}
    assert len(looked_up) <= 2 * (len(distinct) + 2)  # Two reads; [CLS] and [SEP] each.

    columns = dict(np.load(sidecar, allow_pickle=False))
    columns["format_version"] = np.asarray(99, np.int64)
    np.savez(sidecar, **columns)
    again = load_features(squad_file, tokenizer, False, cache_dir=str(tmp_path / "c"), **settings)
    assert f"{sidecar} has format version 99, not 2; rebuilding it." in absl_caplog.text
    assert not again.from_cache and again.features == first.features
    assert sidecar.read_bytes() == written


@pytest.mark.parametrize(
    "offset, value",
    [(10, 12), (10, 99), (8, 1)],  # bzip2 (OSError), an unknown method, encrypted (RuntimeError)
    ids=["bzip2", "unknown-method", "encrypted"],
)
def test_a_sidecar_with_a_damaged_zip_header_is_rebuilt(tmp_path, absl_caplog, offset, value):
    """One damaged byte of the zip's central directory (a member's compression method or
    flags) is a warning and a rebuild, not a traceback from zipfile."""
    tokenizer = FullTokenizer(spm_model_file=MODEL, do_lower_case=True)
    squad_file = cache_squad_file(tmp_path)
    settings = dict(max_seq_length=32, doc_stride=8, max_query_length=8)
    first = load_features(squad_file, tokenizer, False, cache_dir=str(tmp_path / "c"), **settings)
    sidecar = Path(squad_metadata.metadata_path(first.path))
    written = sidecar.read_bytes()
    damaged = bytearray(written)
    entry = damaged.index(b"PK\x01\x02")  # the first member's central directory entry
    damaged[entry + offset : entry + offset + 2] = value.to_bytes(2, "little")
    sidecar.write_bytes(bytes(damaged))
    again = load_features(squad_file, tokenizer, False, cache_dir=str(tmp_path / "c"), **settings)
    assert f"{sidecar} is truncated or damaged (" in absl_caplog.text
    assert not again.from_cache and again.features == first.features
    assert sidecar.read_bytes() == written


def test_shared_dev_v2(tmp_path):
    if not SHARED_SQUAD.is_file():
        pytest.skip("shared/data/squad/dev-v2.0.json is not present")
    tokenizer = FullTokenizer(spm_model_file=MODEL, do_lower_case=True)
    settings = dict(max_seq_length=96, doc_stride=32, max_query_length=16)
    data = load_features(str(SHARED_SQUAD), tokenizer, False, **settings)
    assert len(data.examples) == 14 and sum(e.is_impossible for e in data.examples) == 6
    rng = np.random.default_rng(0)
    results = {}
    for feature in data.features:  # Random beam outputs, as an untrained model gives.
        start_index = rng.choice(96, 5, replace=False)
        results[feature.unique_id] = {
            "start_top_log_probs": np.sort(rng.normal(size=5))[::-1],
            "start_top_index": start_index,
            "end_top_log_probs": rng.normal(size=25),
            "end_top_index": rng.integers(0, 96, 25),
            "cls_logits": rng.normal(),
        }
    predictions, nbest, null_odds = postprocessing.compute_predictions_v2(
        data.examples, data.features, results
    )
    paths = postprocessing.write_predictions(str(tmp_path / "out"), predictions, nbest, null_odds)
    written = {kind: json.loads(Path(p).read_text(encoding="utf-8")) for kind, p in paths.items()}
    qids = [e.qas_id for e in data.examples]
    assert list(written["predictions"]) == list(written["null_odds"]) == qids
    for example in data.examples:
        assert written["predictions"][example.qas_id] in example.context_text
        entries = written["nbest"][example.qas_id]
        assert set(entries[0]) == {"text", "probability", "start_log_prob", "end_log_prob"}
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
        assert isinstance(written["null_odds"][example.qas_id], float)
    dataset = json.loads(SHARED_SQUAD.read_text(encoding="utf-8"))["data"]
    assert evaluate_v2(dataset, predictions, null_odds)["total"] == 14
    # Perfect outputs score 100 once the null threshold is tuned.
    train = convert_examples_to_features(data.examples, tokenizer, is_training=True, **settings)
    predictions, _, null_odds = postprocessing.compute_predictions_v2(
        data.examples, data.features, perfect_v2_results(train)
    )
    tuned = tune_null_threshold(dataset, predictions, null_odds, str(tmp_path))
    assert tuned.evaluation["exact"] == tuned.evaluation["f1"] == 100.0
    assert json.loads((tmp_path / "predictions.json").read_text()) == tuned.predictions
