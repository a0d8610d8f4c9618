"""This project's Keras weights format, and format detection."""

import numpy as np
import pytest
from checkpoint_testing import (
    HF_FIXTURE,
    random_arrays,
    randomize,
    reference_tf1_shapes,
    write_tf1,
)

from albert.checkpoints import (
    CheckpointError,
    detect_format,
    load_checkpoint,
    read_config,
    save_checkpoint,
)
from albert.modeling import (
    AlbertBackbone,
    AlbertClassifier,
    AlbertPretrainer,
    AlbertQuestionAnswering,
)
from tests.helpers import tiny_config, write_training_checkpoint


def _assert_same_weights(variables, others):
    assert len(variables) == len(others)
    for a, b in zip(variables, others, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("sharing", ["shared_attention", "shared_ffn"])
def test_round_trip_in_every_sharing_mode(tmp_path, sharing):
    config = tiny_config(layer_sharing=sharing)
    model = randomize(AlbertPretrainer(config))
    file = save_checkpoint(model, str(tmp_path), "keras")
    assert file.endswith("pretrainer.weights.h5")
    assert read_config(str(tmp_path)) == config
    again = AlbertPretrainer(config)
    result = load_checkpoint(again, str(tmp_path))
    assert result.format == "keras" and result.initialised == []
    _assert_same_weights(again.weights, model.weights)


def test_backbone_and_pretrainer_weights_load_into_each_other(tmp_path):
    pretrainer = randomize(AlbertPretrainer(tiny_config()))
    save_checkpoint(pretrainer, str(tmp_path / "pretrainer"), "keras")
    save_checkpoint(pretrainer.backbone, str(tmp_path / "backbone"), "keras")

    # Backbone weights into a pretrainer: its heads stay initialised, and are listed.
    into_pretrainer = AlbertPretrainer(tiny_config())
    result = load_checkpoint(into_pretrainer, str(tmp_path / "backbone"))
    _assert_same_weights(into_pretrainer.backbone.weights, pretrainer.backbone.weights)
    heads = into_pretrainer.masked_lm_head.weights + into_pretrainer.sentence_order_head.weights
    assert set(result.initialised) == {v.path for v in heads}

    # Pretrainer weights into a backbone: the heads are ignored, and listed.
    into_backbone = AlbertBackbone(tiny_config())
    result = load_checkpoint(into_backbone, str(tmp_path / "pretrainer"))
    _assert_same_weights(into_backbone.weights, pretrainer.backbone.weights)
    assert result.initialised == [] and len(result.ignored) == 7


def test_keras_weights_need_their_config(tmp_path):
    save_checkpoint(AlbertPretrainer(tiny_config()), str(tmp_path), "keras")
    (tmp_path / "albert_config.json").unlink()
    with pytest.raises(CheckpointError, match="No albert_config.json beside"):
        load_checkpoint(AlbertPretrainer(tiny_config()), str(tmp_path))


def test_keras_weights_of_another_structure_are_an_error(tmp_path):
    # Keras alone would load group 0 and skip group 1 with a warning.
    save_checkpoint(AlbertPretrainer(tiny_config()), str(tmp_path), "keras")
    with pytest.raises(CheckpointError, match="num_hidden_groups=1 vs 2"):
        load_checkpoint(AlbertPretrainer(tiny_config(num_hidden_groups=1)), str(tmp_path))
    with pytest.raises(CheckpointError, match="layer_sharing='shared_ffn' vs 'all_shared'"):
        load_checkpoint(AlbertPretrainer(tiny_config(layer_sharing="shared_ffn")), str(tmp_path))


def test_detect_format(tmp_path):
    save_checkpoint(AlbertBackbone(tiny_config()), str(tmp_path / "keras"), "keras")
    write_tf1(
        tmp_path / "tf1" / "model.ckpt-best", random_arrays(reference_tf1_shapes(tiny_config()))
    )
    assert detect_format(HF_FIXTURE) == "hf"
    assert detect_format(str(tmp_path / "keras")) == "keras"
    assert detect_format(str(tmp_path / "keras" / "backbone.weights.h5")) == "keras"
    assert detect_format(str(tmp_path / "tf1")) == "tf1"
    assert detect_format(str(tmp_path / "tf1" / "model.ckpt-best")) == "tf1"
    with pytest.raises(CheckpointError, match="No checkpoint found"):
        detect_format(str(tmp_path))


def test_a_fine_tuned_models_keras_directory_loads_by_its_directory(tmp_path):
    # save_checkpoint writes a classifier as model.weights.h5; its directory is what
    # convert_checkpoint --output_format=keras hands to a later --init_checkpoint.
    model = randomize(AlbertClassifier(AlbertBackbone(tiny_config()), num_labels=3))
    file = save_checkpoint(model, str(tmp_path), "keras")
    assert file.endswith("model.weights.h5")
    assert detect_format(str(tmp_path)) == "keras"
    assert read_config(str(tmp_path)) == tiny_config()
    again = AlbertClassifier(AlbertBackbone(tiny_config()), num_labels=3)
    result = load_checkpoint(again, str(tmp_path))
    assert result.format == "keras" and result.initialised == []
    _assert_same_weights(again.weights, model.weights)


def test_a_fine_tuned_models_weights_into_another_head_name_both_heads(tmp_path):
    # MNLI's weights (3 labels) into an RTE model (2): the error said the file "was not saved
    # from a AlbertClassifier", which it was.
    save_checkpoint(AlbertClassifier(tiny_config(), num_labels=3), str(tmp_path), "keras")
    with pytest.raises(
        CheckpointError,
        match="holds a classifier head of 3 labels, and this AlbertClassifier "
        "has a classifier head of 2 labels",
    ):
        load_checkpoint(AlbertClassifier(tiny_config(), num_labels=2), str(tmp_path))
    with pytest.raises(CheckpointError, match="has the SQuAD 1.1 span head"):
        load_checkpoint(AlbertQuestionAnswering(tiny_config()), str(tmp_path))


def test_a_whole_keras_model_file_is_named_as_such(tmp_path):
    # Not "No TF1 checkpoint at m.keras (expected the file m.keras.index)".
    AlbertBackbone(tiny_config()).save(tmp_path / "m.keras")
    with pytest.raises(CheckpointError, match=r"m.keras is a whole Keras model.*load_model"):
        load_checkpoint(AlbertBackbone(tiny_config()), str(tmp_path / "m.keras"))


@pytest.mark.parametrize("build", [AlbertPretrainer, lambda c: AlbertClassifier(c, 3)])
def test_a_run_directory_is_its_newest_checkpoint_not_a_stale_export(tmp_path, build):
    # A finished run exported its final weights beside its checkpoints; resumed for more
    # steps and killed, its newest checkpoint is past them. convert_checkpoint --input=<run>
    # read the pretrainer's export: older weights, written under the newer global_step.
    exported = randomize(build(tiny_config()), seed=1)
    write_training_checkpoint(exported, tmp_path, 6)
    save_checkpoint(exported, str(tmp_path), "keras")
    newest = randomize(build(tiny_config()), seed=2)
    write_training_checkpoint(newest, tmp_path, 9)

    assert detect_format(str(tmp_path)) == "training"
    model = build(tiny_config())
    assert load_checkpoint(model, str(tmp_path)).format == "training"
    _assert_same_weights(model.weights, newest.weights)
    # The export still loads by its own name.
    (file,) = tmp_path.glob("*.weights.h5")
    assert load_checkpoint(model, str(file)).format == "keras"
    _assert_same_weights(model.weights, exported.weights)


def test_a_failed_weights_write_leaves_no_half_file(tmp_path, monkeypatch):
    model = AlbertPretrainer(tiny_config())

    def full_disk(path):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model, "save_weights", full_disk)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(model, str(tmp_path / "out"), "keras")
    assert [p.name for p in (tmp_path / "out").iterdir() if ".tmp-" in p.name] == []


