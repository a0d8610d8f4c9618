"""LayerNorm: the float32 Keras layer that holds gamma/beta, and the op the encoder runs.

`layer_norm_op` is LayerNormalization over the last axis, in float32 whatever the input's
dtype, with its derivative spelled out: without XLA every elementwise op is one pass over
the [B*T, H] activations, and the closed form takes about half the passes that automatic
differentiation of Keras' formulation does. Under XLA they fuse either way.
"""

import keras
from keras import ops

from albert.modeling.serialization import serializable
from albert.modeling.shared_weights import UncastWeights, read, upstream_gradient

# As the original (TF's default for BERT).
EPSILON = 1e-12


@serializable
class LayerNorm(UncastWeights, keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` whose gamma / beta are read as stored (float32) from
    any autocast scope: `layer_norm_op` takes them from a bfloat16 block."""


def layer_norm(name):
    """A LayerNorm layer: float32 always (a bfloat16 variance loses too many bits), with the
    original's variable names gamma / beta."""
    return LayerNorm(epsilon=EPSILON, name=name, dtype="float32")


def layer_norm_op(x, gamma, beta, dtype, epsilon=EPSILON):
    """x [M, H] (any float dtype) -> `dtype` [M, H], normalised over H in float32.

    Args:
        gamma, beta: float32 [H].
    """

    @ops.custom_gradient
    def normalize(x, gamma, beta):
        with keras.name_scope("LayerNorm"):  # the profiler's name for these ops
            x32 = ops.cast(x, "float32")
            mean = ops.mean(x32, axis=-1, keepdims=True)  # [M, 1]
            centered = x32 - mean
            variance = ops.mean(ops.square(centered), axis=-1, keepdims=True)
            inverse_std = ops.rsqrt(variance + epsilon)  # [M, 1]
            normalized = centered * inverse_std  # [M, H]
            y = ops.cast(normalized * gamma + beta, dtype)

        def grad(*args, upstream=None):
            with keras.name_scope("LayerNorm_grad"):
                dy = ops.cast(upstream_gradient(args, upstream), "float32")
                dgamma = ops.sum(dy * normalized, axis=0)
                dbeta = ops.sum(dy, axis=0)
                g = dy * gamma  # d loss / d normalized
                dx = inverse_std * (
                    g
                    - ops.mean(g, axis=-1, keepdims=True)
                    - normalized * ops.mean(g * normalized, axis=-1, keepdims=True)
                )
                return ops.cast(dx, x.dtype), dgamma, dbeta

        return y, grad

    return normalize(x, read(gamma), read(beta))
