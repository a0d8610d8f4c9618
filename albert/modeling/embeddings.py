"""Factorized embeddings: word [V,E] + position [P,E] + token type [T,E], LayerNorm, E->H.

Shape letters used in this package: B batch, T sequence length, P masked predictions per
sequence, V vocabulary, E embedding size, H hidden size, N attention heads, D head size
(H = N * D), I intermediate (FFN) size.
"""

import keras
from keras import ops

from albert.modeling.dropout import Dropout
from albert.modeling.layer_norm import layer_norm
from albert.modeling.serialization import as_config, serializable

# Token type tables up to this size are read by a select per type (`_token_types`).
MAX_SELECTED_TYPES = 16


def truncated_normal(config):
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def _check_length(seq_len, max_positions):
    """One error for a sequence longer than the position table, on every backend: slicing
    the table stops at its end, and the sum then fails with a backend-specific shape error
    (TensorFlow's InvalidArgumentError, JAX's TypeError). A length unknown until run time (a
    TensorFlow graph) is not checked here."""
    if isinstance(seq_len, int) and seq_len > max_positions:
        raise ValueError(
            f"Sequence length {seq_len} exceeds max_position_embeddings={max_positions} "
            "(the position table's size): shorten the inputs or use a config with more positions."
        )


@serializable
class AlbertEmbeddings(keras.layers.Layer):
    """Sums the three embeddings of size E, normalises them, and projects them to H.

    As the original, the E->H projection `embedding_hidden_mapping_in` exists only when
    E != H (`embedding_hidden_mapping_in` is None otherwise: the paper's E=768 ablations).

    Args:
        config: an `AlbertConfig`.

    Call args:
        input_ids: int [B, T].
        segment_ids: int [B, T].
        training: whether dropout is active.

    Returns:
        float [B, T, H] in the layer's compute dtype.
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config = as_config(config)
        self.layer_norm = layer_norm("LayerNorm")
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.embedding_hidden_mapping_in = None
        if config.embedding_size != config.hidden_size:
            self.embedding_hidden_mapping_in = keras.layers.Dense(
                config.hidden_size,
                kernel_initializer=truncated_normal(config),
                name="embedding_hidden_mapping_in",
            )

    def build(self, input_shape=None):
        c = self.config
        init = truncated_normal(c)
        # The tables are read as stored (float32) under mixed precision, as
        # keras.layers.Embedding's: the gradient of a gather is a scatter-add, and a bfloat16
        # one loses the small updates of frequent tokens ([CLS], padding) and runs on
        # emulated atomics on GPUs.
        self.word_embeddings = self.add_weight(
            shape=(c.vocab_size, c.embedding_size),
            initializer=init,
            autocast=False,
            name="word_embeddings",
        )
        self.position_embeddings = self.add_weight(
            shape=(c.max_position_embeddings, c.embedding_size),
            initializer=init,
            autocast=False,
            name="position_embeddings",
        )
        self.token_type_embeddings = self.add_weight(
            shape=(c.type_vocab_size, c.embedding_size),
            initializer=init,
            autocast=False,
            name="token_type_embeddings",
        )
        self.layer_norm.build((None, None, c.embedding_size))
        if self.embedding_hidden_mapping_in is not None:
            self.embedding_hidden_mapping_in.build((None, None, c.embedding_size))
        self.built = True

    def call(self, input_ids, segment_ids, training=False):
        seq_len = ops.shape(input_ids)[1]
        _check_length(seq_len, self.config.max_position_embeddings)
        x = ops.take(self.word_embeddings, input_ids, axis=0)  # float32 [B, T, E]
        x = x + self._token_types(segment_ids)
        x = x + ops.expand_dims(self.position_embeddings[:seq_len], 0)  # [1, T, E] broadcast
        x = self.layer_norm(x)
        x = ops.cast(x, self.compute_dtype)
        x = self.dropout(x, training=training)
        if self.embedding_hidden_mapping_in is None:
            return x  # E == H
        return self.embedding_hidden_mapping_in(x)  # [B, T, H]

    def _token_types(self, segment_ids):
        """segment_ids [B, T] -> float32 [B, T, E], a select per type as the original's
        one-hot product (an id outside the table gives zeros). Not a gather: its gradient
        would be a scatter-add where every position lands on one of two rows, and GPUs
        serialise those (69 of 99 ms of an ALBERT-base step at seq 512 on an H100)."""
        table = self.token_type_embeddings  # [type_vocab_size, E]
        if self.config.type_vocab_size > MAX_SELECTED_TYPES:
            return ops.take(table, segment_ids, axis=0)
        segment_ids = ops.expand_dims(segment_ids, -1)  # [B, T, 1]
        rows = [
            ops.cast(ops.equal(segment_ids, t), table.dtype) * table[t]
            for t in range(self.config.type_vocab_size)
        ]
        return sum(rows[1:], rows[0])

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}
