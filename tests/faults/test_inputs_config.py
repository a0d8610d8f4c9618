"""Bad albert_config.json files: one-line errors naming the key, nothing trained on defaults."""

import json
from pathlib import Path

import pytest

from albert.config import IGNORED_KEYS, REQUIRED_KEYS, AlbertConfig, ConfigError
from albert.configs import DIRECTORY

CONFIGS = Path(DIRECTORY)  # the published configs, shipped inside the package
BASE = json.loads((CONFIGS / "albert_base_v2.json").read_text())


def _write(tmp_path, values, name="albert_config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(values))
    return str(path)


def test_typo_names_the_key_and_the_closest_known_one(tmp_path):
    values = dict(BASE)
    values["num_hiden_layers"] = values.pop("num_hidden_layers")
    path = _write(tmp_path, values)
    with pytest.raises(ConfigError) as error:
        AlbertConfig.from_json_file(path)
    assert str(error.value) == (
        f"{path} has an unknown key `num_hiden_layers`; did you mean `num_hidden_layers`?"
    )


def test_unknown_key_with_no_close_match_lists_the_known_keys(tmp_path):
    path = _write(tmp_path, {**BASE, "zzz": 1})
    with pytest.raises(ConfigError, match=r"unknown key `zzz`; known keys: .*vocab_size\."):
        AlbertConfig.from_json_file(path)


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_published_keys_are_required(tmp_path, key):
    values = dict(BASE)
    del values[key]
    path = _write(tmp_path, values)
    with pytest.raises(ConfigError) as error:
        AlbertConfig.from_json_file(path)
    assert str(error.value).startswith(f"{path} has no `{key}`;")


def test_missing_hidden_size_is_not_4096(tmp_path):
    values = {k: v for k, v in BASE.items() if k != "hidden_size"}
    with pytest.raises(ConfigError, match="has no `hidden_size`"):
        AlbertConfig.from_dict(values)


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.json")))
def test_every_published_config_reads(name):
    config = AlbertConfig.from_json_file(str(CONFIGS / name))
    assert set(config.extra) <= set(IGNORED_KEYS)


def test_original_extra_keys_and_ablation_key_are_accepted(tmp_path):
    values = {**BASE, "layers_to_keep": [], "layer_sharing": "shared_ffn"}
    config = AlbertConfig.from_json_file(_write(tmp_path, values))
    assert config.layer_sharing == "shared_ffn"
    assert config.extra == {k: values[k] for k in IGNORED_KEYS}
    assert json.loads(config.to_json_string()) == values


def test_hf_transformers_config_is_read_with_its_names(tmp_path):
    hf = {
        "architectures": ["AlbertForMaskedLM"],
        "model_type": "albert",
        "torch_dtype": "float32",
        "transformers_version": "4.40.0",
        "classifier_dropout_prob": 0.1,
        "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute",
        "pad_token_id": 0,
        "bos_token_id": 2,
        "eos_token_id": 3,
        "hidden_act": "gelu_new",
        **{k: v for k, v in BASE.items() if k != "hidden_act"},
    }
    config = AlbertConfig.from_json_file(_write(tmp_path, hf, "config.json"))
    assert config.hidden_act == "gelu"  # HF's gelu_new is the original's tanh "gelu"
    assert config.hidden_size == 768
    written = json.loads(config.to_json_string())
    assert not set(written) & {"architectures", "model_type", "torch_dtype", "layer_norm_eps"}


@pytest.mark.parametrize(
    "hf_act, ours", [("gelu", "gelu_exact"), ("gelu_pytorch_tanh", "gelu"), ("relu", "relu")]
)
def test_hf_activation_names_map_to_the_same_function(tmp_path, hf_act, ours):
    # HF's "gelu" is the exact erf GELU; the original's "gelu" is the tanh approximation.
    hf = {"model_type": "albert", **BASE, "hidden_act": hf_act}
    assert AlbertConfig.from_json_file(_write(tmp_path, hf, "config.json")).hidden_act == ours


def test_hf_config_keys_left_out_take_hf_defaults(tmp_path):
    # HF writes only what differs from its defaults in some configs: a missing key is HF's
    # default, not an error (an albert_config.json must state every key).
    leave_out = ("inner_group_num", "num_hidden_groups", "type_vocab_size", "hidden_act")
    hf = {"model_type": "albert", **{k: v for k, v in BASE.items() if k not in leave_out}}
    config = AlbertConfig.from_json_file(_write(tmp_path, hf, "config.json"))
    assert (config.inner_group_num, config.num_hidden_groups, config.type_vocab_size) == (1, 1, 2)
    assert config.hidden_act == "gelu"  # HF's default gelu_new: the original's tanh GELU.


@pytest.mark.parametrize(
    "marker", [{"architectures": ["AlbertModel"]}, {"transformers_version": "4"}]
)
def test_an_hf_config_without_model_type_is_still_read_as_hf(tmp_path, marker):
    hf = {**marker, **BASE, "layer_norm_eps": 1e-12, "pad_token_id": 0}
    assert AlbertConfig.from_json_file(_write(tmp_path, hf, "config.json")).hidden_size == 768


@pytest.mark.parametrize("eps", [1e-5, 1e-14])
def test_hf_config_with_another_layer_norm_epsilon_is_refused(tmp_path, eps):
    hf = {"model_type": "albert", **BASE, "layer_norm_eps": eps}
    with pytest.raises(ConfigError, match="ALBERT uses 1e-12"):
        AlbertConfig.from_json_file(_write(tmp_path, hf, "config.json"))


def test_hf_config_typo_is_still_an_error(tmp_path):
    hf = {"model_type": "albert", **BASE, "hiden_size": 3}
    with pytest.raises(ConfigError, match="unknown key `hiden_size`; did you mean `hidden_size`"):
        AlbertConfig.from_json_file(_write(tmp_path, hf, "config.json"))


def test_hf_config_of_another_model_is_refused(tmp_path):
    path = _write(tmp_path, {"model_type": "bert", **BASE}, "config.json")
    with pytest.raises(ConfigError, match=f"{path} is a 'bert' config, not an ALBERT one"):
        AlbertConfig.from_json_file(path)


def test_a_typo_cannot_reach_a_written_config():
    with pytest.raises(ConfigError, match="unknown key `num_hiden_layers`"):
        AlbertConfig(**{k: BASE[k] for k in REQUIRED_KEYS}, extra={"num_hiden_layers": 2})


def test_bad_value_error_names_the_file(tmp_path):
    path = _write(tmp_path, {**BASE, "num_attention_heads": 7})
    with pytest.raises(ConfigError, match=f"^{path}: `hidden_size` must be divisible"):
        AlbertConfig.from_json_file(path)


def test_binary_config_file_is_one_line(tmp_path):
    path = tmp_path / "albert_config.json"
    path.write_bytes(b"\xff\xfe\x00garbage\x00")
    with pytest.raises(ConfigError, match="is not a UTF-8 JSON file"):
        AlbertConfig.from_json_file(str(path))


def test_binary_or_bom_config_file_on_gs_reads_as_a_local_one(tmp_path):
    # ram:// goes through tf.io.gfile as gs:// does: a binary file was a UnicodeDecodeError
    # traceback there, and a UTF-8 byte-order mark is still no JSON error.
    import tensorflow as tf

    path = f"ram://{tmp_path.name}-config/albert_config.json"
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(b"\xff\xfe\x00garbage\x00")
    with pytest.raises(ConfigError, match=f"^{path} is not a UTF-8 JSON file"):
        AlbertConfig.from_json_file(path)
    path = path.replace("albert_config", "bom_config")  # ram:// "wb" appends to a file
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(b"\xef\xbb\xbf" + json.dumps(BASE).encode())
    assert AlbertConfig.from_json_file(path).hidden_size == BASE["hidden_size"]
