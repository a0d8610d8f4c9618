"""Reading and writing the original TF1 checkpoints."""

import logging
import os

import numpy as np
import pytest
import tensorflow as tf
from checkpoint_testing import (
    HF_FIXTURE,
    parity_inputs,
    random_arrays,
    randomize,
    read_tf1,
    reference_tf1_shapes,
    write_tf1,
)

from albert.checkpoints import (
    CheckpointError,
    load_checkpoint,
    read_config,
    save_checkpoint,
    tf1,
    training_format,
)
from albert.modeling import AlbertBackbone, AlbertPretrainer
from tests.helpers import tiny_config

SLOTS = ("adam_m", "adam_v", "lamb_m", "lamb_v")


def _original_checkpoint(tmp_path, config, heads=True, prefix_name="model.ckpt-best", extra=None):
    """A checkpoint laid out as the original's training writes it: slots and global_step too."""
    arrays = random_arrays(reference_tf1_shapes(config, heads=heads))
    stored = dict(arrays)
    for i, (name, value) in enumerate(sorted(arrays.items())):
        stored[f"{name}/{SLOTS[i % len(SLOTS)]}"] = np.ones_like(value)
    stored["global_step"] = np.array(125000, np.int64)
    stored.update(extra or {})
    write_tf1(tmp_path / prefix_name, stored)
    return arrays


def test_reads_reference_names_through_model_attributes(tmp_path):
    config = tiny_config()
    arrays = _original_checkpoint(tmp_path, config)
    model = AlbertPretrainer(config)
    result = load_checkpoint(model, str(tmp_path / "model.ckpt-best"))

    block = "bert/encoder/transformer/group_1/inner_group_0/"
    encoder = model.backbone.encoder
    expected = {
        "bert/embeddings/word_embeddings": model.backbone.embeddings.word_embeddings,
        "bert/embeddings/token_type_embeddings": model.backbone.embeddings.token_type_embeddings,
        "bert/encoder/embedding_hidden_mapping_in/kernel": (
            model.backbone.embeddings.embedding_hidden_mapping_in.kernel
        ),
        block + "attention_1/self/query/kernel": encoder.attention_blocks[1][0].query.kernel,
        block + "attention_1/self/value/bias": encoder.attention_blocks[1][0].value.bias,
        block + "attention_1/output/dense/kernel": encoder.attention_blocks[1][
            0
        ].output_dense.kernel,
        block + "LayerNorm/gamma": encoder.attention_blocks[1][0].layer_norm.gamma,
        block + "ffn_1/intermediate/dense/kernel": encoder.ffn_blocks[1][0].intermediate.kernel,
        block + "ffn_1/intermediate/output/dense/kernel": encoder.ffn_blocks[1][
            0
        ].output_dense.kernel,
        block + "LayerNorm_1/beta": encoder.ffn_blocks[1][0].layer_norm.beta,
        "bert/encoder/transformer/group_0/inner_group_1/LayerNorm_1/gamma": (
            encoder.ffn_blocks[0][1].layer_norm.gamma
        ),
        "bert/pooler/dense/kernel": model.backbone.pooler.kernel,
        "cls/predictions/transform/dense/kernel": model.masked_lm_head.dense.kernel,
        "cls/predictions/transform/LayerNorm/beta": model.masked_lm_head.layer_norm.beta,
        "cls/predictions/output_bias": model.masked_lm_head.output_bias,
        "cls/seq_relationship/output_weights": model.sentence_order_head.output_weights,
    }
    for name, variable in expected.items():
        np.testing.assert_array_equal(variable.numpy(), arrays[name], err_msg=name)
    assert sorted(result.loaded) == sorted(arrays)
    assert result.initialised == []
    assert "global_step" in result.ignored
    assert len(result.ignored) == len(arrays) + 1  # one slot per variable, and the step


@pytest.mark.parametrize(
    "sizes",
    [
        dict(num_hidden_layers=1, num_hidden_groups=1, inner_group_num=1),
        dict(num_hidden_layers=6, num_hidden_groups=3, inner_group_num=2),
        dict(num_hidden_layers=3, num_hidden_groups=3, inner_group_num=3),
        dict(num_hidden_layers=5, num_hidden_groups=3, inner_group_num=2),  # L % G != 0
    ],
)
def test_any_number_of_groups_and_inner_groups(tmp_path, sizes):
    config = tiny_config(**sizes)
    arrays = _original_checkpoint(tmp_path, config)
    model = AlbertPretrainer(config)
    load_checkpoint(model, str(tmp_path))
    save_checkpoint(model, str(tmp_path / "out"), "tf1")
    written = read_tf1(tmp_path / "out" / "model.ckpt")
    assert set(written) == set(arrays)
    assert _equal_tensors(written, arrays)


