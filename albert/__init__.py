"""ALBERT (A Lite BERT) for TensorFlow 2 / Keras 3."""

import importlib

__version__ = "0.1.0"  # the one version string; pyproject.toml reads it

from albert import configs  # light (os and albert.config): `albert.configs.path(...)` works
from albert.config import AlbertConfig, ConfigError

__all__ = [
    "AlbertBackbone",
    "AlbertConfig",
    "AlbertPretrainer",
    "ConfigError",
    "configs",
    "load_checkpoint",
]

# Keras (and with it TensorFlow) loads only when a model class is first used, so that
# `albert.tokenization` and `albert.data.pretraining` stay light in worker processes.
_LAZY_ATTRIBUTES = {"AlbertBackbone": "albert.modeling", "AlbertPretrainer": "albert.modeling"}


def __getattr__(name):
    if name in _LAZY_ATTRIBUTES:
        return getattr(importlib.import_module(_LAZY_ATTRIBUTES[name]), name)
    raise AttributeError(f"module 'albert' has no attribute {name!r}")


def load_checkpoint(model, path, **kwargs):
    """Loads an official TF1 checkpoint, an HF transformers directory or ours into `model`.

    See `albert.checkpoints.load_checkpoint`.
    """
    from albert.checkpoints import load_checkpoint as _load

    return _load(model, path, **kwargs)
