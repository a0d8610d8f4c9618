"""AlbertConfig: the original `albert_config.json`, validated, plus the paper's sharing ablations.

The keys and their meaning are exactly the original release's, so a released
`albert_config.json` reads unchanged and what we write reads in the original code.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os

from albert.errors import AlbertError
from albert.fileio import is_remote

# Activation names accepted in `hidden_act`. "gelu" is the tanh approximation, as in the
# original release (HF transformers calls it "gelu_new"); "gelu_exact" is the erf form.
ACTIVATIONS = ("gelu", "gelu_new", "gelu_exact", "relu", "tanh", "swish", "silu", "linear")

# Which parameters layers in one group share (paper section 4.5, Table 4). "all_shared" is
# ALBERT's default and what `num_hidden_groups` / `inner_group_num` describe; the others are
# the paper's ablations: attention or FFN shared within a group while the other part belongs
# to each layer; "not_shared" gives every layer its own block (the same as G = L).
LAYER_SHARING_MODES = ("all_shared", "shared_attention", "shared_ffn", "not_shared")

# Keys that released configs carry but the model does not use; kept for round trips. The
# original's AlbertConfig.from_dict set any key it was given, so its files may hold these.
IGNORED_KEYS = ("net_structure_type", "gap_size", "num_memory_blocks", "layers_to_keep")

# Keys every published albert_config.json states; a file without one of them is refused
# rather than filled with a default (the original's hidden_size default is xxlarge's 4096).
REQUIRED_KEYS = (
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_hidden_groups",
    "num_attention_heads",
    "intermediate_size",
    "inner_group_num",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
)

# An HF transformers `config.json` (model_type "albert"): its ALBERT keys have the original's
# names, missing ones take HF's defaults, and these HF-only keys are read and dropped.
HF_ONLY_KEYS = (
    "model_type",
    "architectures",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "_name_or_path",
    "_commit_hash",
    "layer_norm_eps",
    "classifier_dropout_prob",
    "position_embedding_type",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "id2label",
    "label2id",
    "num_labels",
    "problem_type",
    "finetuning_task",
    "tokenizer_class",
    "prefix",
    "task_specific_params",
    "output_past",
    "use_cache",
    "gradient_checkpointing",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "torchscript",
    "use_bfloat16",
    "tf_legacy_loss",
    "pruned_heads",
    "tie_word_embeddings",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "is_decoder",
    "add_cross_attention",
    "tie_encoder_decoder",
    "cross_attention_hidden_size",
)
# HF names its activations differently: its "gelu" is the exact erf form.
_ACTIVATION_FROM_HF = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_exact"}
_HF_DEFAULTS = dict(
    vocab_size=30000,
    embedding_size=128,
    hidden_size=4096,
    num_hidden_layers=12,
    num_hidden_groups=1,
    num_attention_heads=64,
    intermediate_size=16384,
    inner_group_num=1,
    hidden_act="gelu_new",
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=512,
    type_vocab_size=2,
    initializer_range=0.02,
)


class ConfigError(AlbertError):
    """A config value or file that cannot describe an ALBERT model."""


@dataclasses.dataclass
class AlbertConfig:
    """Hyperparameters of an ALBERT model, keyed as the original `albert_config.json`.

    Example:
        >>> config = AlbertConfig.from_json_file("albert_base_v2")  # a shipped config, or a path
        >>> config.hidden_size
        768
    """

    vocab_size: int
    embedding_size: int = 128
    hidden_size: int = 4096
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    num_attention_heads: int = 64
    intermediate_size: int = 16384
    inner_group_num: int = 1
    down_scale_factor: int = 1
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_sharing: str = "all_shared"
    extra: dict = dataclasses.field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.validate()

    def validate(self):
        """Raises ConfigError with one sentence naming the offending key."""
        for key in (
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
        ):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"`{key}` must be a positive integer. Received: {key}={value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                "`hidden_size` must be divisible by `num_attention_heads`. Received: "
                f"hidden_size={self.hidden_size}, num_attention_heads={self.num_attention_heads}"
            )
        # Layer l uses group int(l / L * G), as the original: any G <= L gives every group a
        # layer (L=3, G=2: layers 0, 1 -> group 0, layer 2 -> group 1); G > L would leave some
        # group without one, and the original's checkpoints without its variables.
        if self.num_hidden_groups > self.num_hidden_layers:
            raise ConfigError(
                "`num_hidden_groups` must not exceed `num_hidden_layers` (a group no layer uses). "
                f"Received: num_hidden_layers={self.num_hidden_layers}, "
                f"num_hidden_groups={self.num_hidden_groups}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(
                f"`hidden_act` must be one of {', '.join(ACTIVATIONS)}. "
                f"Received: hidden_act={self.hidden_act!r}"
            )
        if self.layer_sharing not in LAYER_SHARING_MODES:
            raise ConfigError(
                f"`layer_sharing` must be one of {', '.join(LAYER_SHARING_MODES)}. "
                f"Received: layer_sharing={self.layer_sharing!r}"
            )
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ConfigError(f"`{key}` must be in [0, 1). Received: {key}={value!r}")
        if not isinstance(self.initializer_range, (int, float)) or self.initializer_range <= 0:
            raise ConfigError(
                f"`initializer_range` must be positive. Received: {self.initializer_range!r}"
            )
        unknown = sorted(set(self.extra) - set(IGNORED_KEYS))
        if unknown:
            raise ConfigError(_unknown_key_message(unknown[0], "The config"))

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def group_of_layer(self, layer_index: int) -> int:
        """The group whose parameters layer `layer_index` (0-based) uses, as the original."""
        return int(layer_index / self.num_hidden_layers * self.num_hidden_groups)

    # --- Serialisation -----------------------------------------------------------------

    @classmethod
    def from_dict(cls, values: dict, source: str = "The config") -> AlbertConfig:
        """Builds a config from the keys of an `albert_config.json`, strictly.

        Every key of `REQUIRED_KEYS` must be present; `down_scale_factor` and `layer_sharing`
        may be; `IGNORED_KEYS` are kept (written back) but not used. An HF transformers
        config (it has `model_type`, `architectures` or `transformers_version`) is read with
        HF's names and defaults. To build a config from a few keys over the defaults, call
        `AlbertConfig(**keys)` instead.

        Args:
            values: the JSON object's keys and values.
            source: what to call the config in errors (its file name).

        Raises:
            ConfigError: an unknown key (named with the closest known one), a missing
                required key, or a value that cannot describe an ALBERT model.
        """
        if any(key in values for key in ("model_type", "architectures", "transformers_version")):
            values = _from_hf_names(values, source)
        fields = _field_names()
        for key in values:
            if key not in fields and key not in IGNORED_KEYS:
                raise ConfigError(_unknown_key_message(key, source))
        missing = [key for key in REQUIRED_KEYS if key not in values]
        if missing:
            listed = ", ".join(f"`{key}`" for key in missing)
            raise ConfigError(
                f"{source} has no {listed}; an albert_config.json states every model key "
                "(see albert/configs/albert_base_v2.json)."
            )
        known = {k: v for k, v in values.items() if k in fields}
        extra = {k: v for k, v in values.items() if k not in fields}
        try:
            return cls(**known, extra=extra)
        except ConfigError as e:
            if source == "The config":
                raise
            raise ConfigError(f"{source}: {e}") from None

    @classmethod
    def from_json_file(cls, path: str) -> AlbertConfig:
        """Reads an `albert_config.json` (local path or any path tf.io.gfile understands).

        Raises:
            ConfigError: the file is missing, is not a JSON object, or `from_dict` refuses it.
        """
        from albert import configs  # imported here: albert.configs imports this module

        path = configs.resolve(path)  # a bare name such as albert_base_v2: a shipped config
        text = _read_text(path)
        try:
            # A UTF-8 byte-order mark (Windows editors, PowerShell) is not a JSON error.
            values = json.loads(text.removeprefix("\ufeff"))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}).") from None
        if not isinstance(values, dict):
            raise ConfigError(f"{path} must hold a JSON object of config keys.")
        return cls.from_dict(values, source=path)

    def to_dict(self) -> dict:
        """The original's keys (plus `layer_sharing` only when it is not the default)."""
        values = dataclasses.asdict(self)
        extra = values.pop("extra")
        if values["layer_sharing"] == "all_shared":
            del values["layer_sharing"]
        values.update(extra)
        return values

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str):
        _write_text(path, self.to_json_string())

    def replace(self, **changes) -> AlbertConfig:
        """A copy with some keys changed (validated again)."""
        return dataclasses.replace(copy.deepcopy(self), **changes)


