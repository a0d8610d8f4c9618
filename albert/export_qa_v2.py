"""The SQuAD 2.0 QA SavedModel: `albert.export_qa`'s windows and text, the v2 head's answers.

`albert.export_qa.export_question_answering` of a model with the v2 head (XLNet style: start
log-probabilities, end log-probabilities conditioned on each of the `start_n_top` best starts,
an answer-class logit) writes this `serving_default` signature:

    inputs   question  tf.string [batch]
             context   tf.string [batch]
    outputs  answer       tf.string [batch]  predictions.json's answer: "" when null_score
                                             exceeds null_score_diff_threshold, else
                                             best_answer
             best_answer  tf.string [batch]  the best non-null span's text (the first "text"
                                             of nbest_predictions.json; "" when none valid)
             score        float32 [batch]    its start_log_prob + end_log_prob (float32 min
                                             when no span of the beam is valid)
             start_index  int32 [batch]      its first and last token in the packed input of
             end_index    int32 [batch]      the window it was found in
             null_score   float32 [batch]    null_odds.json's value: the lowest answer-class
                                             logit (`cls_logits`) over the windows
             null_score_diff_threshold  float64 [batch]  the threshold of the export

The context is read in run_squad's windows exactly as the SQuAD 1.1 SavedModel reads it
(`albert.export_qa`: the question's first `max_query_length` tokens, windows `doc_stride`
apart, the same text checks and original-character answers). In each window the candidates
are the head's beam, `start_n_top` starts x `end_n_top` ends, kept when both are context
tokens, the start has its most context in that window, start <= end and the span has at most
`max_answer_length` tokens, as `albert.data.squad_postprocessing.compute_predictions_v2`
keeps them; the best is the highest start + end log-probability over all windows (the first
on equal scores). The null decision is that of predictions.json: "" when the null score is
strictly above the threshold (compared in float64, as the host compares Python floats).

Shape letters: B batch, N windows of the batch, S max_seq_length, K start_n_top,
E start_n_top * end_n_top.
"""

from __future__ import annotations

import tensorflow as tf

from albert.export_qa import _QuestionAnsweringServing
from albert.export_qa_spans import first_best


class SquadV2Serving(_QuestionAnsweringServing):
    """Raw (question, context) -> windows -> v2 head's beam -> best span, null decision
    -> text. Takes `_QuestionAnsweringServing`'s arguments, then the null threshold."""

    def __init__(self, *args, null_score_diff_threshold=0.0):
        super().__init__(*args)
        self._null_threshold = float(null_score_diff_threshold)

    def _serve(self, question, context):
        windows = self._windows(question, context)
        # As pack_window: [CLS] (the null answer) and the context may hold an answer.
        is_first = tf.range(self._max_seq_length) == 0  # [S]
        may_answer = windows["is_context"] | is_first[None, :]  # [N, S]
        inputs = dict(windows["inputs"], p_mask=tf.cast(~may_answer, tf.int32))
        outputs = self._call_model(inputs)
        start, end, score = best_beam_span(
            outputs,
            windows["is_context"],
            windows["is_max_context"],
            self._max_answer_length,
        )  # [N] each
        example, rows = windows["example"], tf.shape(windows["context"])[0]
        chosen = first_best(score, example, rows)  # [B]
        start, end, score = (tf.gather(t, chosen) for t in (start, end, score))
        best_answer = self._span_text(windows, chosen, start, end)
        # The question's null score: a window that sees the answer pulls it down.
        cls_logits = tf.cast(outputs["cls_logits"], tf.float32)  # [N]
        null_score = tf.math.unsorted_segment_min(cls_logits, example, rows)  # [B]
        threshold = tf.fill([rows], tf.constant(self._null_threshold, tf.float64))  # [B]
        is_null = tf.cast(null_score, tf.float64) > threshold  # [B]
        return {
            "answer": tf.where(is_null, "", best_answer),
            "best_answer": best_answer,
            "score": score,
            "start_index": start,
            "end_index": end,
            "null_score": null_score,
            "null_score_diff_threshold": threshold,
        }


def best_beam_span(outputs, is_context, is_max_context, max_answer_length):
    """The best valid (start, end) pair of each window's beam, as `compute_predictions_v2`
    filters and ranks them (none valid: start and end 0, score float32 min).

    Args:
        outputs: the v2 head's inference outputs: `start_top_log_probs`, `start_top_index`
            [N, K]; `end_top_log_probs`, `end_top_index` [N, E], start i's ends at
            i * end_n_top ... (i + 1) * end_n_top - 1.
        is_context: bool [N, S], the tokens an answer may cover.
        is_max_context: bool [N, S], the tokens a span may start at.
        max_answer_length: longest span, in tokens.

    Returns:
        (start, end, score): int32 [N], int32 [N], float32 [N].
    """
    start_index = tf.cast(outputs["start_top_index"], tf.int32)  # [N, K]
    end = tf.cast(outputs["end_top_index"], tf.int32)  # [N, E]
    end_n_top = tf.shape(end)[1] // tf.shape(start_index)[1]
    start = tf.repeat(start_index, end_n_top, axis=1)  # [N, E]: the start of each end
    start_log_probs = tf.repeat(
        tf.cast(outputs["start_top_log_probs"], tf.float32), end_n_top, axis=1
    )  # [N, E]
    end_log_probs = tf.cast(outputs["end_top_log_probs"], tf.float32)  # [N, E]
    can_start = tf.gather(is_context & is_max_context, start, batch_dims=1)  # [N, E]
    can_end = tf.gather(is_context, end, batch_dims=1)  # [N, E]
    valid = can_start & can_end & (start <= end) & (end - start < max_answer_length)
    # float32 sums, as the host adds the float32 log-probabilities.
    scores = tf.where(valid, start_log_probs + end_log_probs, tf.float32.min)  # [N, E]
    best = tf.argmax(scores, axis=1, output_type=tf.int32)  # [N], the first of equal scores
    is_found = _pick(valid, best)  # [N]
    start = tf.where(is_found, _pick(start, best), 0)
    end = tf.where(is_found, _pick(end, best), 0)
    return start, end, _pick(scores, best)


def _pick(values, index):
    """`values[n, index[n]]` of [N, E] values."""
    return tf.gather(values, index, batch_dims=1)
