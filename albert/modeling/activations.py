"""Activations by the config's `hidden_act` name.

The original's "gelu" is the tanh approximation 0.5 x (1 + tanh(c (x + a x^3))). `gelu_tanh`
computes the same function as x * sigmoid(2 c (x + a x^3)) and spells out its derivative:
without XLA each elementwise op is one pass over the [B*T, I] activations, and automatic
differentiation of the textbook form takes about twice as many passes as the closed form
(13 instead of 23 forward and backward). Under XLA the passes fuse either way.
"""

import math

import keras
from keras import ops

from albert.modeling.shared_weights import upstream_gradient

_C = math.sqrt(2.0 / math.pi)  # c
_A = 0.044715  # a


@ops.custom_gradient
def gelu_tanh(x):
    """0.5 x (1 + tanh(c (x + a x^3))) = x sigmoid(z), z = 2 c x (1 + a x^2); any shape."""
    with keras.name_scope("Gelu"):  # the profiler's name for these ops
        x2 = ops.square(x)
        s = ops.sigmoid(x * ((2 * _C) + (2 * _C * _A) * x2))
        y = x * s

    def grad(*args, upstream=None):
        upstream = upstream_gradient(args, upstream)
        with keras.name_scope("Gelu_grad"):
            # dy/dx = s + x s (1 - s) dz/dx = s + y (1 - s) (2 c + 6 c a x^2)
            dz_dx = (2 * _C) + (6 * _C * _A) * x2
            return upstream * (s + y * (1.0 - s) * dz_dx)

    return y, grad


def activation(name):
    """The function for a config's `hidden_act`."""
    if name in ("gelu", "gelu_new"):
        return gelu_tanh
    if name == "gelu_exact":
        return lambda x: keras.activations.gelu(x, approximate=False)
    if name == "swish":
        name = "silu"
    return keras.activations.get(name)
