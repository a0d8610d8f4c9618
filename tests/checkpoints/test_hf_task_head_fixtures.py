"""HF's fine-tuned classes against logits HF computed, without torch.

`tests/checkpoints/test_hf_task_heads.py` and `test_hf_class_order.py` run transformers itself
and skip where torch is not installed (it is not in requirements.txt); these tests read the
committed fixtures `tests/fixtures/hf_{sequence_classification,multiple_choice,
question_answering}` (written by `make_hf_fixtures.py`: random weights on the tiny "grouped"
config, inputs and HF's logits in eval mode), so every checkout checks the same claims: each
file loads with its head into our task model and gives HF's logits; MNLI's classes named in
another order and case are put in the task's order; our export writes back the same tensors.
Shape letters: B batch (3), C choices (4), T sequence (7).
"""

import json
import os
import shutil

import numpy as np
import pytest
from checkpoint_testing import FIXTURES
from safetensors.numpy import load_file

from albert.checkpoints import hf, load_checkpoint, read_config
from albert.modeling import AlbertClassifier, AlbertMultipleChoice, AlbertQuestionAnswering
from albert.tasks import FineTuningError
from albert.tasks.weights import load_finetuning_weights

TOLERANCE = 1e-5
MNLI_LABELS = ("contradiction", "entailment", "neutral")  # the task's class order
# The fixture's id2label: ENTAILMENT, neutral, Contradiction; the task's class i is its row:
FILE_ROW_OF_TASK_CLASS = [2, 0, 1]

# fixture -> (our model from its config, our outputs -> HF's)
FIXTURE_MODELS = {
    "sequence_classification": (
        lambda config: AlbertClassifier(config, num_labels=3),
        {"logits": "logits"},
    ),
    "multiple_choice": (AlbertMultipleChoice, {"logits": "logits"}),
    "question_answering": (
        AlbertQuestionAnswering,
        {"start_logits": "start_logits", "end_logits": "end_logits"},
    ),
}


def fixture(name):
    """(directory, its parity.npz's inputs, HF's logits)."""
    directory = str(FIXTURES / f"hf_{name}")
    data = np.load(os.path.join(directory, "parity.npz"))
    features = {key: data[key] for key in ("input_ids", "input_mask", "segment_ids")}
    logits = {key: data[key] for key in data.files if key.endswith("logits")}
    return directory, features, logits


def loaded_model(name):
    directory, features, logits = fixture(name)
    build, names = FIXTURE_MODELS[name]
    model = build(read_config(directory))
    load_checkpoint(model, directory)
    return model, features, logits, names


@pytest.mark.parametrize("name", list(FIXTURE_MODELS))
def test_an_hf_fine_tuned_file_gives_hf_logits(name):
    model, features, logits, names = loaded_model(name)
    outputs = model(features)  # [B, C] or [B, T] each
    for ours, theirs in names.items():
        difference = float(np.max(np.abs(np.asarray(outputs[ours]) - logits[theirs])))
        assert difference <= TOLERANCE, (ours, difference)


def test_mnli_classes_named_in_another_order_are_put_in_the_task_order(absl_caplog):
    directory, features, logits = fixture("sequence_classification")
    model = AlbertClassifier(read_config(directory), num_labels=3)
    assert load_finetuning_weights(model, directory, require_head=True, labels=MNLI_LABELS)
    # HF's logit of the file's row r is ours of the task class r names.
    expected = logits["logits"][:, FILE_ROW_OF_TASK_CLASS]  # [B, 3]
    assert float(np.max(np.abs(np.asarray(model(features)["logits"]) - expected))) <= TOLERANCE
    assert "reordered to the task's" in absl_caplog.text


@pytest.mark.parametrize("name", list(FIXTURE_MODELS))
def test_our_export_writes_back_the_hf_file(tmp_path, name):
    """HF -> ours -> HF: every tensor HF stored, exactly, and the class HF reads it as."""
    directory, _, _ = fixture(name)
    model, _, _, _ = loaded_model(name)
    with open(os.path.join(directory, "config.json")) as f:
        stored = json.load(f)
    id2label = stored.get("id2label")
    labels = [id2label[str(i)] for i in range(len(id2label))] if "label2id" in stored else None
    hf.save(model, str(tmp_path), labels=labels)
    expected = load_file(os.path.join(directory, "model.safetensors"))
    written = load_file(str(tmp_path / "model.safetensors"))
    assert set(written) == set(expected)
    for key, value in expected.items():
        assert np.array_equal(written[key], value), key
    with open(tmp_path / "config.json") as f:
        config = json.load(f)
    assert config["architectures"] == stored["architectures"]
    if name == "sequence_classification":
        assert config["id2label"] == stored["id2label"]


def test_a_file_that_names_no_class_is_refused_for_predicting_saying_so(tmp_path):
    """Without `architectures`, `classifier` does not tell a sequence, token or multiple-choice
    head apart: the head is left out, and predicting from it says what is missing."""
    directory, _, _ = fixture("sequence_classification")
    shutil.copytree(directory, tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    values = json.loads(path.read_text())
    del values["architectures"]
    path.write_text(json.dumps(values))
    model = AlbertClassifier(read_config(str(tmp_path / "hf")), num_labels=3)
    expected = "head of this shape of the HF class AlbertForSequenceClassification"
    with pytest.raises(FineTuningError, match=expected):
        load_finetuning_weights(model, str(tmp_path / "hf"), require_head=True)


def test_a_head_of_another_shape_is_said_once_naming_both_shapes(absl_caplog):
    # The fixture's 3-label classifier into a 2-label one: left out, with the shapes. Not
    # also "not read into an AlbertClassifier (the file is an AlbertForSequenceClassification)",
    # which says the classes differ when they do not.
    directory, _, _ = fixture("sequence_classification")
    model = AlbertClassifier(read_config(directory), num_labels=2)
    load_checkpoint(model, directory)
    warnings = [r.getMessage() for r in absl_caplog.records if r.levelname == "WARNING"]
    fits = [w for w in warnings if "does not fit this AlbertClassifier" in w]
    assert len(fits) == 1 and "(it needs classifier.weight (2, 18)" in fits[0], warnings
    assert not [w for w in warnings if "is not read into" in w], warnings


def test_predicting_squad_2_from_an_hf_file_says_no_hf_class_holds_its_head(absl_caplog):
    # SQuAD 2.0's XLNet-style head has no HF class (`head_architecture` is None): the error
    # said "of the HF class None", and the load's warning only that the file is another class.
    directory, _, _ = fixture("question_answering")
    model = AlbertQuestionAnswering(read_config(directory), version_2_with_negative=True)
    load_checkpoint(model, directory)
    warning = next(r.getMessage() for r in absl_caplog.records if "not read into" in r.getMessage())
    assert "(the file is an AlbertForQuestionAnswering; no HF class computes SQuAD 2.0's head)" in (
        warning
    )
    with pytest.raises(FineTuningError) as raised:
        load_finetuning_weights(model, directory, require_head=True)
    assert "None" not in str(raised.value)
    assert "(no HF class computes SQuAD 2.0's head)" in str(raised.value)
