"""Keras saving: every model and layer of this package is registered under "albert".

`model.save("m.keras")` stores each class as `albert>ClassName` with its `get_config()`;
`keras.models.load_model("m.keras")` finds the class by that name, rebuilds it with
`from_config` and loads the weights. A layer that takes an `AlbertConfig` stores it as a dict
and accepts either back (`as_config`).
"""

import keras

from albert.config import AlbertConfig

PACKAGE = "albert"


def serializable(cls):
    """Class decorator: `keras.saving.register_keras_serializable(package="albert")`."""
    return keras.saving.register_keras_serializable(package=PACKAGE)(cls)


def as_config(config):
    """An `AlbertConfig` from itself or from the dict that `get_config` stored."""
    return config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(config)
