"""AlbertPretrainer: the backbone with the masked-LM and sentence-order heads."""

import keras

from albert.config import AlbertConfig
from albert.modeling.backbone import AlbertBackbone
from albert.modeling.heads import AlbertMaskedLMHead, AlbertSentenceOrderHead
from albert.modeling.serialization import from_model_config, model_config, serializable


@serializable
class AlbertPretrainer(keras.Model):
    """Backbone + MLM head (tied to the word embeddings) + SOP head, as the original.

    Args:
        config: an `AlbertConfig` (or a dict of its keys).

    Call args:
        inputs: dict of int arrays `input_ids`, `input_mask`, `segment_ids` [B, T] and
            `masked_lm_positions` [B, P].
        training: whether dropout is active.
        masked_positions_only: run the last transformer block only at [CLS] and the masked
            positions, which is all the two losses read (same logits, ~1/L less encoder
            work); `sequence_output` is then [B, P, H] at the masked positions.

    Returns:
        dict with `sequence_output` [B, T, H], `pooled_output` [B, H], `mlm_logits`
        float32 [B, P, V] (when `masked_lm_positions` is given) and `sop_logits` float32
        [B, 2].

    Example:
        >>> model = AlbertPretrainer(AlbertConfig.from_json_file("albert_tiny"))
        >>> out = model({"input_ids": ids, "input_mask": mask, "segment_ids": seg,
        ...              "masked_lm_positions": positions})
    """

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "albert_pretrainer")
        super().__init__(**kwargs)
        # === Layers (weights are created by each constructor) ===
        config = config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(config)
        self.config = config
        self.backbone = AlbertBackbone(config)
        self.masked_lm_head = AlbertMaskedLMHead(config, name="masked_lm_head")
        self.sentence_order_head = AlbertSentenceOrderHead(config, name="sentence_order_head")
        self.masked_lm_head.build()
        self.sentence_order_head.build()
        self.built = True

    def call(self, inputs, training=False, masked_positions_only=False):
        positions = inputs.get("masked_lm_positions")
        if masked_positions_only and positions is None:
            raise ValueError("masked_positions_only=True needs `masked_lm_positions`.")
        gathered = positions if masked_positions_only else None
        outputs = dict(self.backbone(inputs, training=training, output_positions=gathered))
        if positions is not None:
            outputs["mlm_logits"] = self.masked_lm_head(
                outputs["sequence_output"],
                None if masked_positions_only else positions,
                self.backbone.word_embeddings,
            )
        outputs["sop_logits"] = self.sentence_order_head(outputs["pooled_output"])
        return outputs

    # === Config ===
    def get_config(self):
        return model_config(self, config=self.config.to_dict())

    @classmethod
    def from_config(cls, config):
        return from_model_config(cls, config)
