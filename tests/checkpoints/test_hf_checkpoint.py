"""Importing and exporting HF transformers' AlbertForPreTraining format (no torch)."""

import json
import os
import shutil

import numpy as np
import pytest
from checkpoint_testing import HF_FIXTURE, randomize
from safetensors.numpy import load_file, save_file

from albert.checkpoints import CheckpointError, load_checkpoint, read_config, save_checkpoint
from albert.modeling import AlbertBackbone, AlbertPretrainer
from tests.helpers import tiny_config

WEIGHTS = "model.safetensors"


def _fixture_copy(tmp_path, edit=None):
    """A copy of the HF fixture whose tensors `edit` may change (dict name -> array)."""
    directory = tmp_path / "hf"
    shutil.copytree(HF_FIXTURE, directory)
    if edit is not None:
        tensors = load_file(str(directory / WEIGHTS))
        edit(tensors)
        save_file(tensors, str(directory / WEIGHTS), metadata={"format": "pt"})
    return str(directory)


def _loaded_pretrainer(path=HF_FIXTURE):
    model = AlbertPretrainer(read_config(path))
    return model, load_checkpoint(model, path)


def test_fixture_loads_every_tensor_through_model_attributes():
    model, result = _loaded_pretrainer()
    tensors = load_file(os.path.join(HF_FIXTURE, WEIGHTS))
    assert sorted(result.loaded) == sorted(tensors)
    assert result.initialised == []
    layer = "albert.encoder.albert_layer_groups.1.albert_layers.0."
    encoder = model.backbone.encoder
    # torch Linear weights are [out, in]: the transpose of Keras kernels.
    np.testing.assert_array_equal(
        encoder.attention_blocks[1][0].query.kernel.numpy(),
        tensors[layer + "attention.query.weight"].T,
    )
    np.testing.assert_array_equal(
        encoder.ffn_blocks[1][0].output_dense.kernel.numpy(), tensors[layer + "ffn_output.weight"].T
    )
    np.testing.assert_array_equal(
        encoder.ffn_blocks[1][0].layer_norm.gamma.numpy(),
        tensors[layer + "full_layer_layer_norm.weight"],
    )
    np.testing.assert_array_equal(
        model.sentence_order_head.output_weights.numpy(),
        tensors["sop_classifier.classifier.weight"],
    )
    np.testing.assert_array_equal(
        model.masked_lm_head.output_bias.numpy(), tensors["predictions.bias"]
    )


def test_round_trip_preserves_every_tensor(tmp_path):
    model, _ = _loaded_pretrainer()
    save_checkpoint(model, str(tmp_path / "out"), "hf")
    original = load_file(os.path.join(HF_FIXTURE, WEIGHTS))
    written = load_file(str(tmp_path / "out" / WEIGHTS))
    assert set(written) == set(original)
    for name, value in original.items():
        assert np.array_equal(written[name], value), name
    assert read_config(str(tmp_path / "out")) == read_config(HF_FIXTURE)


def test_a_failed_weights_write_leaves_no_half_file(tmp_path, monkeypatch):
    from albert.checkpoints import hf

    def full_disk(arrays, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hf, "save_file", full_disk)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(AlbertPretrainer(tiny_config()), str(tmp_path / "out"), "hf")
    assert os.listdir(tmp_path / "out") == []


