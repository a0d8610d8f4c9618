"""HF transformers' AlbertForPreTraining and AlbertForMaskedLM and ours, both ways, against the
transformers installed.

test_hf_parity.py checks our import against HF outputs committed as fixtures (written once
with transformers 4.57); these run the installed transformers itself, so a release that reads
or writes the format differently (a renamed key loaded as a fresh random weight, with only a
warning) fails here. HF's model is also loaded from the shards of a sharded save. Shape letters: B batch (3), T sequence (7), P masked positions (2), V
vocabulary (99).
"""

import os

import numpy as np
import pytest
from helpers import import_torch_and_transformers

torch, transformers = import_torch_and_transformers()

from checkpoint_testing import randomize  # noqa: E402
from test_hf_task_heads import hf_from_pretrained, hf_model, hf_outputs, inputs  # noqa: E402

from albert.checkpoints import load_checkpoint, read_config, save_checkpoint  # noqa: E402
from albert.convert_checkpoint import LoadedParts  # noqa: E402
from albert.modeling import AlbertPretrainer  # noqa: E402
from tests.helpers import tiny_config  # noqa: E402

TOLERANCE = 1e-5
POSITIONS = np.array([[1, 4], [0, 2], [3, 4]], "int32")  # [B, P], inside the unpadded 5


def pretraining_inputs():
    return {**inputs("AlbertForPreTraining"), "masked_lm_positions": POSITIONS}


def max_differences(ours, hf):
    """Ours against HF's: HF's masked-LM logits [B, T, V] are taken at the masked positions."""
    hf_mlm = np.take_along_axis(hf["prediction_logits"], POSITIONS[:, :, None], axis=1)
    return {
        "mlm_logits": float(np.max(np.abs(np.asarray(ours["mlm_logits"]) - hf_mlm))),
        "sop_logits": float(np.max(np.abs(np.asarray(ours["sop_logits"]) - hf["sop_logits"]))),
    }


def test_our_pretrainer_exports_as_hfs_with_our_logits(tmp_path):
    model = randomize(AlbertPretrainer(tiny_config()))
    save_checkpoint(model, str(tmp_path), "hf")
    exported = hf_from_pretrained("AlbertForPreTraining", tmp_path)  # no key missing or extra
    features = pretraining_inputs()
    differences = max_differences(model(features), hf_outputs(exported, features))
    assert all(d <= TOLERANCE for d in differences.values()), differences


@pytest.mark.parametrize("max_shard_size", [None, "20KB"], ids=["one_file", "shards"])
def test_hfs_saved_pretrainer_loads_into_ours_with_hfs_logits(tmp_path, max_shard_size):
    source = hf_model("AlbertForPreTraining", num_labels=2)  # HF sizes the SOP head by it
    shards = {"max_shard_size": max_shard_size} if max_shard_size else {}
    source.save_pretrained(str(tmp_path), **shards)
    assert os.path.isfile(tmp_path / "model.safetensors.index.json") == bool(max_shard_size)
    model = AlbertPretrainer(read_config(str(tmp_path)))
    load_checkpoint(model, str(tmp_path))
    features = pretraining_inputs()
    differences = max_differences(model(features), hf_outputs(source, features))
    assert all(d <= TOLERANCE for d in differences.values()), differences


def masked_lm_difference(ours, hf):
    """Ours against HF AlbertForMaskedLM's logits [B, T, V], taken at the masked positions."""
    hf_mlm = np.take_along_axis(hf["logits"], POSITIONS[:, :, None], axis=1)
    return float(np.max(np.abs(np.asarray(ours["mlm_logits"]) - hf_mlm)))


@pytest.mark.parametrize("pooler_loaded", [True, False], ids=["pooler", "no_pooler"])
def test_our_masked_lm_exports_as_hfs_with_our_logits(tmp_path, pooler_loaded):
    """The backbone and MLM head alone (what convert_checkpoint writes for an input without
    SOP) load as HF's AlbertForMaskedLM with our logits. A trained pooler is kept: HF's
    AlbertForMaskedLM has none and leaves it unused (its only unexpected keys), and
    AlbertModel, as a classifier fine-tuned from the file, reads it."""
    pretrainer = randomize(AlbertPretrainer(tiny_config()))
    parts = LoadedParts(pretrainer.backbone, pretrainer.masked_lm_head, None, pooler_loaded)
    save_checkpoint(parts, str(tmp_path), "hf")
    exported, info = transformers.AlbertForMaskedLM.from_pretrained(
        str(tmp_path), output_loading_info=True
    )
    pooler = {"albert.pooler.weight", "albert.pooler.bias"} if pooler_loaded else set()
    assert not info["missing_keys"] and set(info["unexpected_keys"]) == pooler, info
    features = pretraining_inputs()
    difference = masked_lm_difference(pretrainer(features), hf_outputs(exported.eval(), features))
    assert difference <= TOLERANCE
    if pooler_loaded:
        backbone, info = transformers.AlbertModel.from_pretrained(
            str(tmp_path), output_loading_info=True
        )
        assert not info["missing_keys"], info  # the pooler is read (the MLM head is not)
        assert all(key.startswith("predictions.") for key in info["unexpected_keys"]), info
        hf_pooled = hf_outputs(backbone.eval(), features)["pooler_output"]
        ours_pooled = np.asarray(pretrainer(features)["pooled_output"])
        assert np.max(np.abs(ours_pooled - hf_pooled)) <= TOLERANCE


def test_hfs_saved_masked_lm_loads_into_ours_with_hfs_logits(tmp_path):
    source = hf_model("AlbertForMaskedLM")
    source.save_pretrained(str(tmp_path))
    model = AlbertPretrainer(read_config(str(tmp_path)))
    load_checkpoint(model, str(tmp_path))
    features = pretraining_inputs()
    assert masked_lm_difference(model(features), hf_outputs(source, features)) <= TOLERANCE
