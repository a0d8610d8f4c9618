"""The QA SavedModel's `answer` is the text predictions.json gives for the same span: the
original characters of the context (case, accents, spacing kept), no surrounding whitespace."""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from albert.data import squad, squad_postprocessing
from albert.export_qa import export_question_answering
from albert.modeling import AlbertBackbone, AlbertQuestionAnswering
from albert.tokenization import FullTokenizer
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
    paragraphs = [
        {"context": context, "qas": [{"id": f"q{i}", "question": question, "answers": []}]}
        for i, (question, context) in enumerate(pairs)
    ]
    Path(path).write_text(json.dumps({"version": "1.1", "data": [{"paragraphs": paragraphs}]}))
    return pairs


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
    inputs = {
        name: np.stack([f.model_inputs(False)[name] for f in data.features])
        for name in ("input_ids", "input_mask", "segment_ids")
    }
    results = squad_postprocessing.results_by_unique_id(
        [f.unique_id for f in data.features], model(inputs, training=False)
    )
    predictions, _ = squad_postprocessing.compute_predictions_v1(
        data.examples, data.features, results, MAX_SEQ_LENGTH, MAX_ANSWER_LENGTH
    )

    export_dir = export_question_answering(
        model,
        SPM_MODEL,
        True,
        str(tmp_path / "export"),
        MAX_SEQ_LENGTH,
        MAX_QUERY_LENGTH,
        MAX_ANSWER_LENGTH,
    )
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    questions, contexts = zip(*pairs, strict=True)
    out = serve(question=tf.constant(questions), context=tf.constant(contexts))
    served = [answer.decode("utf-8") for answer in out["answer"].numpy()]

    assert all(answer and answer == answer.strip() for answer in served), served
    assert served == [predictions[f"q{i}"] for i in range(len(pairs))]
