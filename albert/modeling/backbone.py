"""AlbertBackbone: embeddings + shared transformer stack + tanh pooler, no task head."""

import keras
from keras import ops

from albert.config import AlbertConfig
from albert.modeling.embeddings import AlbertEmbeddings, truncated_normal
from albert.modeling.encoder import MASK_ADDER, AlbertEncoder
from albert.modeling.serialization import from_model_config, model_config, serializable


def attention_bias_from_mask(input_mask):
    """int [B, T] (1 real, 0 padding) -> float32 [B, 1, 1, T] (0 real, -10000 padding)."""
    mask = ops.cast(input_mask, "float32")
    return (1.0 - mask)[:, None, None, :] * MASK_ADDER


def standardize_inputs(inputs):
    """Accepts a dict with `input_ids` and optional `input_mask` / `segment_ids`."""
    if not isinstance(inputs, dict) or "input_ids" not in inputs:
        raise ValueError(
            "ALBERT models take a dict with at least `input_ids` (and usually `input_mask`, "
            f"`segment_ids`). Received: {type(inputs).__name__}"
        )
    input_ids = inputs["input_ids"]
    input_mask = inputs.get("input_mask")
    segment_ids = inputs.get("segment_ids")
    if input_mask is None:
        input_mask = ops.ones_like(input_ids)
    if segment_ids is None:
        segment_ids = ops.zeros_like(input_ids)
    return input_ids, input_mask, segment_ids


@serializable
class AlbertBackbone(keras.Model):
    """The ALBERT encoder: what every task head sits on.

    Args:
        config: an `AlbertConfig` (or a dict of its keys).

    Call args:
        inputs: dict of int arrays `input_ids` [B, T], `input_mask` [B, T] (1 for real tokens),
            `segment_ids` [B, T]. `input_mask` defaults to all ones, `segment_ids` to zeros.
        training: whether dropout is active.
        output_positions: optional int [B, K] (K may be 0): the positions whose final hidden
            states are wanted. The last transformer block then runs only at those and at
            [CLS], which gives the same values for about 1/L less work.

    Returns:
        dict with `sequence_output` [B, T, H] ([B, K, H] at `output_positions` when given)
        and `pooled_output` [B, H] (tanh of a dense layer over the first token).

    Example:
        >>> backbone = AlbertBackbone(AlbertConfig.from_json_file("albert_tiny"))
        >>> out = backbone({"input_ids": np.ones((2, 7), "int32")})
        >>> out["sequence_output"].shape
        (2, 7, 64)
    """

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "albert_backbone")
        super().__init__(**kwargs)
        # === Layers ===
        self.config = config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(config)
        self.embeddings = AlbertEmbeddings(self.config, name="embeddings")
        self.encoder = AlbertEncoder(self.config, name="encoder")
        self.pooler = keras.layers.Dense(
            self.config.hidden_size,
            activation="tanh",
            kernel_initializer=truncated_normal(self.config),
            name="pooler",
        )
        # === Weights, created now so that checkpoints can be loaded before any call ===
        self.embeddings.build()
        self.encoder.build()
        self.pooler.build((None, self.config.hidden_size))
        self.built = True

    def call(self, inputs, training=False, output_positions=None):
        input_ids, input_mask, segment_ids = standardize_inputs(inputs)
        x = self.embeddings(input_ids, segment_ids, training=training)  # [B, T, H]
        if output_positions is not None:
            # [CLS] first, for the pooler: [B, 1 + K].
            cls = ops.zeros((ops.shape(output_positions)[0], 1), "int32")
            output_positions = ops.concatenate([cls, ops.cast(output_positions, "int32")], 1)
        bias = attention_bias_from_mask(input_mask)
        x = self.encoder(x, bias, training=training, output_positions=output_positions)
        # x: [B, T, H], or [B, 1 + K, H] with output_positions.
        pooled = self.pooler(x[:, 0])  # [B, H]
        sequence = x if output_positions is None else x[:, 1:]
        return {"sequence_output": sequence, "pooled_output": pooled}

    @property
    def word_embeddings(self):
        """The [V, E] input embedding matrix, which the MLM decoder reuses."""
        return self.embeddings.word_embeddings

    # === Config ===
    def get_config(self):
        return model_config(self, config=self.config.to_dict())

    @classmethod
    def from_config(cls, config):
        return from_model_config(cls, config)
