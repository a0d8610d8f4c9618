"""AlbertConfig: the original `albert_config.json`, validated, plus the paper's sharing ablations.

The keys and their meaning are exactly the original release's, so a released
`albert_config.json` reads unchanged and what we write reads in the original code.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os

from albert.errors import AlbertError

# Activation names accepted in `hidden_act`. "gelu" is the tanh approximation, as in the
# original release (HF transformers calls it "gelu_new"); "gelu_exact" is the erf form.
ACTIVATIONS = ("gelu", "gelu_new", "gelu_exact", "relu", "tanh", "swish", "silu", "linear")

# Which parameters layers in one group share (paper section 4.5, Table 4). "all_shared" is
# ALBERT's default and what `num_hidden_groups` / `inner_group_num` describe; the others are
# the paper's ablations: attention or FFN shared within a group while the other part belongs
# to each layer; "not_shared" gives every layer its own block (the same as G = L).
LAYER_SHARING_MODES = ("all_shared", "shared_attention", "shared_ffn", "not_shared")

# Keys that released configs carry but the model does not use; kept for round trips.
_IGNORED_KEYS = ("net_structure_type", "gap_size", "num_memory_blocks", "layers_to_keep")


class ConfigError(AlbertError):
    """A config value or file that cannot describe an ALBERT model."""


@dataclasses.dataclass
class AlbertConfig:
    """Hyperparameters of an ALBERT model, keyed as the original `albert_config.json`.

    Example:
        >>> config = AlbertConfig.from_json_file("configs/albert_base_v2.json")
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
        if self.num_hidden_layers % self.num_hidden_groups:
            raise ConfigError(
                "`num_hidden_layers` must be divisible by `num_hidden_groups`. Received: "
                f"num_hidden_layers={self.num_hidden_layers}, "
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

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def group_of_layer(self, layer_index: int) -> int:
        """The group whose parameters layer `layer_index` (0-based) uses, as the original."""
        return int(layer_index / self.num_hidden_layers * self.num_hidden_groups)

    # --- Serialisation -----------------------------------------------------------------

    @classmethod
    def from_dict(cls, values: dict) -> AlbertConfig:
        """Builds a config from original-format keys; unknown keys are kept, not used."""
        fields = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in values.items() if k in fields}
        extra = {k: v for k, v in values.items() if k not in fields}
        if "vocab_size" not in known:
            raise ConfigError("The config has no `vocab_size`; is this an albert_config.json?")
        return cls(**known, extra=extra)

    @classmethod
    def from_json_file(cls, path: str) -> AlbertConfig:
        """Reads an `albert_config.json` (local path or any path tf.io.gfile understands)."""
        text = _read_text(path)
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}).") from None
        if not isinstance(values, dict):
            raise ConfigError(f"{path} must hold a JSON object of config keys.")
        return cls.from_dict(values)

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


def _read_text(path: str) -> str:
    if "://" in path:
        import tensorflow as tf  # only for remote paths such as gs://

        if not tf.io.gfile.exists(path):
            raise ConfigError(f"Config file not found: {path}")
        with tf.io.gfile.GFile(path) as f:
            return f.read()
    if not os.path.isfile(path):
        raise ConfigError(f"Config file not found: {path}")
    with open(path, encoding="utf-8") as f:
        return f.read()


def _write_text(path: str, text: str):
    if "://" in path:
        import tensorflow as tf

        with tf.io.gfile.GFile(path, "w") as f:
            f.write(text)
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
