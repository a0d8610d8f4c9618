"""Which kernel computes softmax(QK^T + bias) V in `AlbertAttention`.

    explicit  scores, a float32 softmax and the product with V as separate ops (every backend)
    fused     `keras.ops.dot_product_attention`: under JAX on a GPU, cuDNN's fused (flash)
              attention, which never writes the [B, N, T, T] scores to memory; it accumulates
              the scores and the softmax in float32 as the explicit path does

`auto` (the default) is fused under Keras' JAX backend on a GPU, explicit everywhere else:
TensorFlow's `dot_product_attention` is the explicit computation with a softmax in the
compute dtype (bfloat16 would lose the tail mass), and on TPUs Keras' Splash path drops a
bias and takes a mask from the first example only. Training with attention dropout always
runs explicit (the fused kernel has no dropout). `ALBERT_ATTENTION=explicit|fused` overrides
the choice.
"""

import os

import keras

ATTENTION_VARIABLE = "ALBERT_ATTENTION"
CHOICES = ("auto", "explicit", "fused")
_setting = None  # set_kernel's value; None: the environment's, else auto


def set_kernel(kernel):
    """Overrides the choice for this process: "auto", "explicit" or "fused" (None: unset)."""
    global _setting
    if kernel is not None and kernel not in CHOICES:
        raise ValueError(f"attention kernel must be one of {CHOICES}; got {kernel!r}")
    _setting = kernel


def fused(query_length=None, key_length=None):
    """Whether `AlbertAttention` runs the fused kernel (where it has no dropout to apply).

    `auto` also keeps to the lengths cuDNN trains with a bias: even query and key lengths
    (known ones; an odd length would fail there and fall back with a logged traceback)."""
    kernel = _setting or os.environ.get(ATTENTION_VARIABLE) or "auto"
    if kernel not in CHOICES:
        raise ValueError(f"{ATTENTION_VARIABLE} must be one of {CHOICES}; got {kernel!r}")
    if kernel != "auto":
        return kernel == "fused"
    odd = any(isinstance(n, int) and n % 2 for n in (query_length, key_length))
    return not odd and keras.backend.backend() == "jax" and _jax_platform() == "gpu"


def _jax_platform():
    import jax  # only reached under Keras' JAX backend

    device = jax.config.jax_default_device or jax.devices()[0]  # `jax.default_device` wins
    return device if isinstance(device, str) else device.platform
