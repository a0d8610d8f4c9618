"""Float32 variables that L layers share, cast to the compute dtype once per forward pass.

A Keras layer under a mixed dtype policy casts each float32 variable it reads, on every call;
ALBERT's L layers share one set of weights, so without more each kernel is cast L times a
step (and a fused Q/K/V kernel concatenated L times). `CastOnce` casts and packs the
variables once; each layer then takes `use()`, whose gradient goes to the float32 variables
as if that layer had cast them itself: the L per-layer gradients still add up in float32,
exactly as before, and no bfloat16 sum of them is ever formed.

Their variables are created with `autocast=False` (`UncastDense`, and the float32
LayerNorm): a read gives the stored float32 value inside any autocast scope, so `CastOnce` is
the only cast, whichever layer or model the encoder is called from.
"""

import keras
from keras import ops

from albert.modeling.serialization import serializable


class UncastWeights:
    """Mixin for a Keras layer: its variables are made with `autocast=False`, so a read gives
    the stored value inside any autocast scope."""

    def add_weight(self, *args, **kwargs):
        return super().add_weight(*args, **{**kwargs, "autocast": False})


@serializable
class UncastDense(UncastWeights, keras.layers.Dense):
    """`keras.layers.Dense` whose kernel and bias are read as stored (float32) under a mixed
    dtype policy, for the encoder's blocks, which cast them once per forward pass."""


def upstream_gradient(args, upstream):
    """The upstream gradient a `keras.ops.custom_gradient` function's `grad` receives:
    TensorFlow passes it positionally, JAX by name."""
    if upstream is None:
        (upstream,) = args
    return upstream


class CastOnce:
    """`variables` cast to `dtype`, each times its scale, side by side on the last axis.

    Args:
        variables: float32 values with equal shapes but the last axis (kernels [in, out_i] or
            biases [out_i]), read without autocasting.
        dtype: the compute dtype.
        scales: optional multipliers, one per variable; powers of two keep it exact.
    """

    def __init__(self, variables, dtype, scales=None):
        self.sources = [read(v) for v in variables]
        self.scales = list(scales or [1.0] * len(self.sources))
        self.sizes = [v.shape[-1] for v in self.sources]
        parts = [
            _scaled(ops.cast(v, dtype), s) for v, s in zip(self.sources, self.scales, strict=True)
        ]
        self.packed = parts[0] if len(parts) == 1 else ops.concatenate(parts, axis=-1)

    def use(self):
        """The packed tensor [..., sum out_i] for one more use."""
        sizes, scales = self.sizes, self.scales

        @ops.custom_gradient
        def reuse(packed, *sources):
            def grad(*args, upstream=None):
                upstream = upstream_gradient(args, upstream)
                with keras.name_scope("CastOnce_grad"):
                    parts = [upstream]
                    if len(sizes) > 1:
                        bounds = [sum(sizes[: i + 1]) for i in range(len(sizes) - 1)]
                        parts = ops.split(upstream, bounds, axis=-1)
                    grads = [
                        ops.cast(_scaled(part, scale), source.dtype)
                        for part, scale, source in zip(parts, scales, sources, strict=True)
                    ]
                    return (None, *grads)

            return packed, grad

        return reuse(self.packed, *self.sources)

    def matmul(self, x):
        """x [M, I] @ the packed kernel [I, O] -> [M, O]."""
        return ops.matmul(x, self.use())


class TallKernel:
    """One float32 kernel [I, O] with I > O (the FFN's output dense, [4H, H]) that L layers
    multiply by, with the same forward product as `CastOnce([kernel], "float32")`; each use's
    weight gradient is formed as dy^T x, [O, I], and the L of them are summed before one
    transpose to [I, O].

    Why: Eigen's GEMM, which XLA:CPU and TensorFlow run for float32, forms the [4H, H] product
    x^T dy about a quarter slower than the [H, 4H] one (for ALBERT-base on a 2-core AVX2 Zen 2,
    104 against 138 GFLOP/s under XLA: `benchmarks/bench_gemm_layout.py`); XLA folds each use's
    transpose into its product, so only the summed gradient is transposed, once a step.
    """

    def __init__(self, variable):
        self.packed = read(variable)  # [I, O], what the forward product reads
        self.sources = [ops.transpose(read(variable))]  # [O, I]: where the gradients are summed

    def matmul(self, x):
        """x [M, I] @ kernel [I, O] -> [M, O]."""

        @ops.custom_gradient
        def product(x, packed, kernel_t):
            def grad(*args, upstream=None):
                dy = upstream_gradient(args, upstream)  # [M, O]
                with keras.name_scope("TallKernel_grad"):
                    dx = ops.matmul(dy, ops.transpose(packed))  # [M, I]
                    return dx, None, ops.matmul(ops.transpose(dy), x)  # d kernel^T [O, I]

            return ops.matmul(x, packed), grad

        return product(x, self.packed, self.sources[0])


def cast_once_kernel(variable, dtype, training):
    """The shared weights of one kernel [I, O]: a `TallKernel` where its gradient is formed
    faster that way (training in float32 with I > O), else `CastOnce([variable], dtype)`. Both
    give the same forward product; a tall kernel outside training stays a plain `CastOnce`, so
    that inference reads no transposed copy."""
    rows, cols = variable.shape
    if training and dtype == "float32" and rows > cols:
        return TallKernel(variable)
    return CastOnce([variable], dtype)


def read(variable):
    """The variable's value as a tensor: a read, not the variable itself (a TensorFlow custom
    gradient must not see a variable among its inputs). No cast op: the dtype is its own."""
    return ops.cast(variable, variable.dtype)


def _scaled(x, scale):
    return x if scale == 1.0 else x * ops.cast(scale, x.dtype)
