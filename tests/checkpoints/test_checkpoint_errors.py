"""A checkpoint that does not fit is a clear error that lists the problem, never random weights."""

import json

import numpy as np
import pytest
from checkpoint_testing import random_arrays, reference_tf1_shapes, write_tf1

from albert.checkpoints import CheckpointError, load_checkpoint
from albert.modeling import AlbertBackbone, AlbertPretrainer
from tests.helpers import tiny_config

QUERY = "bert/encoder/transformer/group_1/inner_group_0/attention_1/self/query/kernel"


def _write(tmp_path, edit, config=None):
    arrays = random_arrays(reference_tf1_shapes(config or tiny_config()))
    edit(arrays)
    write_tf1(tmp_path / "model.ckpt", arrays)
    return str(tmp_path / "model.ckpt")


def _load_fails(model, path, match):
    before = [v.numpy() for v in model.weights]
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(model, path)
    # Nothing was assigned: a failed load leaves no half-loaded model behind.
    for variable, value in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(variable.numpy(), value)


def test_missing_variable(tmp_path):
    path = _write(tmp_path, lambda arrays: arrays.pop(QUERY))
    _load_fails(AlbertPretrainer(tiny_config()), path, f"missing 1: {QUERY}")


def test_unexpected_variable(tmp_path):
    def add(arrays):
        arrays["bert/encoder/transformer/group_2/inner_group_0/LayerNorm/gamma"] = np.ones(
            18, "float32"
        )

    path = _write(tmp_path, add)
    _load_fails(
        AlbertBackbone(tiny_config()), path, "unexpected 1: bert/encoder/transformer/group_2"
    )


def test_wrong_shape(tmp_path):
    def shrink(arrays):
        arrays[QUERY] = arrays[QUERY][:, :12]

    path = _write(tmp_path, shrink)
    _load_fails(
        AlbertPretrainer(tiny_config()),
        path,
        r"wrong shape 1: .*query/kernel \(18, 12\) \(model needs \(18, 18\)\)",
    )


def test_half_a_head_is_missing_not_skipped(tmp_path):
    path = _write(tmp_path, lambda arrays: arrays.pop("cls/predictions/output_bias"))
    _load_fails(AlbertPretrainer(tiny_config()), path, "missing 1: cls/predictions/output_bias")


def test_fewer_groups_than_the_model_lists_every_missing_variable(tmp_path):
    path = _write(tmp_path, lambda arrays: None, config=tiny_config(num_hidden_groups=1))
    _load_fails(AlbertPretrainer(tiny_config()), path, r"missing 32: .* and 20 more")


def test_config_beside_the_checkpoint_must_match(tmp_path):
    path = _write(tmp_path, lambda arrays: None)
    # Same shapes, different function: only the config can tell.
    config = tiny_config(hidden_act="relu", num_attention_heads=6).to_dict()
    (tmp_path / "albert_config.json").write_text(json.dumps(config))
    _load_fails(
        AlbertPretrainer(tiny_config()),
        path,
        r"num_attention_heads=3 vs 6, hidden_act='gelu' vs 'relu'",
    )


@pytest.mark.parametrize("name", ["does_not_exist", "does_not_exist/model.ckpt-best"])
def test_nonexistent_path(tmp_path, name):
    with pytest.raises(CheckpointError, match="No checkpoint found at"):
        load_checkpoint(AlbertPretrainer(tiny_config()), str(tmp_path / name))


def test_directory_with_several_checkpoints_and_no_state_file(tmp_path):
    for prefix in ("model.ckpt-1", "model.ckpt-2"):
        write_tf1(tmp_path / prefix, random_arrays(reference_tf1_shapes(tiny_config())))
    with pytest.raises(CheckpointError, match="several checkpoints"):
        load_checkpoint(AlbertPretrainer(tiny_config()), str(tmp_path))


def test_not_an_albert_model(tmp_path):
    import keras

    path = _write(tmp_path, lambda arrays: None)
    with pytest.raises(CheckpointError, match="Received: Sequential"):
        load_checkpoint(keras.Sequential([keras.layers.Dense(2)]), path)


def test_a_checkpoint_without_the_encoder_is_missing_all_of_it(tmp_path):
    # Only the pretraining heads: the encoder is never optional (heads are), so it is not left
    # at its random initial values without a word.
    def heads_only(arrays):
        for name in [n for n in arrays if not n.startswith("cls/")]:
            del arrays[name]

    path = _write(tmp_path, heads_only)
    _load_fails(AlbertPretrainer(tiny_config()), path, "missing")


def test_two_names_of_one_activation_are_the_same_architecture():
    # "gelu_new" is HF's name of the original's "gelu" (the tanh approximation).
    from albert.checkpoints.table import check_config

    check_config(tiny_config(hidden_act="gelu_new"), tiny_config(hidden_act="gelu"), "x")
    with pytest.raises(CheckpointError, match="hidden_act='relu' vs 'gelu'"):
        check_config(tiny_config(hidden_act="relu"), tiny_config(hidden_act="gelu"), "x")
