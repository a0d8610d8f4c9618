"""Keras 3 ALBERT, written with `keras.ops` only so it runs on any Keras backend."""

from albert.modeling.backbone import AlbertBackbone
from albert.modeling.heads import AlbertMaskedLMHead, AlbertSentenceOrderHead
from albert.modeling.pretrainer import AlbertPretrainer
from albert.modeling.task_models import (
    AlbertClassifier,
    AlbertMultipleChoice,
    AlbertQuestionAnswering,
)

__all__ = [
    "AlbertBackbone",
    "AlbertClassifier",
    "AlbertMaskedLMHead",
    "AlbertMultipleChoice",
    "AlbertPretrainer",
    "AlbertQuestionAnswering",
    "AlbertSentenceOrderHead",
]
