"""ALBERT (A Lite BERT) for TensorFlow 2 / Keras 3."""

from albert.config import AlbertConfig, ConfigError
from albert.modeling import AlbertBackbone, AlbertPretrainer

__all__ = ["AlbertBackbone", "AlbertConfig", "AlbertPretrainer", "ConfigError", "load_checkpoint"]


def load_checkpoint(model, path, **kwargs):
    """Loads an official TF1 checkpoint, an HF transformers directory or ours into `model`.

    See `albert.checkpoints.load_checkpoint`.
    """
    from albert.checkpoints import load_checkpoint as _load

    return _load(model, path, **kwargs)
