"""Activations by the config's `hidden_act` name.

The original's "gelu" is the tanh approximation 0.5 x (1 + tanh(c (x + a x^3))). `gelu_tanh`
computes the same function as x * sigmoid(2 c (x + a x^3)) and spells out its derivative:
without XLA each elementwise op is one pass over the [B*T, I] activations, and automatic
differentiation of the textbook form takes about twice as many passes as the closed form
(13 instead of 23 forward and backward). Under XLA the passes fuse either way.

A bfloat16 (or float16) input is computed in float32 and the result rounded once, which is
also closer to the exact value: TensorFlow's CPU kernels run the sigmoid and the products of a
bfloat16 tensor slower than of a float32 one (a [1024, 3072] GELU: 8.6 ms in bfloat16, 5.4 ms
in float32 with both casts, on an Intel Xeon with AMX). The backward pass reads two of the
forward's tensors, kept in the input's dtype as before, so training holds no more memory; in
inference nothing reads them and TensorFlow drops those casts from the graph.
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
    dtype = x.dtype
    with keras.name_scope("Gelu"):  # the profiler's name for these ops
        x32 = ops.cast(x, "float32")  # a no-op for float32
        x2 = ops.square(x32)
        s = ops.sigmoid(x32 * ((2 * _C) + (2 * _C * _A) * x2))
        y = ops.cast(x32 * s, dtype)
        # What the backward pass reads, in the input's dtype (the memory it held before).
        x2, s = ops.cast(x2, dtype), ops.cast(s, dtype)

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
