"""The RACE SavedModel: raw article, question and options packed in-graph as fine-tuning's
features, served as the Keras model predicts, also in a fresh process without `albert`."""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from albert.data import race
from albert.export_race import (
    _MultipleChoiceServing,
    export_multiple_choice,
    question_with_option,
)
from albert.modeling import AlbertBackbone, AlbertMultipleChoice
from albert.text_ops import InGraphTokenizer
from albert.tokenization import FullTokenizer
from tests.helpers import run_without_albert, tiny_config

SPM_MODEL = str(Path(__file__).resolve().parent / "fixtures" / "tokenizer" / "tiny.model")
MAX_SEQ_LENGTH = 23
MAX_QA_LENGTH = 9
CONFIG = tiny_config(
    vocab_size=1000,
    intermediate_size=22,
    num_hidden_layers=2,
    num_hidden_groups=1,
    inner_group_num=1,
    max_position_embeddings=30,
    type_vocab_size=2,
)
# Long articles and question+options (both cut), blanks ("_", "__", several) and none, empty
# questions and options, accents and upper case, the digit-comma rule.
EXAMPLES = [
    race.RaceExample(
        "0",
        "The River flows to the SEA. " * 6,
        "The people came to _ because of the book.",
        ["Café crème", "", "naïve PÂTÉ", "the century of movement and state"],
        0,
        "high",
    ),
    race.RaceExample("1", "gold", "", ["", "a", "B _ c", "1,000 miles"], 1, "middle"),
    race.RaceExample(
        "2", "", "Which   word __ is in the text?", ["x", "", "ÀÉÎ", "people came " * 5], 2, "high"
    ),
    race.RaceExample(
        "3",
        "Ærø  and the FINAL ΟΔΟΣ, visitors of 1,000 cars",
        "Why did _ come _ here _?",
        ["visitors", "cars", "free", "state"],
        3,
        "high",
    ),
    race.RaceExample(
        "4", "people came " * 12, "What is TRUE?", ["Free", "the book", "", "Ça va"], 0, "middle"
    ),
]


def _texts(examples):
    return (
        tf.constant([e.article for e in examples]),
        tf.constant([e.question for e in examples]),
        tf.constant([e.options for e in examples]),
    )


def _features(examples, max_seq_length=MAX_SEQ_LENGTH, max_qa_length=MAX_QA_LENGTH):
    """The Python features of `examples`: dict of int [N, C, T]."""
    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL, do_lower_case=True)
    features = race.convert_examples_to_features(examples, tokenizer, max_seq_length, max_qa_length)
    return {
        name: np.array([f[name] for f in features]).reshape(len(examples), 4, max_seq_length)
        for name in ("input_ids", "input_mask", "segment_ids")
    }


def _model(seed):
    model = AlbertMultipleChoice(AlbertBackbone(CONFIG), dropout_rate=0.0)
    model(_features(EXAMPLES[:1]))  # builds the weights
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        # Large weights so that the options' logits differ; LayerNorm kept at 1 and 0.
        if "LayerNorm" not in variable.path:
            variable.assign(rng.normal(0.0, 0.5, variable.shape).astype("float32"))
    return model


@pytest.fixture(scope="module")
def model():
    return _model(seed=1)


@pytest.fixture(scope="module")
def serving(model):
    return _MultipleChoiceServing(model, InGraphTokenizer(SPM_MODEL), MAX_SEQ_LENGTH, MAX_QA_LENGTH)


def _keras_probabilities(model, examples):
    logits = np.asarray(model(_features(examples))["logits"], np.float64)  # [N, C]
    return np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)


def test_the_texts_need_every_cut():
    # Without these, the id test below would not check the truncation rules.
    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL, do_lower_case=True)
    qa_lengths = [
        len(tokenizer.tokenize(race.question_with_option(e.question, o)))
        for e in EXAMPLES
        for o in e.options
    ]
    article_lengths = [len(tokenizer.tokenize(e.article)) for e in EXAMPLES]
    assert max(qa_lengths) > MAX_QA_LENGTH and min(qa_lengths) == 0
    assert max(article_lengths) > MAX_SEQ_LENGTH and min(article_lengths) == 0


def test_the_packed_ids_are_the_features(serving):
    packed = serving.race_inputs(*_texts(EXAMPLES))
    expected = _features(EXAMPLES)
    for name, value in expected.items():
        np.testing.assert_array_equal(packed[name].numpy(), value, err_msg=name)


def test_a_question_budget_near_the_whole_length_still_packs_as_the_features(model):
    # max_qa_length may be up to max_seq_length - 3: the article then gets what the 3
    # special tokens and the question+option leave, never a token of the question's share.
    max_seq_length, max_qa_length = 12, 8
    serving = _MultipleChoiceServing(
        model, InGraphTokenizer(SPM_MODEL), max_seq_length, max_qa_length
    )
    packed = serving.race_inputs(*_texts(EXAMPLES))
    expected = _features(EXAMPLES, max_seq_length, max_qa_length)
    for name, value in expected.items():
        np.testing.assert_array_equal(packed[name].numpy(), value, err_msg=name)