def test_tf_hub_module_prefix_is_stripped(tmp_path):
    config = tiny_config()
    arrays = random_arrays(reference_tf1_shapes(config, heads=False))
    write_tf1(tmp_path / "model", {"module/" + name: value for name, value in arrays.items()})
    model = AlbertBackbone(config)
    result = load_checkpoint(model, str(tmp_path / "model"))
    assert len(result.loaded) == len(arrays)
    np.testing.assert_array_equal(
        model.embeddings.position_embeddings.numpy(), arrays["bert/embeddings/position_embeddings"]
    )


@pytest.mark.parametrize("how", ["directory", "prefix", "index_file", "data_file", "state_file"])
def test_released_tarball_layout_and_other_paths(tmp_path, how):
    config = tiny_config()
    arrays = _original_checkpoint(tmp_path, config)  # model.ckpt-best.*, no `checkpoint` file
    paths = {
        "directory": tmp_path,
        "prefix": tmp_path / "model.ckpt-best",
        "index_file": tmp_path / "model.ckpt-best.index",
        "data_file": tmp_path / "model.ckpt-best.data-00000-of-00001",
    }
    if how == "state_file":  # a training directory: the `checkpoint` file picks the latest
        write_tf1(tmp_path / "model.ckpt-5", random_arrays(reference_tf1_shapes(config), seed=1))
        (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-best"\n')
        paths[how] = tmp_path
    model = AlbertPretrainer(config)
    load_checkpoint(model, str(paths[how]))
    np.testing.assert_array_equal(
        model.sentence_order_head.output_bias.numpy(), arrays["cls/seq_relationship/output_bias"]
    )


def test_encoder_only_checkpoint_leaves_heads_initialised_and_says_so(tmp_path, caplog):
    config = tiny_config()
    _original_checkpoint(tmp_path, config, heads=False)
    model = AlbertPretrainer(config)
    head_values = [v.numpy() for v in model.masked_lm_head.weights]
    with caplog.at_level(logging.WARNING):
        result = load_checkpoint(model, str(tmp_path))
    head_paths = {v.path for v in model.masked_lm_head.weights + model.sentence_order_head.weights}
    assert set(result.initialised) == head_paths
    assert "left initialised" in caplog.text
    for variable, before in zip(model.masked_lm_head.weights, head_values, strict=True):
        np.testing.assert_array_equal(variable.numpy(), before)


def test_backbone_ignores_head_variables(tmp_path):
    config = tiny_config()
    arrays = _original_checkpoint(tmp_path, config)
    result = load_checkpoint(AlbertBackbone(config), str(tmp_path))
    heads = {name for name in arrays if name.startswith("cls/")}
    assert heads and heads <= set(result.ignored)
    assert result.initialised == []


def test_round_trip_preserves_every_tensor_and_name(tmp_path):
    config = tiny_config()
    arrays = _original_checkpoint(tmp_path / "in", config)
    model = AlbertPretrainer(config)
    load_checkpoint(model, str(tmp_path / "in"))
    prefix = save_checkpoint(model, str(tmp_path / "out"), "tf1")

    assert prefix == str(tmp_path / "out" / "model.ckpt")
    assert (tmp_path / "out" / "checkpoint").is_file()
    written = read_tf1(prefix)
    assert set(written) == set(arrays)  # exactly the original names, nothing else
    assert _equal_tensors(written, arrays)
    assert read_config(str(tmp_path / "out")) == config
    # The written directory reads back through its `checkpoint` state file.
    again = AlbertPretrainer(config)
    load_checkpoint(again, str(tmp_path / "out"))
    for a, b in zip(model.weights, again.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_not_shared_is_written_as_one_group_per_layer(tmp_path):
    config = tiny_config(num_hidden_layers=3, num_hidden_groups=1, layer_sharing="not_shared")
    model = randomize(AlbertPretrainer(config))
    save_checkpoint(model, str(tmp_path), "tf1")
    written = read_tf1(tmp_path / "model.ckpt")
    grouped = config.replace(layer_sharing="all_shared", num_hidden_groups=3)
    assert {n: v.shape for n, v in written.items()} == reference_tf1_shapes(grouped)
    assert read_config(str(tmp_path)) == grouped

    same = AlbertPretrainer(grouped)
    load_checkpoint(same, str(tmp_path))
    inputs = parity_inputs()
    expected, actual = model(inputs), same(inputs)
    for key in expected:
        np.testing.assert_array_equal(np.asarray(actual[key]), np.asarray(expected[key]))


def test_not_shared_is_refused_where_g_equals_l_is_not_one_group_per_layer(tmp_path):
    # The original's layer l uses group int(l / L * G): for G = L = 22, 15 / 22 * 22 is
    # 14.999..., so layer 15 uses group 14 and group 15 is never read. Written as 22 groups,
    # a not_shared model would be read back (here and by the original) as another function.
    config = tiny_config(num_hidden_layers=22, num_hidden_groups=1, layer_sharing="not_shared")
    assert config.replace(layer_sharing="all_shared", num_hidden_groups=22).group_of_layer(15) == 14
    model = AlbertPretrainer(config)
    for output_format in ("tf1", "hf"):  # the HF export writes this config too
        with pytest.raises(CheckpointError, match="one group per layer"):
            save_checkpoint(model, str(tmp_path / "out"), output_format)
        assert not (tmp_path / "out").exists()  # nothing written
    # Nor is a G = L = 22 checkpoint taken for a not_shared model.
    grouped = config.replace(layer_sharing="all_shared", num_hidden_groups=22)
    write_tf1(tmp_path / "g22" / "model.ckpt", random_arrays(reference_tf1_shapes(grouped)))
    grouped.to_json_file(str(tmp_path / "g22" / "albert_config.json"))
    with pytest.raises(CheckpointError, match="layer_sharing='not_shared' vs 'all_shared'"):
        load_checkpoint(model, str(tmp_path / "g22"))


@pytest.mark.parametrize("sharing", ["shared_attention", "shared_ffn"])
def test_partial_sharing_cannot_be_written_in_tf1_names(tmp_path, sharing):
    model = AlbertPretrainer(tiny_config(layer_sharing=sharing))
    with pytest.raises(CheckpointError, match="keras format"):
        save_checkpoint(model, str(tmp_path), "tf1")
    with pytest.raises(CheckpointError, match="keras format"):
        _original_checkpoint(tmp_path, tiny_config())
        load_checkpoint(model, str(tmp_path))


def test_equal_embedding_and_hidden_size_has_no_mapping_as_the_original(tmp_path):
    # The original has no embedding_hidden_mapping_in when E == H; neither has the model.
    config = tiny_config(embedding_size=18)
    shapes = reference_tf1_shapes(config)
    assert not any("embedding_hidden_mapping_in" in name for name in shapes)
    write_tf1(tmp_path / "model.ckpt", random_arrays(shapes))
    model = randomize(AlbertPretrainer(config))
    assert model.backbone.embeddings.embedding_hidden_mapping_in is None
    result = load_checkpoint(model, str(tmp_path))
    assert result.initialised == []
    assert sorted(result.loaded) == sorted(shapes)
    save_checkpoint(model, str(tmp_path / "again"), "tf1")
    assert set(read_tf1(tmp_path / "again" / "model.ckpt")) == set(shapes)
    # A mapping in an E == H checkpoint is a variable the original model cannot have.
    shapes["bert/encoder/embedding_hidden_mapping_in/kernel"] = (18, 18)
    write_tf1(tmp_path / "mapped" / "model.ckpt", random_arrays(shapes))
    with pytest.raises(CheckpointError, match="unexpected 1: bert/encoder/embedding_hidden"):
        load_checkpoint(model, str(tmp_path / "mapped"))


def test_hf_weights_through_tf1_keep_hf_parity(tmp_path):
    """HF -> model -> TF1 -> fresh model computes what HF computed."""
    model = AlbertPretrainer(read_config(HF_FIXTURE))
    load_checkpoint(model, HF_FIXTURE)
    save_checkpoint(model, str(tmp_path), "tf1")
    again = AlbertPretrainer(read_config(str(tmp_path)))
    load_checkpoint(again, str(tmp_path))
    expected = np.load(os.path.join(HF_FIXTURE, "parity.npz"))
    outputs = again(parity_inputs())
    assert (
        np.abs(np.asarray(outputs["sequence_output"]) - expected["last_hidden_state"]).max() <= 1e-4
    )
    assert np.abs(np.asarray(outputs["mlm_logits"]) - expected["prediction_logits"]).max() <= 1e-4


def _equal_tensors(written, expected):
    return all(np.array_equal(written[name], expected[name]) for name in expected)


def test_written_checkpoint_initialises_tf1_graph_variables(tmp_path):
    """The original's way in: graph variables by name, `init_from_checkpoint` on the directory."""
    import tensorflow as tf

    config = tiny_config()
    model = randomize(AlbertPretrainer(config))
    save_checkpoint(model, str(tmp_path), "tf1")
    key = "bert/encoder/transformer/group_1/inner_group_1/attention_1/self/key/kernel"
    graph = tf.Graph()
    with graph.as_default():
        variables = {
            name: tf.compat.v1.get_variable(name, shape=shape)
            for name, shape in reference_tf1_shapes(config).items()
        }
        tf.compat.v1.train.init_from_checkpoint(str(tmp_path), {name: name for name in variables})
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            value = session.run(variables[key])
    expected = model.backbone.encoder.attention_blocks[1][1].key.kernel.numpy()
    np.testing.assert_array_equal(value, expected)


def test_written_checkpoint_restores_as_the_original_estimator_does(tmp_path):
    """Estimator.evaluate/predict restore every global variable with a Saver, `global_step`
    (int64) included: without it the original's eval of an exported model fails."""
    config = tiny_config()
    model = randomize(AlbertPretrainer(config))
    prefix = save_checkpoint(model, str(tmp_path), "tf1", global_step=1234)
    graph = tf.Graph()
    with graph.as_default():
        for name, shape in reference_tf1_shapes(config).items():
            tf.compat.v1.get_variable(name, shape=shape)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.Session() as session:
            tf.compat.v1.train.Saver().restore(session, prefix)
            assert session.run(global_step) == 1234
    assert tf1.stored_global_step(str(tmp_path)) == 1234
    assert tf1.stored_global_step(str(tmp_path / "nothing")) is None


def test_global_step_of_an_original_checkpoint_is_kept_through_conversion(tmp_path):
    from albert.convert_checkpoint import convert

    config = tiny_config()
    arrays = random_arrays(reference_tf1_shapes(config))
    write_tf1(tmp_path / "in" / "model.ckpt-best", {**arrays, "global_step": np.int64(125000)})
    training_format.write_config(config, str(tmp_path / "in"))
    convert(str(tmp_path / "in" / "model.ckpt-best"), str(tmp_path / "out"), "tf1")
    assert tf1.stored_global_step(str(tmp_path / "out")) == 125000
    # One without (a TF-Hub export, or HF weights) is written at step 0.
    convert(HF_FIXTURE, str(tmp_path / "from_hf"), "tf1")
    assert tf1.stored_global_step(str(tmp_path / "from_hf")) == 0


@pytest.mark.parametrize("relative", [True, False])
def test_state_file_names_the_checkpoint_by_its_bare_name(tmp_path, monkeypatch, relative):
    # The original's `checkpoint` files hold `model_checkpoint_path: "model.ckpt"`; a path
    # relative to the working directory (`../model.ckpt` for --output=out) finds nothing.
    monkeypatch.chdir(tmp_path)
    output = "out" if relative else str(tmp_path / "out")
    save_checkpoint(AlbertBackbone(tiny_config()), output, "tf1")
    state = tf.compat.v1.train.get_checkpoint_state(output)
    assert state.model_checkpoint_path == os.path.join(output, "model.ckpt")
    with open(tmp_path / "out" / "checkpoint") as f:
        assert f.read().splitlines() == [
            'model_checkpoint_path: "model.ckpt"',
            'all_model_checkpoint_paths: "model.ckpt"',
        ]
    assert tf.train.latest_checkpoint(output) == os.path.join(output, "model.ckpt")


def test_a_truncated_checkpoint_is_a_checkpoint_error_and_assigns_nothing(tmp_path):
    config = tiny_config()
    _original_checkpoint(tmp_path, config)
    data = next(tmp_path.glob("model.ckpt-best.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])  # cut short
    model = AlbertPretrainer(config)
    before = [w.numpy() for w in model.weights]
    with pytest.raises(CheckpointError, match="corrupted or truncated"):
        load_checkpoint(model, str(tmp_path / "model.ckpt-best"))
    for value, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(value, weight.numpy())  # the model is as it was
