"""The transformer stack with ALBERT's grouped cross-layer parameter sharing.

Layer l (0-based) of L uses group int(l / L * G), exactly as the original; each group holds
`inner_group_num` (attention + FFN) blocks that a layer runs in order. The paper's sharing
ablations (`layer_sharing`) decide, per block part, whether the parameters belong to the group
or to each layer.
"""

import math

import keras
from keras import ops

from albert.modeling import attention_kernel
from albert.modeling.activations import activation
from albert.modeling.dropout import Dropout
from albert.modeling.embeddings import truncated_normal
from albert.modeling.layer_norm import layer_norm, layer_norm_op
from albert.modeling.serialization import as_config, serializable
from albert.modeling.shared_weights import CastOnce, UncastDense, cast_once_kernel

# Added to the attention scores of padding keys before the softmax. The original uses -10000
# rather than -inf so that a row with every key masked still gives finite numbers.
MASK_ADDER = -10000.0


def gather_positions(sequence, positions):
    """sequence [B, T, H], positions int [B, K] -> [B, K, H]."""
    positions = ops.cast(positions, "int32")
    return ops.take_along_axis(sequence, positions[:, :, None], axis=1)


def _scale_folds(scale):
    """Whether multiplying the query kernel and bias by `scale` is exact (a power of two:
    1/sqrt(64) for every published ALBERT); otherwise the scores are scaled after."""
    return math.log2(scale).is_integer()