def test_a_directory_of_several_weight_files_names_the_pretrainers_then_the_backbones(tmp_path):
    # A pretrainer saved where a fine-tuned model was leaves its model.weights.h5 there
    # (`save` removes only the other base files): the pretrainer's is the one read.
    from albert.checkpoints import keras_format

    names = [keras_format.MODEL_FILE, keras_format.BACKBONE_FILE, keras_format.PRETRAINER_FILE]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    for expected in reversed(names):
        assert keras_format.weights_path(str(tmp_path)) == str(tmp_path / expected)
        (tmp_path / expected).unlink()


def test_a_backbone_saved_over_a_pretrainer_is_what_the_directory_then_holds(tmp_path):
    # The older pretrainer file would be read first (`weights_path`): saving removes it.
    old, new = (randomize(AlbertPretrainer(tiny_config())) for _ in range(2))
    save_checkpoint(old, str(tmp_path), "keras")
    save_checkpoint(new.backbone, str(tmp_path), "keras")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "albert_config.json",
        "backbone.weights.h5",
    ]
    loaded = AlbertBackbone(tiny_config())
    load_checkpoint(loaded, str(tmp_path))
    _assert_same_weights(loaded.weights, new.backbone.weights)


def test_a_squad_2_models_weights_load_into_a_squad_2_model_only(tmp_path):
    model = randomize(AlbertQuestionAnswering(tiny_config(), version_2_with_negative=True))
    save_checkpoint(model, str(tmp_path), "keras")
    again = AlbertQuestionAnswering(tiny_config(), version_2_with_negative=True)
    assert load_checkpoint(again, str(tmp_path)).initialised == []
    _assert_same_weights(again.weights, model.weights)
    with pytest.raises(CheckpointError, match="holds the SQuAD 2.0 head.*has the SQuAD 1.1"):
        load_checkpoint(AlbertQuestionAnswering(tiny_config()), str(tmp_path))
