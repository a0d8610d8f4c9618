"""Keras 3 ALBERT, written with `keras.ops` only so it runs on any Keras backend."""

from albert.modeling.backbone import AlbertBackbone
from albert.modeling.heads import AlbertMaskedLMHead, AlbertSentenceOrderHead
from albert.modeling.pretrainer import AlbertPretrainer

__all__ = ["AlbertBackbone", "AlbertMaskedLMHead", "AlbertPretrainer", "AlbertSentenceOrderHead"]