@serializable
class AlbertAttention(keras.layers.Layer):
    """Post-LN multi-head self-attention: softmax(QK^T/sqrt(D) + mask) V, dense, residual, LN.

    Kernels are 2-D [H, N*D] as in the original checkpoints; head n owns columns n*D..(n+1)*D-1.
    The variables are read as stored (`UncastDense`) and cast once per forward pass for every
    layer that shares them (`shared_weights`).
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config = as_config(config)
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        dense = lambda name: UncastDense(  # noqa: E731
            config.hidden_size, kernel_initializer=truncated_normal(config), name=name
        )
        self.query, self.key, self.value, self.output_dense = (
            dense("query"),
            dense("key"),
            dense("value"),
            dense("output_dense"),
        )
        self.attention_dropout = Dropout(config.attention_probs_dropout_prob)
        self.output_dropout = Dropout(config.hidden_dropout_prob)
        self.layer_norm = layer_norm("LayerNorm")
        self.hidden_size = config.hidden_size
        self.scale = 1.0 / math.sqrt(self.head_size)

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    def build(self, input_shape=None):
        for layer in (self.query, self.key, self.value, self.output_dense):
            layer.build((None, None, self.hidden_size))
        self.layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def shared_weights(self, training=False):
        """The kernels and biases in the compute dtype, cast once for every layer that runs
        this block: Q, K and V side by side ([H, 3H], one matmul: a wider one runs faster
        than three, forward and backward), the query's times 1/sqrt(D) where that is exact.
        The variables stay separate, with the original's names. `training`: whether their
        gradients will be taken (`cast_once_kernel`)."""
        dtype = self.compute_dtype
        qkv = (self.query, self.key, self.value)
        query_scale = self.scale if _scale_folds(self.scale) else 1.0
        scales = (query_scale, 1.0, 1.0)
        return {
            "qkv_kernel": CastOnce([d.kernel for d in qkv], dtype, scales),
            "qkv_bias": CastOnce([d.bias for d in qkv], dtype, scales),
            "output_kernel": cast_once_kernel(self.output_dense.kernel, dtype, training),
            "output_bias": CastOnce([self.output_dense.bias], dtype),
        }

    def _heads(self, y, length):
        """y [B*length, H] -> [B, N, length, D]."""
        y = ops.reshape(y, (-1, length, self.num_heads, self.head_size))
        return ops.transpose(y, (0, 2, 1, 3))

    def _context(self, q, k, v, num_queries, seq_len, attention_bias, training):
        """The explicit kernel: q [B*K, H], k and v [B*T, H] -> context [B*K, H]."""
        dtype = self.compute_dtype
        q = self._heads(q, num_queries)  # [B, N, K, D]
        k, v = self._heads(k, seq_len), self._heads(v, seq_len)  # [B, N, T, D]
        if not _scale_folds(self.scale):
            q = q * ops.cast(self.scale, dtype)
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))  # [B, N, K, T]
        # Softmax in float32 whatever the compute dtype: bfloat16 sums lose the tail mass.
        scores = ops.cast(scores, "float32") + ops.cast(attention_bias, "float32")
        probs = ops.cast(ops.softmax(scores, axis=-1), dtype)
        probs = self.attention_dropout(probs, training=training)
        context = ops.matmul(probs, v)  # [B, N, K, D]
        return ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (-1, self.hidden_size))

    def _fused_context(self, q, k, v, num_queries, seq_len, attention_bias):
        """The fused kernel (`attention_kernel`), no dropout: the same shapes as `_context`."""
        heads = lambda y, length: ops.reshape(  # noqa: E731
            y, (-1, length, self.num_heads, self.head_size)
        )  # [B, length, N, D]: the fused kernel's layout, no transpose
        q, k, v = heads(q, num_queries), heads(k, seq_len), heads(v, seq_len)
        # cuDNN takes a bias of the scores' last two dims only: [B, 1, 1, T] -> [B, 1, K, T].
        bias = ops.cast(attention_bias, self.compute_dtype)
        bias = ops.broadcast_to(bias, (ops.shape(q)[0], 1, num_queries, seq_len))
        scale = 1.0 if _scale_folds(self.scale) else self.scale
        context = ops.dot_product_attention(q, k, v, bias=bias, scale=scale)  # [B, K, N, D]
        return ops.reshape(context, (-1, self.hidden_size))

    def call(self, x, attention_bias, training=False, query_positions=None, weights=None):
        """x: [B, T, H]; attention_bias: float32 [B, 1, 1, T], 0 or MASK_ADDER.

        With `query_positions` (int [B, K]) only those positions attend (to every key) and
        the output is [B, K, H]; without, K = T. `weights`: this block's `shared_weights()`
        (made here when not given).
        """
        weights = weights or self.shared_weights(training)
        dtype, h = self.compute_dtype, self.hidden_size
        x = ops.cast(x, dtype)
        seq_len = ops.shape(x)[1]
        rows = ops.reshape(x, (-1, h))  # [B*T, H]
        kernel, bias = weights["qkv_kernel"].use(), weights["qkv_bias"].use()  # [H, 3H], [3H]
        if query_positions is None:
            num_queries, queries = seq_len, rows
            # Split, not index: without XLA the gradient of each index is a full-size
            # scatter of zeros; split's gradient is one concatenation.
            q, k, v = ops.split(ops.matmul(rows, kernel) + bias, 3, axis=-1)  # [B*T, H] each
        else:
            num_queries = ops.shape(query_positions)[1]
            queries = ops.reshape(gather_positions(x, query_positions), (-1, h))  # [B*K, H]
            (q_kernel, kv_kernel), (q_bias, kv_bias) = (
                ops.split(w, [h], -1) for w in (kernel, bias)
            )
            q = ops.matmul(queries, q_kernel) + q_bias  # [B*K, H]
            k, v = ops.split(ops.matmul(rows, kv_kernel) + kv_bias, 2, axis=-1)
        dropout = training and self.attention_dropout.rate > 0
        if attention_kernel.fused(num_queries, seq_len) and not dropout:
            context = self._fused_context(q, k, v, num_queries, seq_len, attention_bias)
        else:
            context = self._context(q, k, v, num_queries, seq_len, attention_bias, training)
        out = weights["output_kernel"].matmul(context) + weights["output_bias"].use()
        out = self.output_dropout(out, training=training)
        ln = self.layer_norm
        out = layer_norm_op(out + queries, ln.gamma, ln.beta, dtype, ln.epsilon)
        return ops.reshape(out, (-1, num_queries, h))


@serializable
class AlbertFeedForward(keras.layers.Layer):
    """Post-LN FFN: dense I with the config's activation, dense H, dropout, residual, LN.

    As `AlbertAttention`, the variables are cast once per forward pass (`shared_weights`).
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config = as_config(config)
        init = truncated_normal(config)
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.intermediate = UncastDense(
            config.intermediate_size,
            activation=activation(config.hidden_act),
            kernel_initializer=init,
            name="intermediate",
        )
        self.output_dense = UncastDense(
            config.hidden_size, kernel_initializer=init, name="output_dense"
        )
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.layer_norm = layer_norm("LayerNorm_1")

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    def build(self, input_shape=None):
        self.intermediate.build((None, None, self.hidden_size))
        self.output_dense.build((None, None, self.intermediate_size))
        self.layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def shared_weights(self, training=False):
        """The kernels and biases in the compute dtype, cast once for every layer that runs
        this block. `training`: whether their gradients will be taken (the output kernel
        [I, H] is a `TallKernel` then, in float32)."""
        dtype = self.compute_dtype
        return {
            "intermediate_kernel": cast_once_kernel(self.intermediate.kernel, dtype, training),
            "intermediate_bias": CastOnce([self.intermediate.bias], dtype),
            "output_kernel": cast_once_kernel(self.output_dense.kernel, dtype, training),
            "output_bias": CastOnce([self.output_dense.bias], dtype),
        }

    def call(self, x, training=False, weights=None):
        """x [B, T, H] -> [B, T, H]. `weights`: this block's `shared_weights()`."""
        weights = weights or self.shared_weights(training)
        dtype, h = self.compute_dtype, self.hidden_size
        x = ops.cast(x, dtype)
        rows = ops.reshape(x, (-1, h))  # [B*T, H]
        # 2-D matmuls: TensorFlow's CPU graph optimizer fuses each with its bias add.
        hidden = weights["intermediate_kernel"].matmul(rows)
        hidden = self.intermediate.activation(hidden + weights["intermediate_bias"].use())
        out = weights["output_kernel"].matmul(hidden) + weights["output_bias"].use()  # [B*T, H]
        out = self.dropout(out, training=training)  # [B*T, H]
        ln = self.layer_norm
        out = layer_norm_op(out + rows, ln.gamma, ln.beta, dtype, ln.epsilon)
        return ops.reshape(out, ops.shape(x))