def test_blanks_are_filled_as_the_features_fill_them():
    questions = ["a _ b", "__", "_", "no blank", "", "x_y_z", "   "]
    options = ["Opt", "o", "", "opt", "opt", "1", ""]
    filled = question_with_option(tf.constant(questions), tf.constant(options)).numpy()
    expected = [race.question_with_option(q, o) for q, o in zip(questions, options, strict=True)]
    assert [f.decode() for f in filled] == expected


def test_served_probabilities_and_answers_are_the_keras_models(serving, model):
    served = serving.serve(*_texts(EXAMPLES))
    probabilities = _keras_probabilities(model, EXAMPLES)
    assert np.max(np.abs(served["probabilities"].numpy() - probabilities)) < 1e-5
    logits = np.asarray(model(_features(EXAMPLES))["logits"])
    assert np.max(np.abs(served["logits"].numpy() - logits)) < 1e-5
    assert [a.decode() for a in served["answer"].numpy()] == [
        "ABCD"[i] for i in probabilities.argmax(axis=1)
    ]
    # The options differ, so equal probabilities would mean the inputs were ignored.
    assert np.ptp(probabilities) > 0.1
    empty = serving.serve(*(t[:0] for t in _texts(EXAMPLES)))
    assert empty["probabilities"].shape == [0, 4] and empty["answer"].shape == [0]


@pytest.mark.parametrize("rows", [(2, 3, 3), (3, 2, 3), (3, 3, 1), (0, 1, 1)])
def test_inputs_of_unequal_rows_are_a_clear_error(serving, rows):
    article, question, options = _texts(EXAMPLES[:3])
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="article, question and options must hold as many"
    ):
        serving.serve(article[: rows[0]], question[: rows[1]], options[: rows[2]])


@pytest.mark.parametrize("width", [0, 3, 5])
def test_options_not_four_per_row_are_a_clear_error(serving, width):
    article, question, _ = _texts(EXAMPLES[:2])
    options = tf.fill([2, width], "gold")
    message = rf"options must hold 4 options per row \(A to D\); got the shape\] \[2 {width}\]"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        serving.serve(article, question, options)


def test_text_that_is_not_utf8_is_a_clear_error(serving):
    article, question, options = _texts(EXAMPLES[:3])
    for invalid in [b"caf\xe9", b"abc\xf0\x9f", b"\xed\xa0\x80"]:
        bad = tf.tensor_scatter_nd_update(article, [[1]], [invalid])
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"article must be UTF-8 text; rows that are not:\] \[1\]",
        ):
            serving.serve(bad, question, options)
        bad = tf.tensor_scatter_nd_update(question, [[2]], [invalid])
        with pytest.raises(tf.errors.InvalidArgumentError, match="question must be UTF-8"):
            serving.serve(article, bad, options)
        # Two options of row 2: the row is named once.
        bad = tf.tensor_scatter_nd_update(options, [[2, 0], [2, 3]], [invalid, b"\xe9" + invalid])
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"options must be UTF-8 text; rows that are not:\] \[2\]",
        ):
            serving.serve(article, question, bad)


def test_settings_the_model_cannot_serve_are_one_line(tmp_path, model):
    with pytest.raises(race.RaceDataError, match="max_qa_length=21 must be between 1 and"):
        export_multiple_choice(model, SPM_MODEL, True, MAX_SEQ_LENGTH, 21, str(tmp_path))
    with pytest.raises(ValueError, match="max_seq_length=31 exceeds the model's max_position"):
        export_multiple_choice(model, SPM_MODEL, True, 31, MAX_QA_LENGTH, str(tmp_path))
    assert list(tmp_path.iterdir()) == []


# Loads the SavedModel with nothing of this project imported, prints its outputs as JSON.
_LOAD_SCRIPT = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
export_dir, examples = sys.argv[1], json.loads(sys.argv[2])
serve = tf.saved_model.load(export_dir).signatures["serving_default"]
out = serve(
    article=tf.constant([e[0] for e in examples]),
    question=tf.constant([e[1] for e in examples]),
    options=tf.constant([e[2] for e in examples]),
)
print(json.dumps({
    "inputs": sorted(serve.structured_input_signature[1]),
    "probabilities": out["probabilities"].numpy().tolist(),
    "answer": [a.decode() for a in out["answer"].numpy()],
    "albert_imported": any(m == "albert" or m.startswith("albert.") for m in sys.modules),
}))
"""


@pytest.mark.slow
def test_the_saved_model_serves_in_a_fresh_process(tmp_path, model):
    export_dir = str(tmp_path / "race")
    export_multiple_choice(model, SPM_MODEL, True, MAX_SEQ_LENGTH, MAX_QA_LENGTH, export_dir)
    examples = [[e.article, e.question, e.options] for e in EXAMPLES]
    out = run_without_albert(_LOAD_SCRIPT, export_dir, json.dumps(examples), cwd=tmp_path)
    assert not out["albert_imported"]
    assert out["inputs"] == ["article", "options", "question"]
    probabilities = _keras_probabilities(model, EXAMPLES)
    assert np.max(np.abs(np.array(out["probabilities"]) - probabilities)) < 1e-5
    assert out["answer"] == ["ABCD"[i] for i in probabilities.argmax(axis=1)]
