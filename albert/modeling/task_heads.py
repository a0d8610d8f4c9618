"""Fine-tuning heads, with the original's parameters so its fine-tuned checkpoints load.

- `AlbertClassificationHead`: dropout + linear on the pooled output (GLUE; RACE with one
  label per choice). Original names: `output_weights [num_labels, H]`, `output_bias`.
- `AlbertSpanHead`: SQuAD v1.1, one linear layer giving start and end logits
  (`cls/squad/output_weights [2, H]`, `output_bias [2]`).
- `AlbertSquadV2Head`: SQuAD 2.0 as ALBERT does it (XLNet-style): start logits, end logits
  conditioned on the start, a beam of start_n_top x end_n_top at inference, and an
  answer-class head. Original names `start_logits/dense`, `end_logits/dense_0`,
  `end_logits/LayerNorm`, `end_logits/dense_1`, `answer_class/dense_0`, `answer_class/dense_1`.
"""

import keras
from keras import ops

from albert.modeling.dropout import Dropout
from albert.modeling.embeddings import truncated_normal
from albert.modeling.serialization import as_config, serializable
from albert.modeling.shared_weights import UncastWeights

# Added to the logits of positions that cannot hold an answer (p_mask = 1).
NEG_INF = -1e30


@serializable
class AlbertClassificationHead(UncastWeights, keras.layers.Layer):
    """logits = dropout(pooled_output) . W^T + b, W of shape [num_labels, H].

    Call args:
        pooled_output: [B, H].
        training: whether dropout is active.

    Returns:
        float32 logits [B, num_labels].
    """

    def __init__(self, config, num_labels, dropout_rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.config = as_config(config)
        self.num_labels = num_labels
        self.dropout_rate = dropout_rate
        self.dropout = Dropout(dropout_rate)

    def get_config(self):
        return {
            **super().get_config(),
            "config": self.config.to_dict(),
            "num_labels": self.num_labels,
            "dropout_rate": self.dropout_rate,
        }

    def build(self, input_shape=None):
        self.output_weights = self.add_weight(
            shape=(self.num_labels, self.config.hidden_size),
            initializer=truncated_normal(self.config),
            name="output_weights",
        )
        self.output_bias = self.add_weight(
            shape=(self.num_labels,), initializer="zeros", name="output_bias"
        )
        self.built = True

    def call(self, pooled_output, training=False):
        x = ops.cast(self.dropout(pooled_output, training=training), "float32")
        logits = ops.matmul(x, ops.transpose(ops.cast(self.output_weights, "float32")))
        return logits + ops.cast(self.output_bias, "float32")


@serializable
class AlbertSpanHead(AlbertClassificationHead):
    """SQuAD v1.1: start/end logits from one linear layer over every position.

    Call args:
        sequence_output: [B, T, H].

    Returns:
        (start_logits, end_logits), each float32 [B, T].
    """

    def __init__(self, config, **kwargs):
        super().__init__(config, num_labels=2, dropout_rate=0.0, **kwargs)

    def get_config(self):
        config = super().get_config()
        del config["num_labels"], config["dropout_rate"]  # fixed by this class
        return config

    def call(self, sequence_output, training=False):
        logits = super().call(sequence_output, training=training)  # [B, T, 2]
        return logits[..., 0], logits[..., 1]


def _masked(logits, p_mask):
    """Pushes logits of p_mask=1 positions to -1e30, keeping the others unchanged."""
    p_mask = ops.cast(p_mask, "float32")
    return logits * (1.0 - p_mask) + NEG_INF * p_mask


@serializable
class AlbertSquadV2Head(keras.layers.Layer):
    """SQuAD 2.0 head: start, start-conditioned end, and answer-class logits.

    Call args:
        sequence_output: [B, T, H].
        p_mask: [B, T], 1 where no answer can start or end (question, special tokens).
        start_positions: int [B] gold starts (training) or None (inference: beam search).
        training: whether dropout is active.

    Returns:
        Training: dict with `start_log_probs` [B, T], `end_log_probs` [B, T], `cls_logits` [B].
        Inference: dict with `start_top_log_probs`, `start_top_index` [B, start_n_top],
        `end_top_log_probs`, `end_top_index` [B, start_n_top * end_n_top], `cls_logits` [B].
    """

    def __init__(self, config, start_n_top=5, end_n_top=5, dropout_rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.config = config = as_config(config)
        self.start_n_top = start_n_top
        self.end_n_top = end_n_top
        self.dropout_rate = dropout_rate
        init = truncated_normal(config)
        hidden = config.hidden_size
        self.start_dense = keras.layers.Dense(1, kernel_initializer=init, name="start_dense")
        self.end_dense_0 = keras.layers.Dense(
            hidden, activation="tanh", kernel_initializer=init, name="end_dense_0"
        )
        self.end_layer_norm = keras.layers.LayerNormalization(
            epsilon=1e-12, name="end_LayerNorm", dtype="float32"
        )
        self.end_dense_1 = keras.layers.Dense(1, kernel_initializer=init, name="end_dense_1")
        self.answer_dense_0 = keras.layers.Dense(
            hidden, activation="tanh", kernel_initializer=init, name="answer_class_dense_0"
        )
        self.answer_dropout = Dropout(dropout_rate)
        self.answer_dense_1 = keras.layers.Dense(
            1, use_bias=False, kernel_initializer=init, name="answer_class_dense_1"
        )

    def get_config(self):
        return {
            **super().get_config(),
            "config": self.config.to_dict(),
            "start_n_top": self.start_n_top,
            "end_n_top": self.end_n_top,
            "dropout_rate": self.dropout_rate,
        }

    def build(self, input_shape=None):
        hidden = self.config.hidden_size
        self.start_dense.build((None, None, hidden))
        self.end_dense_0.build((None, None, 2 * hidden))
        self.end_layer_norm.build((None, None, hidden))
        self.end_dense_1.build((None, None, hidden))
        self.answer_dense_0.build((None, 2 * hidden))
        self.answer_dense_1.build((None, hidden))
        self.built = True

    def _end_logits(self, sequence_output, start_features, p_mask):
        """sequence_output [B, T, H], start_features [B, T, H] -> masked logits [B, T]."""
        x = self.end_dense_0(ops.concatenate([sequence_output, start_features], axis=-1))
        x = self.end_dense_1(ops.cast(self.end_layer_norm(x), self.compute_dtype))
        return _masked(ops.cast(x[..., 0], "float32"), p_mask)

    def call(self, sequence_output, p_mask, start_positions=None, training=False):
        seq_len = ops.shape(sequence_output)[1]
        start_logits = _masked(
            ops.cast(self.start_dense(sequence_output)[..., 0], "float32"), p_mask
        )  # [B, T]
        start_log_probs = ops.log_softmax(start_logits, axis=-1)

        # Answer class on [start-probability-weighted hidden state; h_CLS]. The original feeds
        # the start probabilities forward without stopping their gradient.
        start_p = ops.cast(ops.softmax(start_logits, axis=-1), sequence_output.dtype)
        start_weighted = ops.einsum("bt,bth->bh", start_p, sequence_output)  # [B, H]
        answer = self.answer_dense_0(
            ops.concatenate([start_weighted, sequence_output[:, 0]], axis=-1)
        )
        answer = self.answer_dropout(answer, training=training)
        cls_logits = ops.cast(self.answer_dense_1(answer)[:, 0], "float32")  # [B]

        if start_positions is not None:
            # Training: the end is conditioned on the gold start.
            index = ops.cast(ops.reshape(start_positions, (-1, 1, 1)), "int32")  # [B, 1, 1]
            start_h = ops.take_along_axis(sequence_output, index, axis=1)  # [B, 1, H]
            start_features = ops.broadcast_to(start_h, ops.shape(sequence_output))
            end_logits = self._end_logits(sequence_output, start_features, p_mask)
            return {
                "start_log_probs": start_log_probs,
                "end_log_probs": ops.log_softmax(end_logits, axis=-1),
                "cls_logits": cls_logits,
            }

        # Inference: beam of start_n_top starts, each with its end_n_top best ends.
        k_start, k_end = self.start_n_top, self.end_n_top
        start_top_log_probs, start_top_index = ops.top_k(start_log_probs, k=k_start)  # [B, K]
        start_h = ops.take_along_axis(
            sequence_output, ops.cast(start_top_index, "int32")[:, :, None], axis=1
        )  # [B, K, H]
        hidden = ops.shape(sequence_output)[-1]
        batch = ops.shape(sequence_output)[0]
        tiled_output = ops.repeat(sequence_output[:, None], k_start, axis=1)  # [B, K, T, H]
        start_features = ops.broadcast_to(start_h[:, :, None], ops.shape(tiled_output))
        end_logits = self._end_logits(
            ops.reshape(tiled_output, (-1, seq_len, hidden)),
            ops.reshape(start_features, (-1, seq_len, hidden)),
            ops.reshape(ops.repeat(p_mask[:, None], k_start, axis=1), (-1, seq_len)),
        )  # [B * K, T]
        end_log_probs = ops.log_softmax(end_logits, axis=-1)
        end_top_log_probs, end_top_index = ops.top_k(end_log_probs, k=k_end)  # [B * K, K_end]
        return {
            "start_top_log_probs": start_top_log_probs,
            "start_top_index": start_top_index,
            "end_top_log_probs": ops.reshape(end_top_log_probs, (batch, k_start * k_end)),
            "end_top_index": ops.reshape(end_top_index, (batch, k_start * k_end)),
            "cls_logits": cls_logits,
        }
