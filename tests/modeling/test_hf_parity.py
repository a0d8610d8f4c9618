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


@pytest.mark.parametrize("name", ["grouped", "gelu_exact"])
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