def block_owners(config):
    """Which parameter set each (layer, inner block) uses.

    Returns:
        (attention_owner, ffn_owner): two lists over layers of the owner index (a group
        index, or a layer index when that part is not shared).
    """
    groups = [config.group_of_layer(layer) for layer in range(config.num_hidden_layers)]
    layers = list(range(config.num_hidden_layers))
    mode = config.layer_sharing
    attention_owner = groups if mode in ("all_shared", "shared_attention") else layers
    ffn_owner = groups if mode in ("all_shared", "shared_ffn") else layers
    return attention_owner, ffn_owner


@serializable
class AlbertEncoder(keras.layers.Layer):
    """L layers over `num_hidden_groups` (or per-layer) parameter sets of inner blocks.

    Attributes:
        attention_blocks: attention_blocks[owner][inner] is an `AlbertAttention`.
        ffn_blocks: ffn_blocks[owner][inner] is an `AlbertFeedForward`.
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config = as_config(config)
        self.attention_owner, self.ffn_owner = block_owners(config)
        inner = range(config.inner_group_num)
        self.attention_blocks = [
            [AlbertAttention(config, name=f"group_{o}_inner_group_{i}_attention") for i in inner]
            for o in range(max(self.attention_owner) + 1)
        ]
        self.ffn_blocks = [
            [AlbertFeedForward(config, name=f"group_{o}_inner_group_{i}_ffn") for i in inner]
            for o in range(max(self.ffn_owner) + 1)
        ]

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    def build(self, input_shape=None):
        for blocks in self.attention_blocks + self.ffn_blocks:
            for block in blocks:
                block.build()
        self.built = True

    def call(self, x, attention_bias, training=False, output_positions=None):
        """x [B, T, H] -> [B, T, H], or [B, K, H] at `output_positions` (int [B, K]).

        With `output_positions` the last block computes only those K rows: its keys and
        values still come from every position, and no other row of its output can reach
        them, so the K rows equal the full pass's (about 1/L of the encoder's work saved when
        K << T, e.g. pretraining's masked positions).
        """
        num_layers, num_inner = self.config.num_hidden_layers, self.config.inner_group_num
        # Each parameter set cast to the compute dtype once, for all the layers that share it.
        attention_weights = [
            [b.shared_weights(training) for b in bs] for bs in self.attention_blocks
        ]
        ffn_weights = [[b.shared_weights(training) for b in bs] for bs in self.ffn_blocks]
        for layer in range(num_layers):
            owner_a, owner_f = self.attention_owner[layer], self.ffn_owner[layer]
            for i in range(num_inner):
                last = layer == num_layers - 1 and i == num_inner - 1
                x = self.attention_blocks[owner_a][i](
                    x,
                    attention_bias,
                    training=training,
                    query_positions=output_positions if last else None,
                    weights=attention_weights[owner_a][i],
                )
                x = self.ffn_blocks[owner_f][i](
                    x, training=training, weights=ffn_weights[owner_f][i]
                )
        return x
