"""The window and span arithmetic of the QA SavedModels (`albert.export_qa`,
`albert.export_qa_v2`), in-graph: the windows of run_squad's features, which window each
token has its most context in, the best span of a window and the best window of a question,
each as the host-side featurizer and post-processing compute them.

Shape letters: B batch, N windows of the batch, S max_seq_length, L window pieces, K
n_best_size.
"""

from __future__ import annotations

import tensorflow as tf


def doc_windows(num_tokens, room, doc_stride):
    """`albert.data.squad_features.doc_spans` for a batch: the windows over each row's
    context tokens, in row order, then window order.

    Every window but a row's last is `room` tokens long, so the windows start
    `min(room, doc_stride)` apart and a row of P tokens has 1 + ceil((P - room) / step) of
    them (one, maybe empty, when P <= room).

    Args:
        num_tokens: int64 [B], the context tokens of each row (P).
        room: int64 [B], the context tokens a window holds (max_tokens_for_doc), >= 1.
        doc_stride: tokens between the starts of consecutive windows, >= 1.

    Returns:
        (example, start, length): int64 [N] each; the row of each window, its first token
        and its number of tokens.
    """
    step = tf.minimum(room, doc_stride)  # [B]
    count = 1 + (tf.maximum(num_tokens - room, 0) + step - 1) // step  # [B]
    example = tf.repeat(tf.range(tf.size(count, out_type=tf.int64)), count)  # [N]
    start = tf.ragged.range(count).flat_values * tf.gather(step, example)  # [N]
    length = tf.minimum(tf.gather(num_tokens, example) - start, tf.gather(room, example))
    return example, start, length


def max_context(token_index, length, num_tokens):
    """`albert.data.squad_features.max_context_windows` for a batch of windows: whether each
    window is the one where each of its tokens has the most context, scored
    min(left, right) + 0.01 * window length, the first window winning ties.

    Args:
        token_index: int64 RaggedTensor [N, (L)], each window's tokens as indices into all
            rows' tokens (unique per row and position), windows of a row in order.
        length: int64 [N], the windows' lengths (L).
        num_tokens: the number of indices (the batch's context tokens).

    Returns:
        bool RaggedTensor [N, (L)].
    """
    local = tf.ragged.range(length)  # [N, (L)]
    # In float64 with the featurizer's operations (min, then + 0.01 * length), so that scores
    # equal there are equal here: exact arithmetic would differ (1 + 0.01 * 118 and
    # 2 + 0.01 * 18 are equal, but 2.1799999999999997 < 2.18 there).
    score = tf.cast(tf.minimum(local, length[:, None] - 1 - local), tf.float64) + 0.01 * tf.cast(
        length[:, None], tf.float64
    )  # [N, (L)]
    flat_index = token_index.flat_values  # [T]
    window = score.value_rowids()  # [T]
    best = tf.math.unsorted_segment_max(score.flat_values, flat_index, num_tokens)
    is_best = tf.equal(score.flat_values, tf.gather(best, flat_index))  # [T]
    # Of the windows with the best score, the first.
    first = tf.math.unsorted_segment_min(
        tf.where(is_best, window, tf.size(length, out_type=tf.int64)), flat_index, num_tokens
    )
    return score.with_flat_values(tf.equal(window, tf.gather(first, flat_index)))


def first_best(score, example, num_examples):
    """int32 [B]: for each example, its window of the highest score, the first of equal
    scores (as predictions.json's stable sort of all windows' candidates).

    Args:
        score: float32 [N], each window's best span score.
        example: int64 [N], each window's example, in order.
        num_examples: B.
    """
    windows = tf.range(tf.shape(example)[0])  # [N]
    best = tf.math.unsorted_segment_max(score, example, num_examples)  # [B]
    # A NaN score (a diverged model) equals nothing: it counts as best rather than leaving its
    # example without a window.
    is_best = tf.equal(score, tf.gather(best, example)) | tf.math.is_nan(score)  # [N]
    return tf.math.unsorted_segment_min(
        tf.where(is_best, windows, tf.shape(example)[0]), example, num_examples
    )


def best_span(
    start_logits, end_logits, is_context, max_answer_length, n_best_size=None, is_max_context=None
):
    """The best valid span of each row: context tokens, start <= end, at most
    `max_answer_length` tokens, highest start + end logit; with `n_best_size`, only among the
    `n_best_size` highest start logits and end logits of the row, as
    `albert.data.squad_postprocessing.compute_predictions_v1` pairs them (none valid: start
    and end 0, score float32 min). Of equal scores, the first pair in its order wins: starts
    by rank, then ends by rank (ranks: highest logit first, the lower position on ties), not
    the first by position: logits of a mixed precision model tie often.

    Args:
        start_logits, end_logits: float32 [B, S].
        is_context: bool [B, S], the tokens an answer may cover.
        max_answer_length: longest span, in tokens.
        n_best_size: starts and ends tried per row (of all S positions), or None for all.
        is_max_context: bool [B, S], the tokens a span may start at (those whose window this
            row is, see `max_context`), or None for every context token.

    Returns:
        (start, end, score): int32 [B], int32 [B], float32 [B].
    """
    length = tf.shape(start_logits)[1]
    k = length if n_best_size is None else tf.minimum(n_best_size, length)
    # Ranks as the host's stable descending sort: top_k puts the lower index first on ties.
    start_top = tf.math.top_k(start_logits, k=k).indices  # [B, K]
    end_top = tf.math.top_k(end_logits, k=k).indices  # [B, K]
    is_start = is_context if is_max_context is None else is_context & is_max_context
    can_start = tf.gather(is_start, start_top, batch_dims=1)  # [B, K]
    can_end = tf.gather(is_context, end_top, batch_dims=1)  # [B, K]
    offset = end_top[:, None, :] - start_top[:, :, None]  # [B, K, K]: end - start
    valid = (
        can_start[:, :, None] & can_end[:, None, :] & (offset >= 0) & (offset < max_answer_length)
    )  # [B, K, K]
    scores = (
        tf.gather(start_logits, start_top, batch_dims=1)[:, :, None]
        + tf.gather(end_logits, end_top, batch_dims=1)[:, None, :]
    )  # [B, K, K]
    scores = tf.reshape(tf.where(valid, scores, tf.float32.min), [tf.shape(scores)[0], -1])
    flat = tf.argmax(scores, axis=-1, output_type=tf.int32)  # [B], the first of equal scores
    is_found = tf.gather(tf.reshape(valid, tf.shape(scores)), flat, batch_dims=1)  # [B]
    start = tf.where(is_found, tf.gather(start_top, flat // k, batch_dims=1), 0)
    end = tf.where(is_found, tf.gather(end_top, flat % k, batch_dims=1), 0)
    return start, end, tf.gather(scores, flat, batch_dims=1)