def _field_names() -> set:
    return {f.name for f in dataclasses.fields(AlbertConfig)} - {"extra"}


def _unknown_key_message(key: str, source: str) -> str:
    known = sorted(_field_names() | set(IGNORED_KEYS))
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean `{close[0]}`?" if close else f"known keys: {', '.join(known)}."
    return f"{source} has an unknown key `{key}`; {hint}"


def _from_hf_names(values: dict, source: str) -> dict:
    """The original's keys for an HF transformers ALBERT `config.json`."""
    if values.get("model_type", "albert") != "albert":
        raise ConfigError(f"{source} is a {values['model_type']!r} config, not an ALBERT one.")
    if values.get("layer_norm_eps", 1e-12) != 1e-12:
        raise ConfigError(
            f"{source} has layer_norm_eps={values['layer_norm_eps']}; ALBERT uses 1e-12."
        )
    if values.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(
            f"{source} uses {values['position_embedding_type']} positions; ALBERT uses absolute ones."
        )
    keys = {**_HF_DEFAULTS, **{k: v for k, v in values.items() if k not in HF_ONLY_KEYS}}
    keys["hidden_act"] = _ACTIVATION_FROM_HF.get(keys["hidden_act"], keys["hidden_act"])
    return keys


def _read_text(path: str) -> str:
    try:  # A gs:// file decodes as UTF-8 too (GFile's text mode): a binary one is one line.
        if is_remote(path):
            import tensorflow as tf  # only for remote paths such as gs://

            if not tf.io.gfile.exists(path):
                raise ConfigError(f"Config file not found: {path}")
            with tf.io.gfile.GFile(path) as f:
                return f.read()
        if not os.path.isfile(path):
            raise ConfigError(f"Config file not found: {path}")
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        raise ConfigError(
            f"{path} is not a UTF-8 JSON file; is it an albert_config.json?"
        ) from None


def _write_text(path: str, text: str):
    from albert import fileio  # imports TensorFlow; written whole, through tf.io.gfile

    fileio.write_text(path, text)
