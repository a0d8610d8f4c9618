"""SavedModels taking raw strings: reloaded in a fresh process that imports only TensorFlow
and tensorflow-text, they give the Keras model's outputs on the same text."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from albert import fileio
from albert.data import glue
from albert.export import _ClassifierServing, export_classifier
from albert.modeling import AlbertBackbone, AlbertClassifier
from albert.text_ops import InGraphTokenizer
from albert.tokenization import FullTokenizer
from tests.helpers import run_without_albert, tiny_config

TESTS = Path(__file__).resolve().parent
SPM_MODEL = str(TESTS / "fixtures" / "tokenizer" / "tiny.model")
MAX_SEQ_LENGTH = 13
CONFIG = tiny_config(
    vocab_size=1000,
    intermediate_size=22,
    num_hidden_layers=3,
    num_hidden_groups=1,
    inner_group_num=1,
    max_position_embeddings=20,
    type_vocab_size=2,
)
# Cased, accented, long (cut to MAX_SEQ_LENGTH by the original's rule) and short texts.
SENTENCES_A = ["The River flows to the SEA.", "Café crème, naïve pâté", "people came " * 9, "gold"]
SENTENCES_B = ["world   time", "The society of schools, 1,000 miles", "free", "love " * 12]

# Loads both SavedModels with nothing of this project imported, prints outputs as JSON.
_LOAD_SCRIPT = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
pair_dir, single_dir, a, b = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
pair = tf.saved_model.load(pair_dir).signatures["serving_default"]
single = tf.saved_model.load(single_dir).signatures["serving_default"]
pair_out = pair(sentence_a=tf.constant(a), sentence_b=tf.constant(b))
single_out = single(sentence_a=tf.constant(a))
print(json.dumps({
    "pair_inputs": sorted(pair.structured_input_signature[1]),
    "single_inputs": sorted(single.structured_input_signature[1]),
    "probabilities": pair_out["probabilities"].numpy().tolist(),
    "label": [s.decode() for s in pair_out["label"].numpy()],
    "score": single_out["score"].numpy().tolist(),
    "albert_imported": any(m == "albert" or m.startswith("albert.") for m in sys.modules),
}))
"""


def _model(num_labels, seed):
    model = AlbertClassifier(AlbertBackbone(CONFIG), num_labels)
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        # Large weights so that the outputs differ between texts; LayerNorm kept at 1 and 0.
        if "LayerNorm" not in variable.path:
            variable.assign(rng.normal(0.0, 0.5, variable.shape).astype("float32"))
    return model


def _keras_logits(model, task_name, sentences_a, sentences_b=None):
    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL, do_lower_case=True)
    examples = [
        glue.InputExample(str(i), a, sentences_b[i] if sentences_b else None)
        for i, a in enumerate(sentences_a)
    ]
    features = glue.convert_examples_to_features(examples, task_name, MAX_SEQ_LENGTH, tokenizer)
    inputs = {
        name: np.array([f[name] for f in features], np.int32)
        for name in ("input_ids", "input_mask", "segment_ids")
    }
    return np.asarray(model(inputs)["logits"], np.float64)


@pytest.mark.slow
def test_exported_models_match_keras_in_a_fresh_process(tmp_path):
    pair_model, single_model = _model(3, seed=1), _model(1, seed=2)
    export_classifier(
        pair_model, SPM_MODEL, True, MAX_SEQ_LENGTH, glue.MNLI_LABELS, str(tmp_path / "pair")
    )
    export_classifier(
        single_model,
        SPM_MODEL,
        True,
        MAX_SEQ_LENGTH,
        (),
        str(tmp_path / "single"),
        sentence_pair=False,
    )
    out = run_without_albert(
        _LOAD_SCRIPT,
        str(tmp_path / "pair"),
        str(tmp_path / "single"),
        json.dumps(SENTENCES_A),
        json.dumps(SENTENCES_B),
        cwd=tmp_path,
    )
    assert not out["albert_imported"]
    assert out["pair_inputs"] == ["sentence_a", "sentence_b"]
    assert out["single_inputs"] == ["sentence_a"]

    logits = _keras_logits(pair_model, "mnli", SENTENCES_A, SENTENCES_B)  # [4, 3]
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert np.max(np.abs(np.array(out["probabilities"]) - probabilities)) < 1e-5
    assert out["label"] == [glue.MNLI_LABELS[i] for i in logits.argmax(axis=1)]
    scores = _keras_logits(single_model, "sts-b", SENTENCES_A)[:, 0]
    assert np.max(np.abs(np.array(out["score"]) - scores)) < 1e-5
    # The texts differ, so equal outputs would mean the inputs were ignored.
    assert np.ptp(scores) > 0.1 and np.ptp(probabilities) > 0.1


def test_labels_must_match_the_model(tmp_path):
    with pytest.raises(ValueError, match="2 labels for a model with 3 outputs"):
        export_classifier(_model(3, seed=0), SPM_MODEL, True, 8, ("0", "1"), str(tmp_path))


