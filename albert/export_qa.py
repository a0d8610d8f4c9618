"""A SavedModel for extractive QA that takes raw (question, context) strings.

`export_question_answering` writes a SavedModel of a SQuAD 1.1 model (`AlbertQuestionAnswering`
with the span head) whose `serving_default` signature is

    inputs   question  tf.string [batch]
             context   tf.string [batch]
    outputs  answer       tf.string [batch]   the span's pieces, detokenized (see below)
             start_index  int32 [batch]       first and last token of the span in the packed
             end_index    int32 [batch]       input `[CLS] question [SEP] context [SEP]`
             score        float32 [batch]     start logit + end logit of the span

The text goes through `albert.text_ops.InGraphTokenizer` (the same ids as `FullTokenizer`);
the question keeps its first `max_query_length` tokens and the context the first tokens that
still fit, so ONE window is read (no sliding windows: an answer beyond the first
`max_seq_length - len(question) - 3` context tokens cannot be found). The span is the highest
start + end logit over context tokens with start <= end and at most `max_answer_length`
tokens. `answer` is SentencePiece's detokenization of the span's pieces: the NORMALISED text
(lower-cased for uncased models, accents stripped, whitespace collapsed), not the original
characters of the context, which `run_squad.py`'s post-processing recovers on the host.

Loading needs TensorFlow and tensorflow-text only (import tensorflow_text first):

    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    serve(question=tf.constant(["who?"]), context=tf.constant(["..."]))["answer"]

Shape letters: B batch, S max_seq_length.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from albert import fileio
from albert.errors import AlbertError
from albert.text_ops import InGraphTokenizer
from albert.tokenization import load_spm_model

SERVING_SIGNATURE = "serving_default"


class QuestionAnsweringError(AlbertError):
    """A model or setting that the QA SavedModel cannot serve."""


class _QuestionAnsweringServing(tf.Module):
    """Raw (question, context) -> in-graph tokenizer -> span head -> best span -> text.

    The Keras model is not an attribute (the SavedModel must not serialise the Keras object);
    its variables are tracked as a plain list.
    """

    def __init__(
        self, model, tokenizer, detokenizer, max_seq_length, max_query_length, max_answer_length
    ):
        super().__init__(name="albert_question_answering_serving")
        self.tokenizer = tokenizer
        self.detokenizer = detokenizer
        self.model_variables = list(model.variables)
        self._call_model = lambda inputs: model(inputs, training=False)
        self._max_seq_length = max_seq_length
        self._max_query_length = max_query_length
        self._max_answer_length = max_answer_length
        spec = [
            tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None], tf.string, name="context"),
        ]
        self.serve = tf.function(self._serve, input_signature=spec)

    def _serve(self, question, context):
        question_ids = self.tokenizer.tokenize(question)[:, : self._max_query_length]
        context_ids = self.tokenizer.tokenize(context)  # [B, (P)]
        inputs = self.tokenizer.pack([question_ids, context_ids], self._max_seq_length)
        outputs = self._call_model(inputs)
        start_logits = tf.cast(outputs["start_logits"], tf.float32)  # [B, S]
        end_logits = tf.cast(outputs["end_logits"], tf.float32)  # [B, S]
        # Context tokens: segment 1 without the final [SEP].
        is_context = (inputs["segment_ids"] == 1) & (inputs["input_ids"] != self.tokenizer.sep_id)
        start, end, score = best_span(start_logits, end_logits, is_context, self._max_answer_length)
        span_length = end - start + 1  # [B]
        positions = start[:, None] + tf.ragged.range(span_length)  # [B, (L)]
        span_ids = tf.gather(inputs["input_ids"], positions, batch_dims=1)  # [B, (L)]
        answer = self.detokenizer.detokenize(span_ids)  # [B]
        return {"answer": answer, "start_index": start, "end_index": end, "score": score}


def best_span(start_logits, end_logits, is_context, max_answer_length):
    """The best valid span of each row: context tokens, start <= end, at most
    `max_answer_length` tokens, highest start + end logit.

    Args:
        start_logits, end_logits: float32 [B, S].
        is_context: bool [B, S], the tokens an answer may cover.
        max_answer_length: longest span, in tokens.

    Returns:
        (start, end, score): int32 [B], int32 [B], float32 [B].
    """
    length = tf.shape(start_logits)[1]
    positions = tf.range(length)
    offset = positions[None, :] - positions[:, None]  # [S, S]: end - start
    allowed = (offset >= 0) & (offset < max_answer_length)  # [S, S]
    valid = allowed[None] & is_context[:, :, None] & is_context[:, None, :]  # [B, S, S]
    scores = start_logits[:, :, None] + end_logits[:, None, :]  # [B, S, S]
    scores = tf.where(valid, scores, tf.float32.min)
    flat = tf.argmax(tf.reshape(scores, [tf.shape(scores)[0], -1]), axis=-1, output_type=tf.int32)
    start, end = flat // length, flat % length
    score = tf.gather_nd(scores, tf.stack([start, end], axis=-1), batch_dims=1)
    return start, end, score


def export_question_answering(
    model,
    spm_model_file,
    do_lower_case,
    export_dir,
    max_seq_length=384,
    max_query_length=64,
    max_answer_length=30,
):
    """Writes a SavedModel of a fine-tuned SQuAD 1.1 model that takes raw strings.

    Args:
        model: an `AlbertQuestionAnswering` with the v1 span head.
        spm_model_file: the SentencePiece model the model was fine-tuned with.
        do_lower_case: whether the text was lower-cased.
        export_dir: where to write the SavedModel.
        max_seq_length, max_query_length, max_answer_length: as in fine-tuning.

    Returns:
        `export_dir`.

    Raises:
        QuestionAnsweringError: a v2 model, or a question budget leaving no context room.
        albert.tokenization.TokenizerError: the SentencePiece model cannot be read.
    """
    if getattr(model, "version_2_with_negative", False):
        raise QuestionAnsweringError(
            "export_question_answering serves the SQuAD 1.1 span head only; this model has "
            "the v2 head."
        )
    if 2 * max_query_length > max_seq_length - 3:
        raise QuestionAnsweringError(
            f"max_query_length={max_query_length} must be at most half of max_seq_length - 3 "
            f"(max_seq_length={max_seq_length}), so the context keeps the rest."
        )
    tokenizer = InGraphTokenizer(spm_model_file, do_lower_case=do_lower_case)
    detokenizer = tf_text.SentencepieceTokenizer(
        model=load_spm_model(spm_model_file).serialized_model_proto()
    )
    module = _QuestionAnsweringServing(
        model, tokenizer, detokenizer, max_seq_length, max_query_length, max_answer_length
    )
    with fileio.atomic_directory(export_dir) as temporary:  # Never half a SavedModel.
        tf.saved_model.save(
            module, temporary, signatures={SERVING_SIGNATURE: module.serve.get_concrete_function()}
        )
    return export_dir
