"""The SQuAD 2.0 SavedModel serves predictions.json's answers and null_odds.json's scores."""

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from albert.data import squad, squad_postprocessing
from albert.export_qa import export_question_answering
from albert.export_qa_v2 import SquadV2Serving
from albert.modeling import AlbertBackbone, AlbertQuestionAnswering
from albert.text_ops import InGraphTokenizer
from albert.tokenization import FullTokenizer, load_spm_model
from tests.helpers import tiny_config
from tests.test_export_qa import SHARED_SQUAD, SPM_MODEL, _write_dev

MAX_SEQ_LENGTH, MAX_QUERY_LENGTH, DOC_STRIDE, MAX_ANSWER_LENGTH = 48, 12, 10, 7
CONFIG = tiny_config(vocab_size=1000, max_position_embeddings=MAX_SEQ_LENGTH, type_vocab_size=2)


def _v2_model(seed):
    # An uneven beam (4 starts x 3 ends), so that a swapped beam axis fails.
    model = AlbertQuestionAnswering(
        AlbertBackbone(CONFIG), version_2_with_negative=True, start_n_top=4, end_n_top=3
    )
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        # Large weights, so that the beam, the best span and the null score vary.
        if "LayerNorm" not in variable.path:
            variable.assign(rng.normal(0.0, 0.5, variable.shape).astype("float32"))
    return model


def _host_predictions(data, model, threshold):
    """run_squad's v2 (predictions, nbest, null_odds) for `data`, 8 windows a batch."""
    results = {}
    for begin in range(0, len(data.features), 8):
        features = data.features[begin : begin + 8]
        inputs = {
            name: np.stack([f.model_inputs(False)[name] for f in features])
            for name in ("input_ids", "input_mask", "segment_ids", "p_mask")
        }
        outputs = {k: np.asarray(v) for k, v in model(inputs, training=False).items()}
        for name in ("start_top_index", "end_top_index"):  # As SquadTask.answers.
            outputs[name] = outputs[name].astype(np.int64)
        results.update(
            squad_postprocessing.results_by_unique_id([f.unique_id for f in features], outputs)
        )
    return squad_postprocessing.compute_predictions_v2(
        data.examples, data.features, results, 20, MAX_ANSWER_LENGTH, threshold
    )


# Slow tier: builds, exports and serves a model (~15 s).
@pytest.mark.slow
@pytest.mark.skipif(not SHARED_SQUAD.exists(), reason="no shared SQuAD data")
def test_served_v2_answers_and_null_scores_are_predictions_and_null_odds_json(tmp_path):
    # Whole dev contexts (several windows each) mixed with empty, one-token and non-ASCII
    # ones; the model's beam, null score and threshold decide as run_squad_v2's files do.
    data = json.loads(SHARED_SQUAD.read_text(encoding="utf-8"))["data"]
    pairs = [
        (qa["question"], p["context"])
        for article in data
        for p in article["paragraphs"]
        for qa in p["qas"]
    ]
    pairs[1:1] = [
        ("x?", "x"),
        ("what?", "   "),
        ("who?", ""),
        ("wo?", "Über die Brücke gingen 2,500 Menschen am Montag, sagt die Straße."),
        ("quoi?", "Le café de la gare est à côté du musée, ½ heure ``plus loin''."),
    ]
    _write_dev(tmp_path / "dev.json", pairs)
    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL, do_lower_case=True)
    squad_data = squad.load_features(
        str(tmp_path / "dev.json"), tokenizer, False, MAX_SEQ_LENGTH, DOC_STRIDE, MAX_QUERY_LENGTH
    )
    assert len(squad_data.features) > 3 * len(pairs)  # most contexts span many windows
    model = _v2_model(seed=2)
    best, nbest, null_odds = _host_predictions(squad_data, model, None)
    ids = [f"q{i}" for i in range(len(pairs))]
    # A threshold amid the null scores (not at one: the served batch's floats may differ in
    # the last bit), so that some answers are nulled and some kept.
    odds = sorted(null_odds[q] for q in ids)
    threshold = (odds[len(odds) // 2] + odds[len(odds) // 2 + 1]) / 2
    predictions, _, _ = _host_predictions(squad_data, model, threshold)
    assert 0 < sum(predictions[q] == "" for q in ids) < sum(best[q] != "" for q in ids)

    export_dir = export_question_answering(
        model,
        SPM_MODEL,
        True,
        str(tmp_path / "export"),
        MAX_SEQ_LENGTH,
        MAX_QUERY_LENGTH,
        MAX_ANSWER_LENGTH,
        doc_stride=DOC_STRIDE,
        null_score_diff_threshold=threshold,
    )
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    questions, contexts = zip(*pairs, strict=True)
    out = serve(question=tf.constant(list(questions)), context=tf.constant(list(contexts)))

    texts = {
        name: [a.decode("utf-8") for a in out[name].numpy()] for name in ("answer", "best_answer")
    }
    assert texts["answer"] == [predictions[q] for q in ids]
    assert texts["best_answer"] == [best[q] for q in ids]
    assert np.max(np.abs(out["null_score"].numpy() - [null_odds[q] for q in ids])) < 1e-4
    found = [q for q in ids if nbest[q][0]["text"]]
    scores = [nbest[q][0]["start_log_prob"] + nbest[q][0]["end_log_prob"] for q in found]
    served_scores = out["score"].numpy()[[ids.index(q) for q in found]]
    assert np.max(np.abs(served_scores - scores)) < 1e-4
    assert out["null_score_diff_threshold"].numpy().tolist() == [threshold] * len(ids)


def test_a_null_score_equal_to_the_threshold_keeps_the_answer():
    # predictions.json answers "" only when the null score is above the threshold, and a
    # tuned threshold is one of the dev null scores: at equality the answer stays.
    model = _v2_model(seed=2)
    sp_model = load_spm_model(SPM_MODEL)
    detokenizer = tf_text.SentencepieceTokenizer(model=sp_model.serialized_model_proto())
    tokenizer = InGraphTokenizer(SPM_MODEL, do_lower_case=True)
    settings = (MAX_SEQ_LENGTH, MAX_QUERY_LENGTH, MAX_ANSWER_LENGTH, 20, DOC_STRIDE)

    def serve(threshold):
        module = SquadV2Serving(
            model,
            tokenizer,
            detokenizer,
            sp_model.unk_id(),
            *settings,
            null_score_diff_threshold=threshold,
        )
        # Eagerly: the same ops as the traced `serve`, without tracing it three times.
        out = module._serve(
            question=tf.constant(["who sat there?"]),
            context=tf.constant(["the cat sat on the mat by the door."]),
        )
        return {name: value.numpy()[0] for name, value in out.items()}

    null_score = float(serve(0.0)["null_score"])  # float32, exactly a float64
    at = serve(null_score)
    assert at["best_answer"] != b"" and at["answer"] == at["best_answer"]
    assert serve(np.nextafter(null_score, -np.inf))["answer"] == b""