def test_a_max_seq_length_over_the_position_embeddings_is_one_line(tmp_path):
    # The trace failed deep in the embedding layer ("Dimensions must be equal ... [?,30,10],
    # [1,20,10]"), a page of traceback.
    with pytest.raises(ValueError, match="max_seq_length=30 exceeds the model's max_position_"):
        export_classifier(_model(3, seed=0), SPM_MODEL, True, 30, glue.MNLI_LABELS, str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_max_seq_length_of_every_position_is_accepted():
    # The published models are fine-tuned at max_seq_length=512 = max_position_embeddings.
    from albert.export import check_max_seq_length

    model = _model(3, seed=0)
    check_max_seq_length(model, 20)
    with pytest.raises(ValueError, match="max_seq_length=21 exceeds"):
        check_max_seq_length(model, 21)


def _tree(path):
    return {p.relative_to(path): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_failed_export_leaves_the_earlier_one_and_a_new_one_replaces_it_whole(
    tmp_path, monkeypatch
):
    export_dir = tmp_path / "export"
    export_classifier(_model(3, seed=1), SPM_MODEL, True, 8, glue.MNLI_LABELS, str(export_dir))
    before = _tree(export_dir)
    real_save = tf.saved_model.save

    def save_then_fail(module, path, **kwargs):
        real_save(module, path, **kwargs)
        raise OSError(28, "No space left on device")  # The disk filled up at the very end.

    monkeypatch.setattr(tf.saved_model, "save", save_then_fail)
    with pytest.raises(OSError, match="No space left"):
        export_classifier(_model(3, seed=2), SPM_MODEL, True, 8, glue.MNLI_LABELS, str(export_dir))
    assert _tree(export_dir) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # No temporary left.
    monkeypatch.setattr(tf.saved_model, "save", real_save)
    export_classifier(_model(3, seed=2), SPM_MODEL, True, 8, glue.MNLI_LABELS, str(export_dir))
    after = _tree(export_dir)
    assert after.keys() == before.keys() and after != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


@pytest.fixture(scope="module")
def servings():
    """{sentence_pair: _ClassifierServing} of one MNLI model (key "model": the model), each
    traced once for the module: the tests that take it run on one pytest-xdist worker."""
    model, tokenizer = _model(3, seed=1), InGraphTokenizer(SPM_MODEL, do_lower_case=True)
    servings = {
        pair: _ClassifierServing(model, tokenizer, MAX_SEQ_LENGTH, glue.MNLI_LABELS, pair)
        for pair in (False, True)
    }
    return {**servings, "model": model}


@pytest.mark.xdist_group("export_servings")
def test_an_empty_sentence_b_is_served_as_fine_tuning_packs_it(servings):
    # glue.convert_examples_to_features (as the original) packs a second sentence without
    # tokens as `[CLS] A [SEP]`; the served model must see the same ids.
    sentences_a = ["gold", "people came " * 9, "The River flows to the SEA.", "Café"]
    sentences_b = ["", "", "   ", "free"]
    served = servings[True].serve(tf.constant(sentences_a), tf.constant(sentences_b))
    logits = _keras_logits(servings["model"], "mnli", sentences_a, sentences_b)
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert np.max(np.abs(served["probabilities"].numpy() - probabilities)) < 1e-5


def test_an_export_dir_that_is_a_symlink_has_its_target_replaced(tmp_path):
    # A serving path often links to a model folder (serving -> disk/mnli_v1). Moved aside and
    # deleted as a folder, the link made rmtree empty the old SavedModel and then fail after
    # the new one was in place: the run ended in an error and the link was gone.
    target = tmp_path / "disk" / "mnli_v1"
    target.mkdir(parents=True)
    (target / "saved_model.pb").write_bytes(b"old")
    link = tmp_path / "serving"
    link.symlink_to(target)
    with fileio.atomic_directory(str(link)) as temporary:
        os.makedirs(temporary)
        Path(temporary, "saved_model.pb").write_bytes(b"new")
    assert link.is_symlink() and link.resolve() == target
    assert _tree(target) == {Path("saved_model.pb"): b"new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk", "serving"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["mnli_v1"]


def test_a_failed_rename_into_place_puts_the_old_folder_back(tmp_path, monkeypatch):
    folder = tmp_path / "serving"
    folder.mkdir()
    (folder / "saved_model.pb").write_bytes(b"old")
    rename, into_place = tf.io.gfile.rename, []

    def failing_rename(source, target, overwrite=False):
        into_place.append(target == str(folder))
        if into_place.count(True) == 1 and into_place[-1]:  # the new folder into place
            raise tf.errors.UnavailableError(None, None, "storage went away")
        return rename(source, target, overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", failing_rename)
    with pytest.raises(tf.errors.UnavailableError):
        with fileio.atomic_directory(str(folder)) as temporary:
            os.makedirs(temporary)
            Path(temporary, "saved_model.pb").write_bytes(b"new")
    assert _tree(folder) == {Path("saved_model.pb"): b"old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serving"]


def test_an_export_dir_holding_other_files_is_refused_and_left_whole(tmp_path):
    # The export replaces a folder whole: an earlier SavedModel, yes; a folder of anything else
    # (a run's checkpoints, a home directory) must not be deleted to make room for it.
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "model.ckpt-100.index").write_bytes(b"checkpoint")
    with pytest.raises(FileExistsError, match="not a SavedModel"):
        export_classifier(_model(3, seed=1), SPM_MODEL, True, 8, glue.MNLI_LABELS, str(folder))
    assert _tree(folder) == {Path("model.ckpt-100.index"): b"checkpoint"}


@pytest.mark.xdist_group("export_servings")
@pytest.mark.parametrize("rows", [(2, 4), (1, 3), (3, 1), (0, 1)])
def test_sentences_of_unequal_rows_are_a_clear_error(servings, rows):
    # TF Serving's columnar format lets a client send 2 sentence_a and 4 sentence_b; that
    # failed deep in the tokenizer ("Incompatible shapes: [2] vs. [4]").
    with pytest.raises(tf.errors.InvalidArgumentError, match="sentence_a and sentence_b must"):
        servings[True].serve(
            tf.constant(["gold"] * rows[0], tf.string), tf.constant(["free"] * rows[1], tf.string)
        )


@pytest.mark.xdist_group("export_servings")
def test_text_that_is_not_utf8_is_a_clear_error(servings):
    # A gRPC client can send Latin-1 bytes, or cut a character in two; those were served a
    # prediction made from replacement characters, as if the text were fine.
    single, pair = servings[False], servings[True]
    valid = ["café".encode(), "\ufffd a\x00b 😀".encode(), b""]
    assert single.serve(tf.constant(valid))["label"].shape == [3]
    assert pair.serve(tf.constant(valid), tf.constant(valid[::-1]))["label"].shape == [3]
    for invalid in [b"caf\xe9", b"abc\xf0\x9f", b"\xed\xa0\x80"]:
        with pytest.raises(tf.errors.InvalidArgumentError, match="sentence_a must be UTF-8"):
            single.serve(tf.constant([b"gold", invalid]))
        with pytest.raises(tf.errors.InvalidArgumentError, match="sentence_b must be UTF-8"):
            pair.serve(tf.constant([b"gold", b"free"]), tf.constant([b"x", invalid]))


def _ram_tree(root):
    return {
        f"{folder}/{name}"[len(root) :]: tf.io.gfile.GFile(f"{folder}/{name}", "rb").read()
        for folder, _, files in tf.io.gfile.walk(root)
        for name in files
    }


def test_an_export_to_a_non_local_filesystem_holds_the_whole_saved_model(tmp_path):
    # ram:// (standing in for gs:// and other non-local filesystems) renames a folder's own
    # entry only: the SavedModel moved into place was empty, its files left under the hidden
    # temporary name, with no error. A replaced export must leave nothing else behind.
    root = f"ram://export-{os.getpid()}-{tmp_path.name}"
    export_dir = f"{root}/mnli"
    export_classifier(_model(3, 1), SPM_MODEL, True, MAX_SEQ_LENGTH, glue.MNLI_LABELS, export_dir)
    first = _ram_tree(root)
    model = _model(3, seed=2)
    export_classifier(model, SPM_MODEL, True, MAX_SEQ_LENGTH, glue.MNLI_LABELS, export_dir)
    second = _ram_tree(root)
    assert "/mnli/saved_model.pb" in second and second.keys() == first.keys()
    assert all(name.startswith("/mnli/") for name in second) and second != first
    served = tf.saved_model.load(export_dir).signatures["serving_default"](
        sentence_a=tf.constant(SENTENCES_A), sentence_b=tf.constant(SENTENCES_B)
    )
    logits = _keras_logits(model, "mnli", SENTENCES_A, SENTENCES_B)
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert np.max(np.abs(served["probabilities"].numpy() - probabilities)) < 1e-5


def test_an_export_traces_its_serving_function_once(tmp_path, monkeypatch):
    # A concrete function taken before tf.saved_model.save was traced a second time inside
    # it: every export built its serving graph twice.
    traces = []
    serve_pair = _ClassifierServing._serve_pair

    def counted(self, *args):
        traces.append(args)
        return serve_pair(self, *args)

    monkeypatch.setattr(_ClassifierServing, "_serve_pair", counted)
    export_dir = str(tmp_path / "mnli")
    export_classifier(_model(3, 1), SPM_MODEL, True, MAX_SEQ_LENGTH, glue.MNLI_LABELS, export_dir)
    assert len(traces) == 1
    assert tf.saved_model.contains_saved_model(export_dir)
