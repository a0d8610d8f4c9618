"""Keras saving: `model.save("m.keras")` then `keras.models.load_model` for every public model,
and `get_config` / `from_config` round trips for every registered model and layer."""

from pathlib import Path

import keras
import numpy as np
import pytest

from albert.keras_version import MIN_KERAS, check_keras_version
from albert.modeling import (
    AlbertBackbone,
    AlbertClassifier,
    AlbertMultipleChoice,
    AlbertPretrainer,
    AlbertQuestionAnswering,
)
from albert.modeling.dropout import Dropout
from albert.modeling.embeddings import AlbertEmbeddings
from albert.modeling.encoder import AlbertAttention, AlbertEncoder, AlbertFeedForward
from albert.modeling.heads import AlbertMaskedLMHead, AlbertSentenceOrderHead
from albert.modeling.task_heads import AlbertClassificationHead, AlbertSpanHead, AlbertSquadV2Head
from tests.helpers import tiny_config


def tiny(**changes):
    return tiny_config(**{"inner_group_num": 1, **changes})


def inputs(shape=(3, 7), v2=False):
    rng = np.random.default_rng(0)
    features = {
        "input_ids": rng.integers(0, 99, shape).astype("int32"),
        "input_mask": np.ones(shape, "int32"),
        "segment_ids": rng.integers(0, 3, shape).astype("int32"),
    }
    if len(shape) == 2:
        features["masked_lm_positions"] = np.array([[1, 2], [0, 6], [3, 3]], "int32")
    if v2:
        features["p_mask"] = (np.arange(7) % 3 == 1).astype("int32") * np.ones(shape, "int32")
    return features


MODELS = {
    "backbone": (lambda c: AlbertBackbone(c), (3, 7)),
    "pretrainer": (lambda c: AlbertPretrainer(c), (3, 7)),
    "classifier": (lambda c: AlbertClassifier(AlbertBackbone(c), 4, dropout_rate=0.2), (3, 7)),
    "multiple_choice": (lambda c: AlbertMultipleChoice(c, dropout_rate=0.0), (3, 4, 7)),
    "squad_v1": (lambda c: AlbertQuestionAnswering(c), (3, 7)),
    "squad_v2": (
        lambda c: AlbertQuestionAnswering(c, True, start_n_top=3, end_n_top=2, dropout_rate=0.3),
        (3, 7),
    ),
}


@pytest.mark.parametrize("embedding_size", [10, 18])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_save_and_load_model_round_trip(tmp_path, name, embedding_size):
    build, shape = MODELS[name]
    model = build(tiny(embedding_size=embedding_size, layer_sharing="all_shared"))
    rng = np.random.default_rng(1)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))
    features = inputs(shape, v2=name == "squad_v2")
    if name != "pretrainer":
        features.pop("masked_lm_positions", None)
    expected = model(features, training=False)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is type(model)
    assert loaded.get_config() == model.get_config()
    assert [w.path for w in loaded.weights] == [w.path for w in model.weights]
    outputs = loaded(features, training=False)
    assert sorted(outputs) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(np.asarray(outputs[key]), np.asarray(value), err_msg=key)


def test_a_keras_that_would_save_no_encoder_weights_is_refused_on_import():
    # Keras 3.14 saves one level of lists: the round trip above fails there, silently.
    with pytest.raises(ImportError, match=r"keras>=3\.15 \(found 3\.14\.1: .*pip install"):
        check_keras_version("3.14.1")
    for version in ("3.15.0", "3.16.0.dev2026", "4.0.0", keras.__version__):
        check_keras_version(version)
    # The same bound as the package's dependencies.
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert f'"keras>={".".join(map(str, MIN_KERAS))}"' in pyproject


def test_config_round_trip_of_models_keeps_every_argument():
    config = tiny(hidden_dropout_prob=0.1)
    qa = AlbertQuestionAnswering(config, True, start_n_top=4, end_n_top=3, dropout_rate=0.2)
    again = AlbertQuestionAnswering.from_config(qa.get_config())
    assert (again.version_2_with_negative, again.start_n_top, again.end_n_top) == (True, 4, 3)
    assert again.dropout_rate == 0.2 and again.config == config
    classifier = AlbertClassifier.from_config(AlbertClassifier(config, 5, 0.3).get_config())
    assert (classifier.num_labels, classifier.dropout_rate) == (5, 0.3)
    choice = AlbertMultipleChoice.from_config(AlbertMultipleChoice(config, 0.05).get_config())
    assert choice.dropout_rate == 0.05 and choice.config == config


LAYERS = [
    lambda c: AlbertEmbeddings(c, name="embeddings"),
    lambda c: AlbertAttention(c, name="attention"),
    lambda c: AlbertFeedForward(c, name="ffn"),
    lambda c: AlbertEncoder(c, name="encoder"),
    lambda c: AlbertMaskedLMHead(c, name="mlm"),
    lambda c: AlbertSentenceOrderHead(c, num_classes=3, name="sop"),
    lambda c: AlbertClassificationHead(c, num_labels=5, dropout_rate=0.2, name="classifier"),
    lambda c: AlbertSpanHead(c, name="span"),
    lambda c: AlbertSquadV2Head(c, start_n_top=4, end_n_top=2, dropout_rate=0.3, name="v2"),
    lambda c: Dropout(0.25, seed=7, name="dropout"),
]


@pytest.mark.parametrize("index", range(len(LAYERS)))
def test_every_layer_is_registered_and_its_config_round_trips(index):
    layer = LAYERS[index](tiny())
    cls = type(layer)
    assert keras.saving.get_registered_name(cls) == f"albert>{cls.__name__}"
    assert keras.saving.get_registered_object(f"albert>{cls.__name__}") is cls
    config = layer.get_config()
    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(rebuilt) is cls
    assert rebuilt.get_config() == config


@pytest.mark.parametrize(
    "cls",
    [
        AlbertBackbone,
        AlbertPretrainer,
        AlbertClassifier,
        AlbertMultipleChoice,
        AlbertQuestionAnswering,
    ],
)
def test_every_model_is_registered(cls):
    assert keras.saving.get_registered_name(cls) == f"albert>{cls.__name__}"


@pytest.mark.parametrize("name", ["pretrainer", "classifier", "squad_v2"])
def test_mixed_precision_model_loads_with_its_policy(tmp_path, name):
    # Saved under mixed_bfloat16, loaded where the global policy is float32 (a fresh process):
    # every layer keeps the policy it was saved with, so the outputs are the same.
    build, shape = MODELS[name]
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = build(tiny())
    finally:
        keras.config.set_dtype_policy("float32")
    features = inputs(shape, v2=name == "squad_v2")
    if name != "pretrainer":
        features.pop("masked_lm_positions")
    expected = model(features, training=False)
    model.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"))
    assert keras.config.dtype_policy().name == "float32"

    def policies(m):
        return {layer.path: layer.dtype_policy.name for layer in m._flatten_layers()}

    assert policies(loaded) == policies(model)
    assert "mixed_bfloat16" in policies(model).values()
    outputs = loaded(features, training=False)
    for key, value in expected.items():
        np.testing.assert_array_equal(np.asarray(outputs[key]), np.asarray(value), err_msg=key)
