"""Pretraining heads: masked LM (gathered, tied to the word embeddings) and sentence order."""

import keras
from keras import ops

from albert.modeling.activations import activation
from albert.modeling.embeddings import truncated_normal
from albert.modeling.encoder import gather_positions
from albert.modeling.layer_norm import layer_norm
from albert.modeling.serialization import as_config, serializable
from albert.modeling.shared_weights import UncastWeights


@serializable
class AlbertMaskedLMHead(UncastWeights, keras.layers.Layer):
    """Dense H->E with the config's activation, LayerNorm(E), then logits over the vocabulary
    through the transposed word embeddings plus `output_bias`.

    Only the masked positions are transformed: P is ~15% of T, so this saves the
    [B, T, V] logits the full-sequence head would compute.

    Call args:
        sequence_output: [B, T, H], or [B, P, H] already at the masked positions.
        masked_lm_positions: int [B, P], or None when `sequence_output` is already gathered.
        word_embeddings: the backbone's [V, E] matrix.

    Returns:
        float32 logits [B, P, V].
    """

    def __init__(self, config, **kwargs):
        # Not autocast: under a mixed policy the word embeddings it is passed would be rounded
        # to the compute dtype before the float32 logits (`transform_dense` still is).
        super().__init__(**{"autocast": False, **kwargs})
        self.config = config = as_config(config)
        self.dense = keras.layers.Dense(
            config.embedding_size,
            activation=activation(config.hidden_act),
            kernel_initializer=truncated_normal(config),
            name="transform_dense",
        )
        self.layer_norm = layer_norm("transform_LayerNorm")

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    def build(self, input_shape=None):
        self.dense.build((None, None, self.config.hidden_size))
        self.layer_norm.build((None, None, self.config.embedding_size))
        self.output_bias = self.add_weight(
            shape=(self.config.vocab_size,), initializer="zeros", name="output_bias"
        )
        self.built = True

    def call(self, sequence_output, masked_lm_positions, word_embeddings):
        x = sequence_output
        if masked_lm_positions is not None:
            x = gather_positions(sequence_output, masked_lm_positions)  # [B, P, H]
        x = self.layer_norm(self.dense(x))  # float32 [B, P, E]
        # Logits in float32: the softmax over V=30000 is where low precision hurts most.
        logits = ops.matmul(x, ops.transpose(ops.cast(word_embeddings, "float32")))  # [B, P, V]
        return logits + ops.cast(self.output_bias, "float32")


@serializable
class AlbertSentenceOrderHead(UncastWeights, keras.layers.Layer):
    """logits = pooled_output . W^T + b with W [2, H] (`cls/seq_relationship`)."""

    def __init__(self, config, num_classes=2, **kwargs):
        super().__init__(**kwargs)
        self.config = as_config(config)
        self.num_classes = num_classes

    def get_config(self):
        return {
            **super().get_config(),
            "config": self.config.to_dict(),
            "num_classes": self.num_classes,
        }

    def build(self, input_shape=None):
        self.output_weights = self.add_weight(
            shape=(self.num_classes, self.config.hidden_size),
            initializer=truncated_normal(self.config),
            name="output_weights",
        )
        self.output_bias = self.add_weight(
            shape=(self.num_classes,), initializer="zeros", name="output_bias"
        )
        self.built = True

    def call(self, pooled_output):
        logits = ops.matmul(
            ops.cast(pooled_output, "float32"),
            ops.transpose(ops.cast(self.output_weights, "float32")),
        )
        return logits + ops.cast(self.output_bias, "float32")  # float32 [B, 2]
