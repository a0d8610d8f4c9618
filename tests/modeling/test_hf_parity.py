"""Numerical parity with HF transformers' AlbertForPreTraining, through committed fixtures.

`tests/fixtures/make_hf_fixtures.py` (torch + transformers, run by developers) saved HF models
with random weights and HF's outputs; here only our importer and our model run.
"""

import pathlib

import numpy as np
import pytest

from albert.checkpoints import load_checkpoint, read_config
from albert.modeling import AlbertPretrainer

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
INPUT_KEYS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
# Our output -> HF's (prediction_logits already gathered at masked_lm_positions).
OUTPUTS = {
    "sequence_output": "last_hidden_state",
    "pooled_output": "pooler_output",
    "mlm_logits": "prediction_logits",
    "sop_logits": "sop_logits",
}
TOLERANCE = 1e-4


def load_fixture(name):
    """(model loaded from the HF fixture, inputs, HF's outputs)."""
    directory = str(FIXTURES / f"hf_{name}")
    data = np.load(f"{directory}/parity.npz")
    model = AlbertPretrainer(read_config(directory))
    load_checkpoint(model, directory)
    return model, {k: data[k] for k in INPUT_KEYS}, data


def max_differences(outputs, expected):
    return {
        ours: float(np.abs(np.asarray(outputs[ours]) - expected[theirs]).max())
        for ours, theirs in OUTPUTS.items()
    }


@pytest.mark.parametrize("name", ["grouped", "gelu_exact", "uneven_groups"])
def test_matches_hf_albert_for_pretraining(name):
    model, inputs, expected = load_fixture(name)
    assert inputs["input_mask"].min() == 0  # the batch has padding
    differences = max_differences(model(inputs), expected)
    assert all(d <= TOLERANCE for d in differences.values()), differences


def test_not_shared_model_matches_hf_with_one_group_per_layer():
    directory = str(FIXTURES / "hf_gelu_exact")  # L = G = 3
    config = read_config(directory).replace(num_hidden_groups=1, layer_sharing="not_shared")
    model = AlbertPretrainer(config)
    load_checkpoint(model, directory)
    _, inputs, expected = load_fixture("gelu_exact")
    differences = max_differences(model(inputs), expected)
    assert all(d <= TOLERANCE for d in differences.values()), differences


def test_tolerance_tells_the_two_gelus_apart():
    """The parity check is sharp enough to catch the classic wrong-GELU conversion bug."""
    model, inputs, expected = load_fixture("gelu_exact")
    tanh_gelu = AlbertPretrainer(model.config.replace(hidden_act="gelu"))
    tanh_gelu.set_weights(model.get_weights())
    differences = max_differences(tanh_gelu(inputs), expected)
    # GELU(tanh) is within ~1e-3 of GELU(erf), yet every output moves past the tolerance.
    assert all(d > TOLERANCE for d in differences.values()), differences


@pytest.mark.parametrize("name", ["grouped", "gelu_exact", "uneven_groups"])
def test_masked_positions_only_gives_the_same_logits(name):
    """The last block run at [CLS] + masked positions only (pretraining's fast path) matches
    HF's full pass, and gives the full sequence output's rows at those positions."""
    model, inputs, expected = load_fixture(name)
    outputs = model(inputs, masked_positions_only=True)
    rows = np.take_along_axis(
        expected["last_hidden_state"], inputs["masked_lm_positions"][:, :, None], axis=1
    )
    differences = {
        "sequence_output@positions": float(np.abs(outputs["sequence_output"] - rows).max()),
        **{
            ours: float(np.abs(np.asarray(outputs[ours]) - expected[theirs]).max())
            for ours, theirs in OUTPUTS.items()
            if ours != "sequence_output"
        },
    }
    assert all(d <= TOLERANCE for d in differences.values()), differences


def test_masked_positions_only_needs_positions():
    model, inputs, _ = load_fixture("grouped")
    del inputs["masked_lm_positions"]
    with pytest.raises(ValueError, match="masked_lm_positions"):
        model(inputs, masked_positions_only=True)


def test_classifier_pooled_output_matches_hf():
    """AlbertClassifier runs the last block at [CLS] only; its pooled output is still HF's."""
    from albert.modeling import AlbertClassifier

    model, inputs, expected = load_fixture("grouped")
    classifier = AlbertClassifier(model.backbone, num_labels=3)
    pooled = classifier.backbone(
        inputs, output_positions=np.zeros((len(inputs["input_ids"]), 0), "int32")
    )["pooled_output"]
    assert np.abs(np.asarray(pooled) - expected["pooler_output"]).max() <= TOLERANCE
    logits = classifier(inputs)["logits"]
    kernel, bias = (np.asarray(w) for w in classifier.classifier.weights)
    manual = expected["pooler_output"] @ kernel.T + bias  # output_weights [labels, H]
    assert np.abs(np.asarray(logits) - manual).max() <= TOLERANCE
