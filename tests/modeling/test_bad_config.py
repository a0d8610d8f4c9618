"""AlbertConfig refuses configs that cannot describe an ALBERT model, naming the key."""

import json

import pytest

from albert.config import AlbertConfig, ConfigError
from tests.helpers import tiny_config


def test_valid_config_builds():
    assert tiny_config().head_size == 6


def test_layers_need_not_divide_into_groups():
    """The original takes any G <= L: layer l uses group int(l / L * G)."""
    config = tiny_config(num_hidden_layers=5, num_hidden_groups=3)
    assert [config.group_of_layer(layer) for layer in range(5)] == [0, 0, 1, 1, 2]
    assert [tiny_config(num_hidden_layers=3).group_of_layer(layer) for layer in range(3)] == [
        0,
        0,
        1,
    ]


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(num_attention_heads=4), "`hidden_size` must be divisible by `num_attention_heads`"),
        (dict(num_hidden_groups=5), "`num_hidden_groups` must not exceed `num_hidden_layers`"),
        (dict(hidden_act="gelu_fast"), "`hidden_act` must be one of"),
        (dict(layer_sharing="half_shared"), "`layer_sharing` must be one of"),
        (dict(hidden_dropout_prob=1.0), "`hidden_dropout_prob` must be in"),
        (dict(initializer_range=0.0), "`initializer_range` must be positive"),
    ],
)
def test_inconsistent_values(changes, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(**changes)


@pytest.mark.parametrize(
    "key",
    [
        "vocab_size",
        "embedding_size",
        "hidden_size",
        "num_hidden_layers",
        "num_hidden_groups",
        "num_attention_heads",
        "intermediate_size",
        "inner_group_num",
        "max_position_embeddings",
        "type_vocab_size",
    ],
)
@pytest.mark.parametrize("value", [0, -1, 2.5, True])
def test_sizes_must_be_positive_integers(key, value):
    with pytest.raises(ConfigError, match=f"`{key}` must be a positive integer"):
        tiny_config(**{key: value})


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="Config file not found"):
        AlbertConfig.from_json_file(str(tmp_path / "missing.json"))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        AlbertConfig.from_json_file(str(tmp_path / "broken.json"))
    (tmp_path / "no_vocab.json").write_text(json.dumps({"hidden_size": 18}))
    with pytest.raises(ConfigError, match="no `vocab_size`"):
        AlbertConfig.from_json_file(str(tmp_path / "no_vocab.json"))


def test_a_config_with_a_utf8_byte_order_mark_reads_as_without(tmp_path):
    path = tmp_path / "albert_config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(tiny_config().to_dict()).encode())
    assert AlbertConfig.from_json_file(str(path)) == tiny_config()


def test_released_extra_keys_are_kept_not_used(tmp_path):
    # A file states every key (from_json_file is strict), so write every key of the config.
    full = tiny_config().to_dict()
    values = {**full, "net_structure_type": 0, "gap_size": 0, "layers_to_keep": []}
    (tmp_path / "albert_config.json").write_text(json.dumps(values))
    config = AlbertConfig.from_json_file(str(tmp_path / "albert_config.json"))
    assert config.extra == {"net_structure_type": 0, "gap_size": 0, "layers_to_keep": []}
    assert config.to_dict()["gap_size"] == 0


def test_the_default_layer_sharing_is_not_written():
    # The original's albert_config.json has no `layer_sharing`: only an ablation writes it.
    assert "layer_sharing" not in tiny_config().to_dict()
    assert tiny_config(layer_sharing="not_shared").to_dict()["layer_sharing"] == "not_shared"


def test_replace_gives_a_config_that_shares_nothing():
    config = AlbertConfig.from_dict({**tiny_config().to_dict(), "gap_size": 0})
    changed = config.replace(hidden_dropout_prob=0.1)
    changed.extra["gap_size"] = 5
    assert config.extra == {"gap_size": 0}