def test_tied_decoder_copies_and_buffers_are_tolerated(tmp_path):
    def add_tied(tensors):
        tensors["predictions.decoder.weight"] = tensors["albert.embeddings.word_embeddings.weight"]
        tensors["predictions.decoder.bias"] = tensors["predictions.bias"]
        tensors["albert.embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]

    path = _fixture_copy(tmp_path, add_tied)
    model, result = _loaded_pretrainer(path)
    assert {"predictions.decoder.weight", "predictions.decoder.bias"} <= set(result.ignored)
    assert "albert.embeddings.position_ids" in result.ignored
    reference, _ = _loaded_pretrainer()
    for a, b in zip(model.weights, reference.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_untied_decoder_is_an_error(tmp_path):
    def add_untied(tensors):
        tensors["predictions.decoder.weight"] = (
            tensors["albert.embeddings.word_embeddings.weight"] + 1
        )

    with pytest.raises(CheckpointError, match="predictions.decoder.weight differs"):
        _loaded_pretrainer(_fixture_copy(tmp_path, add_untied))


def test_a_file_without_the_pooler_loads_the_rest(tmp_path, caplog):
    # HF's AlbertForMaskedLM and AlbertForQuestionAnswering save no pooler.
    def drop_pooler(tensors):
        del tensors["albert.pooler.weight"], tensors["albert.pooler.bias"]

    path = _fixture_copy(tmp_path, drop_pooler)
    model = AlbertBackbone(read_config(path))
    before = model.pooler.kernel.numpy()
    result = load_checkpoint(model, path)
    assert sorted(result.initialised) == ["pooler/bias", "pooler/kernel"]
    np.testing.assert_array_equal(model.pooler.kernel.numpy(), before)
    tensors = load_file(os.path.join(HF_FIXTURE, WEIGHTS))
    np.testing.assert_array_equal(
        model.embeddings.word_embeddings.numpy(),
        tensors["albert.embeddings.word_embeddings.weight"],
    )
    assert "holds no pooler" in caplog.text

    def drop_pooler_bias(tensors):  # half a pooler is still a broken file
        del tensors["albert.pooler.bias"]

    with pytest.raises(CheckpointError, match=r"missing 1: albert\.pooler\.bias"):
        load_checkpoint(model, _fixture_copy(tmp_path / "half", drop_pooler_bias))


def test_an_hf_question_answering_file_initialises_the_encoder(tmp_path, caplog):
    # AlbertForQuestionAnswering as transformers saves it: no pooler, no pretraining heads,
    # a qa_outputs head, which a backbone has no place for.
    def as_question_answering(tensors):
        for name in list(tensors):
            if not name.startswith("albert.") or name.startswith("albert.pooler."):
                del tensors[name]
        hidden = tensors["albert.encoder.embedding_hidden_mapping_in.bias"].shape[0]
        tensors["qa_outputs.weight"] = np.ones([2, hidden], np.float32)
        tensors["qa_outputs.bias"] = np.ones([2], np.float32)

    path = _fixture_copy(tmp_path, as_question_answering)
    model = AlbertBackbone(read_config(path))
    result = load_checkpoint(model, path)
    assert result.ignored == ["qa_outputs.bias", "qa_outputs.weight"]
    assert "HF's task head (qa_outputs.bias, qa_outputs.weight) is not read" in caplog.text


def test_group_counts_whose_layer_mapping_differs_in_hf_are_refused(tmp_path):
    # HF: group int(l / (L / G)); the original: int(l / L * G). For L = 18, G = 14 they
    # disagree at some layer, so the same weights would compute two functions.
    config = tiny_config(num_hidden_layers=18, num_hidden_groups=14)
    with pytest.raises(CheckpointError, match="HF runs layer .* cannot be exchanged with HF"):
        save_checkpoint(AlbertBackbone(config), str(tmp_path / "out"), "hf")
    assert not (tmp_path / "out").exists()

    def as_18_14(directory):
        path = os.path.join(directory, "config.json")
        with open(path) as f:
            values = json.load(f)
        values.update(num_hidden_layers=18, num_hidden_groups=14)
        with open(path, "w") as f:
            json.dump(values, f)

    path = _fixture_copy(tmp_path)
    as_18_14(path)
    with pytest.raises(CheckpointError, match="cannot be exchanged with HF"):
        load_checkpoint(AlbertBackbone(config), path)


def test_more_inner_layers_than_hf_runs_per_group_are_refused_on_export(tmp_path):
    # HF runs group g's inner layers with int(L / G) head-mask entries: 3 inner layers with
    # L / G = 2 raise IndexError in HF's forward pass (transformers 4.57); 2 run.
    config = tiny_config(num_hidden_layers=6, num_hidden_groups=3, inner_group_num=3)
    with pytest.raises(CheckpointError, match="inner_group_num=3, HF's model loads but cannot"):
        save_checkpoint(AlbertBackbone(config), str(tmp_path / "out"), "hf")
    assert not (tmp_path / "out").exists()
    # not_shared is written as G = L groups, so one inner layer each.
    one_per_layer = config.replace(
        num_hidden_groups=1, inner_group_num=2, layer_sharing="not_shared"
    )
    with pytest.raises(CheckpointError, match="num_hidden_groups=6 and inner_group_num=2"):
        save_checkpoint(AlbertBackbone(one_per_layer), str(tmp_path / "out"), "hf")
    fitting = config.replace(inner_group_num=2)
    save_checkpoint(AlbertBackbone(fitting), str(tmp_path / "fits"), "hf")
    assert read_config(str(tmp_path / "fits")).inner_group_num == 2


def test_any_other_unmatched_name_is_an_error(tmp_path):
    def add_extra(tensors):
        tensors["albert.encoder.extra.weight"] = np.zeros(3, np.float32)

    with pytest.raises(CheckpointError, match=r"unexpected 1: albert\.encoder\.extra\.weight"):
        _loaded_pretrainer(_fixture_copy(tmp_path, add_extra))


def test_hidden_act_names_convert_both_ways(tmp_path):
    assert read_config(HF_FIXTURE).hidden_act == "gelu"  # HF gelu_new is the tanh form
    exact = read_config(HF_FIXTURE.replace("hf_grouped", "hf_gelu_exact"))
    assert exact.hidden_act == "gelu_exact"  # HF gelu is the erf form
    for ours, theirs in [("gelu", "gelu_new"), ("gelu_exact", "gelu"), ("relu", "relu")]:
        save_checkpoint(AlbertBackbone(tiny_config(hidden_act=ours)), str(tmp_path / ours), "hf")
        with open(tmp_path / ours / "config.json") as f:
            written = json.load(f)
        assert written["hidden_act"] == theirs
        assert written["architectures"] == ["AlbertModel"]
        assert written["layer_norm_eps"] == 1e-12
        assert read_config(str(tmp_path / ours)).hidden_act == ours


def test_unsupported_hf_config_is_an_error(tmp_path):
    path = _fixture_copy(tmp_path)
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    config["hidden_act"] = "gelu_fast"
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with pytest.raises(CheckpointError, match="hidden_act='gelu_fast'"):
        read_config(path)
    for key, value, message in (
        ("hidden_act", "gelu_new", None),
        ("layer_norm_eps", 1e-5, "layer_norm_eps=1e-05; ALBERT uses 1e-12"),
        ("position_embedding_type", "relative_key", "uses relative_key positions"),
        ("model_type", "bert", "is a 'bert' config, not an ALBERT one"),
    ):
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump({**config, "hidden_act": "gelu_new", key: value}, f)
        if message is None:
            assert read_config(path).hidden_act == "gelu"
            continue
        with pytest.raises(CheckpointError, match=message):
            read_config(path)


def test_an_hf_config_with_a_utf8_byte_order_mark_reads_and_a_utf16_one_is_an_error(tmp_path):
    path = _fixture_copy(tmp_path)
    config_path = os.path.join(path, "config.json")
    with open(config_path, "rb") as f:
        text = f.read()
    with open(config_path, "wb") as f:
        f.write(b"\xef\xbb\xbf" + text)
    assert read_config(path) == read_config(HF_FIXTURE)
    # UTF-16 (Windows PowerShell's `>` writes it) was a UnicodeDecodeError traceback.
    with open(config_path, "wb") as f:
        f.write(text.decode("utf-8").encode("utf-16"))
    with pytest.raises(CheckpointError, match="config.json is not a UTF-8 JSON file"):
        read_config(path)


def test_backbone_export_and_hf_base_model_names(tmp_path):
    model = randomize(AlbertPretrainer(tiny_config()))
    save_checkpoint(model.backbone, str(tmp_path / "base"), "hf")
    written = load_file(str(tmp_path / "base" / WEIGHTS))
    assert written and all(name.startswith("albert.") for name in written)

    # HF's AlbertModel saves its names without the `albert.` prefix.
    bare = {name[len("albert.") :]: value for name, value in written.items()}
    save_file(bare, str(tmp_path / "base" / WEIGHTS), metadata={"format": "pt"})
    backbone = AlbertBackbone(tiny_config())
    assert load_checkpoint(backbone, str(tmp_path / "base")).initialised == []
    for a, b in zip(backbone.weights, model.backbone.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_not_shared_is_exported_as_one_group_per_layer(tmp_path):
    # One inner layer per group: HF runs no more than L / G of them (see the test above).
    config = tiny_config(
        num_hidden_layers=3, num_hidden_groups=1, inner_group_num=1, layer_sharing="not_shared"
    )
    model = randomize(AlbertPretrainer(config))
    save_checkpoint(model, str(tmp_path), "hf")
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["num_hidden_groups"] == 3
    names = load_file(str(tmp_path / WEIGHTS))
    assert "albert.encoder.albert_layer_groups.2.albert_layers.0.ffn.weight" in names
    again = AlbertPretrainer(config)
    load_checkpoint(again, str(tmp_path))
    for a, b in zip(model.weights, again.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_equal_embedding_and_hidden_size_writes_and_requires_an_identity_mapping(tmp_path):
    """HF always builds embedding_hidden_mapping_in; the original (and we) not when E == H."""
    config = tiny_config(embedding_size=18)
    model = randomize(AlbertPretrainer(config))
    save_checkpoint(model, str(tmp_path), "hf")
    weights = load_file(str(tmp_path / "model.safetensors"))
    mapping = "albert.encoder.embedding_hidden_mapping_in"
    np.testing.assert_array_equal(weights[f"{mapping}.weight"], np.eye(18))
    np.testing.assert_array_equal(weights[f"{mapping}.bias"], np.zeros(18))
    again = AlbertPretrainer(config)
    result = load_checkpoint(again, str(tmp_path))
    assert result.initialised == []
    for expected, loaded in zip(model.weights, again.weights, strict=True):
        np.testing.assert_array_equal(expected.numpy(), loaded.numpy())
    # A bias alone (beside an identity weight) already makes the projection no identity.
    for name in (f"{mapping}.bias", f"{mapping}.weight"):
        changed = {**weights, name: weights[name] * 2.0 + 0.5}
        save_file(changed, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
        with pytest.raises(CheckpointError, match="not the identity"):
            load_checkpoint(AlbertPretrainer(config), str(tmp_path))


def _edited_config(tmp_path, edit):
    path = _fixture_copy(tmp_path)
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    edit(config)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


def test_a_config_without_model_type_is_read_as_albert(tmp_path):
    path = _edited_config(tmp_path, lambda config: config.pop("model_type"))
    assert read_config(path) == read_config(HF_FIXTURE)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("layer_norm_eps", 1e-13, "layer_norm_eps=1e-13; ALBERT uses 1e-12"),
        ("layer_norm_eps", 1e-5, "layer_norm_eps=1e-05; ALBERT uses 1e-12"),
        ("position_embedding_type", "relative_key", "relative_key positions"),
    ],
)
def test_a_config_of_another_computation_is_refused(tmp_path, key, value, message):
    path = _edited_config(tmp_path, lambda config: config.update({key: value}))
    with pytest.raises(CheckpointError, match=message):
        read_config(path)


def test_the_written_class_is_the_one_whose_heads_the_file_holds(tmp_path):
    from albert.convert_checkpoint import LoadedParts

    pretrainer = AlbertPretrainer(tiny_config())
    masked_lm_only = LoadedParts(pretrainer.backbone, masked_lm_head=pretrainer.masked_lm_head)
    for name, model, architecture in (
        ("pretrainer", pretrainer, "AlbertForPreTraining"),
        ("mlm", masked_lm_only, "AlbertForMaskedLM"),
        ("backbone", pretrainer.backbone, "AlbertModel"),
    ):
        save_checkpoint(model, str(tmp_path / name), "hf")
        with open(tmp_path / name / "config.json") as f:
            assert json.load(f)["architectures"] == [architecture], name


def test_an_hf_config_without_a_key_takes_hfs_default(tmp_path):
    # HF's AlbertConfig defaults are albert-xxlarge's: E 128, H 4096, 64 heads, I 16384.
    path = _fixture_copy(tmp_path)
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    for key in ("embedding_size", "intermediate_size", "num_attention_heads", "hidden_size"):
        config.pop(key)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    read = read_config(path)
    assert (read.embedding_size, read.hidden_size) == (128, 4096)
    assert (read.num_attention_heads, read.intermediate_size) == (64, 16384)
