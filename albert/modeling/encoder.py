"""The transformer stack with ALBERT's grouped cross-layer parameter sharing.

Layer l (0-based) of L uses group int(l / L * G), exactly as the original; each group holds
`inner_group_num` (attention + FFN) blocks that a layer runs in order. The paper's sharing
ablations (`layer_sharing`) decide, per block part, whether the parameters belong to the group
or to each layer.
"""

import math

import keras
from keras import ops

from albert.modeling.dropout import Dropout
from albert.modeling.embeddings import layer_norm, truncated_normal
from albert.modeling.serialization import as_config, serializable

# Added to the attention scores of padding keys before the softmax. The original uses -10000
# rather than -inf so that a row with every key masked still gives finite numbers.
MASK_ADDER = -10000.0


def gather_positions(sequence, positions):
    """sequence [B, T, H], positions int [B, K] -> [B, K, H]."""
    positions = ops.cast(positions, "int32")
    return ops.take_along_axis(sequence, positions[:, :, None], axis=1)


def activation(name):
    if name in ("gelu", "gelu_new"):
        return lambda x: keras.activations.gelu(x, approximate=True)
    if name == "gelu_exact":
        return lambda x: keras.activations.gelu(x, approximate=False)
    if name == "swish":
        name = "silu"
    return keras.activations.get(name)


@serializable
class AlbertAttention(keras.layers.Layer):
    """Post-LN multi-head self-attention: softmax(QK^T/sqrt(D) + mask) V, dense, residual, LN.

    Kernels are 2-D [H, N*D] as in the original checkpoints; head n owns columns n*D..(n+1)*D-1.
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config = as_config(config)
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        dense = lambda name: keras.layers.Dense(  # noqa: E731
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

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    def build(self, input_shape=None):
        for layer in (self.query, self.key, self.value, self.output_dense):
            layer.build((None, None, self.hidden_size))
        self.layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def _project_heads(self, x, dense_layers):
        """x [B, T, H] through several of the H->H projections in one matmul (a wider one
        runs faster than three, forward and backward; the variables stay separate, with the
        original's names).

        Returns:
            one [B, N, T, D] tensor per layer.
        """
        dtype = self.compute_dtype
        kernel = ops.concatenate([ops.cast(d.kernel, dtype) for d in dense_layers], axis=1)
        bias = ops.concatenate([ops.cast(d.bias, dtype) for d in dense_layers], axis=0)
        y = ops.matmul(x, kernel) + bias  # [B, T, len * H]
        batch, seq_len = ops.shape(x)[0], ops.shape(x)[1]
        heads = []
        # Split, not index: without XLA the gradient of each index is a full-size scatter of
        # zeros (~13% of a bfloat16 step on CPU); split's gradient is one concatenation.
        for part in ops.split(y, len(dense_layers), axis=-1):  # [B, T, H] each
            part = ops.reshape(part, (batch, seq_len, self.num_heads, self.head_size))
            heads.append(ops.transpose(part, (0, 2, 1, 3)))  # [B, N, T, D]
        return heads

    def call(self, x, attention_bias, training=False, query_positions=None):
        """x: [B, T, H]; attention_bias: float32 [B, 1, 1, T], 0 or MASK_ADDER.

        With `query_positions` (int [B, K]) only those positions attend (to every key) and
        the output is [B, K, H]; without, K = T.
        """
        if query_positions is None:
            queries = x
            q, k, v = self._project_heads(x, (self.query, self.key, self.value))
        else:
            queries = gather_positions(x, query_positions)
            (q,) = self._project_heads(queries, (self.query,))  # [B, N, K, D]
            k, v = self._project_heads(x, (self.key, self.value))
        q = q * ops.cast(1.0 / math.sqrt(self.head_size), q.dtype)
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))  # [B, N, K, T]
        # Softmax in float32 whatever the compute dtype: bfloat16 sums lose the tail mass.
        # (Keras autocasts float call arguments to the compute dtype, hence the cast back.)
        scores = ops.cast(scores, "float32") + ops.cast(attention_bias, "float32")
        probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        probs = self.attention_dropout(probs, training=training)
        context = ops.matmul(probs, v)  # [B, N, K, D]
        context = ops.transpose(context, (0, 2, 1, 3))  # [B, K, N, D]
        batch, num_queries = ops.shape(queries)[0], ops.shape(queries)[1]
        context = ops.reshape(context, (batch, num_queries, self.hidden_size))  # [B, K, H]
        out = self.output_dropout(self.output_dense(context), training=training)
        return ops.cast(self.layer_norm(out + queries), self.compute_dtype)


@serializable
class AlbertFeedForward(keras.layers.Layer):
    """Post-LN FFN: dense I with the config's activation, dense H, dropout, residual, LN."""

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config = as_config(config)
        init = truncated_normal(config)
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.intermediate = keras.layers.Dense(
            config.intermediate_size,
            activation=activation(config.hidden_act),
            kernel_initializer=init,
            name="intermediate",
        )
        self.output_dense = keras.layers.Dense(
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

    def call(self, x, training=False):
        out = self.output_dense(self.intermediate(x))  # [B, T, I] -> [B, T, H]
        out = self.dropout(out, training=training)
        return ops.cast(self.layer_norm(out + x), self.compute_dtype)


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
        for layer in range(num_layers):
            attention = self.attention_blocks[self.attention_owner[layer]]
            ffn = self.ffn_blocks[self.ffn_owner[layer]]
            for i in range(num_inner):
                last = layer == num_layers - 1 and i == num_inner - 1
                positions = output_positions if last else None
                x = attention[i](x, attention_bias, training=training, query_positions=positions)
                x = ffn[i](x, training=training)
        return x
