"""Fine-tuning models: an `AlbertBackbone` with one task head.

Each takes the backbone as an argument (so any pretrained backbone plugs in) and returns a
dict of float32 outputs.
"""

import keras
from keras import ops

from albert.config import AlbertConfig
from albert.modeling.backbone import AlbertBackbone
from albert.modeling.serialization import from_model_config, model_config, serializable
from albert.modeling.task_heads import AlbertClassificationHead, AlbertSpanHead, AlbertSquadV2Head


def _backbone(backbone_or_config):
    if isinstance(backbone_or_config, AlbertBackbone):
        return backbone_or_config
    config = backbone_or_config
    if not isinstance(config, AlbertConfig):
        config = AlbertConfig.from_dict(config)
    return AlbertBackbone(config)


@serializable
class AlbertClassifier(keras.Model):
    """Sequence classification / regression (GLUE): pooled output -> dropout -> linear.

    Args:
        backbone: an `AlbertBackbone` (or an `AlbertConfig` to build a fresh one).
        num_labels: number of classes; 1 for regression (STS-B).
        dropout_rate: dropout on the pooled output (the paper's per-task value).

    Returns (call):
        dict with `logits` float32 [B, num_labels].
    """

    def __init__(self, backbone, num_labels, dropout_rate=0.1, **kwargs):
        kwargs.setdefault("name", "albert_classifier")
        super().__init__(**kwargs)
        self.backbone = _backbone(backbone)
        self.config = self.backbone.config
        self.num_labels = num_labels
        self.dropout_rate = dropout_rate
        self.classifier = AlbertClassificationHead(
            self.config, num_labels, dropout_rate, name="classifier"
        )
        self.classifier.build()
        self.built = True

    def call(self, inputs, training=False):
        # Only [CLS] is read: the last block skips every other position (K = 0).
        no_positions = ops.zeros_like(inputs["input_ids"][:, :0])
        outputs = self.backbone(inputs, training=training, output_positions=no_positions)
        pooled = outputs["pooled_output"]
        return {"logits": self.classifier(pooled, training=training)}

    def get_config(self):
        return model_config(
            self,
            backbone=self.config.to_dict(),
            num_labels=self.num_labels,
            dropout_rate=self.dropout_rate,
        )

    @classmethod
    def from_config(cls, config):
        return from_model_config(cls, config)


@serializable
class AlbertMultipleChoice(AlbertClassifier):
    """Multiple choice (RACE): each choice scored by pooled output -> linear(1), softmax over
    the choices.

    Call args:
        inputs: dict of int arrays [B, C, T] (`input_ids`, `input_mask`, `segment_ids`).

    Returns (call):
        dict with `logits` float32 [B, C].
    """

    def __init__(self, backbone, dropout_rate=0.1, **kwargs):
        kwargs.setdefault("name", "albert_multiple_choice")
        super().__init__(backbone, num_labels=1, dropout_rate=dropout_rate, **kwargs)

    def call(self, inputs, training=False):
        input_ids = inputs["input_ids"]
        num_choices, seq_len = ops.shape(input_ids)[1], ops.shape(input_ids)[2]
        flat = {k: ops.reshape(v, (-1, seq_len)) for k, v in inputs.items() if v is not None}
        logits = super().call(flat, training=training)["logits"]  # [B * C, 1]
        return {"logits": ops.reshape(logits, (-1, num_choices))}

    def get_config(self):
        config = super().get_config()
        del config["num_labels"]
        return config


@serializable
class AlbertQuestionAnswering(keras.Model):
    """Extractive QA (SQuAD): v1.1 span head, or the v2 head with answer classification.

    Args:
        backbone: an `AlbertBackbone` (or an `AlbertConfig`).
        version_2_with_negative: use the SQuAD 2.0 head.
        start_n_top, end_n_top: the v2 inference beam.
        dropout_rate: dropout in the v2 answer-class head.

    Call args:
        inputs: dict with `input_ids`, `input_mask`, `segment_ids` [B, T]; for v2 also
            `p_mask` [B, T] and, in training, `start_positions` [B].

    Returns (call):
        v1: dict with `start_logits`, `end_logits` float32 [B, T]. v2: see `AlbertSquadV2Head`.
    """

    def __init__(
        self,
        backbone,
        version_2_with_negative=False,
        start_n_top=5,
        end_n_top=5,
        dropout_rate=0.1,
        **kwargs,
    ):
        kwargs.setdefault("name", "albert_question_answering")
        super().__init__(**kwargs)
        self.backbone = _backbone(backbone)
        self.config = self.backbone.config
        self.version_2_with_negative = version_2_with_negative
        self.start_n_top, self.end_n_top = start_n_top, end_n_top
        self.dropout_rate = dropout_rate
        if version_2_with_negative:
            self.qa_head = AlbertSquadV2Head(
                self.config, start_n_top, end_n_top, dropout_rate, name="squad_v2"
            )
        else:
            self.qa_head = AlbertSpanHead(self.config, name="squad")
        self.qa_head.build()
        self.built = True

    def call(self, inputs, training=False):
        sequence = self.backbone(inputs, training=training)["sequence_output"]
        if not self.version_2_with_negative:
            # As the original, padding stays in the softmax; post-processing only ever picks
            # positions inside the context.
            start_logits, end_logits = self.qa_head(sequence)
            return {"start_logits": start_logits, "end_logits": end_logits}
        start_positions = inputs.get("start_positions") if training else None
        return self.qa_head(sequence, inputs["p_mask"], start_positions, training=training)

    def get_config(self):
        return model_config(
            self,
            backbone=self.config.to_dict(),
            version_2_with_negative=self.version_2_with_negative,
            start_n_top=self.start_n_top,
            end_n_top=self.end_n_top,
            dropout_rate=self.dropout_rate,
        )

    @classmethod
    def from_config(cls, config):
        return from_model_config(cls, config)
