"""Keras saving: every model and layer of this package is registered under "albert".

`model.save("m.keras")` stores each class as `albert>ClassName` with its `get_config()`;
`keras.models.load_model("m.keras")` finds the class by that name, rebuilds it with
`from_config` and loads the weights. A layer that takes an `AlbertConfig` stores it as a dict
and accepts either back (`as_config`).

A model stores its dtype policy (`model_config`) and is rebuilt under it (`from_model_config`):
its layers are made in its constructor, each taking the global policy, so a model saved
under `mixed_bfloat16` and loaded where the policy is float32 keeps every layer's policy.
"""

import keras

from albert.config import AlbertConfig
from albert.keras_version import check_keras_version

PACKAGE = "albert"

# Every model class imports this module: `import albert.modeling` refuses an old Keras.
check_keras_version(keras.__version__)


def serializable(cls):
    """Class decorator: `keras.saving.register_keras_serializable(package="albert")`."""
    return keras.saving.register_keras_serializable(package=PACKAGE)(cls)


def as_config(config):
    """An `AlbertConfig` from itself or from the dict that `get_config` stored."""
    return config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(config)


def model_config(model, **config):
    """`get_config` of a model: its constructor arguments plus its name and dtype policy."""
    return {
        **config,
        "name": model.name,
        "dtype": keras.dtype_policies.serialize(model.dtype_policy),
    }


def from_model_config(cls, config):
    """`cls(**config)` with the stored dtype policy as the global one while the constructor
    makes its layers (then restored); configs without a policy build under the current one."""
    config = dict(config)
    dtype = config.pop("dtype", None)
    if dtype is None:
        return cls(**config)
    policy = keras.dtype_policies.get(dtype)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        return cls(**config, dtype=policy)
    finally:
        keras.config.set_dtype_policy(previous)
