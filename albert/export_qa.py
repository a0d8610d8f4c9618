"""A SavedModel for extractive QA that takes raw (question, context) strings.

`export_question_answering` writes a SavedModel of a SQuAD 1.1 model (`AlbertQuestionAnswering`
with the span head) whose `serving_default` signature is as below (a SQuAD 2.0 model, the v2
head: see `albert.export_qa_v2`, which reads the context the same way)

    inputs   question  tf.string [batch]
             context   tf.string [batch]
    outputs  answer       tf.string [batch]   the span's text in the context (see below)
             start_index  int32 [batch]       first and last token of the span in the packed
             end_index    int32 [batch]       input `[CLS] question [SEP] window [SEP]` of the
                                              window it was found in
             score        float32 [batch]     start logit + end logit of the span

The text goes through `albert.text_ops.InGraphTokenizer` (the same ids as `FullTokenizer`);
the question keeps its first `max_query_length` tokens and the context is read in the windows
of run_squad's features: `max_seq_length - len(question) - 3` tokens each, `doc_stride` apart,
each window a row of the model's batch. In each window the span is the highest start + end
logit over context tokens with start <= end and at most `max_answer_length` tokens, its start
among the `n_best_size` highest start logits of the window's input and its end among the
highest end logits, as run_squad pairs them, and its start a token that has its most context
in that window (BERT's rule); the answer is the best window's span (the first on equal
scores; none valid: answer "", score float32 min).
`answer` is the ORIGINAL characters of the context that the span's tokens came from,
ends stripped: the text `run_squad.py` writes to predictions.json for the same span
(`albert.data.squad_postprocessing.answer_text`). It is found as `albert.data.squad_alignment`
does, in graph: the non-space characters of the pieces ("▁" dropped; an <unk> piece counts
the characters it covers) are those of the normalised context, and each original character is
normalised alone to count its share (none for a character that SentencePiece drops).

Loading needs TensorFlow and tensorflow-text only (import tensorflow_text first):

    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    serve(question=tf.constant(["who?"]), context=tf.constant(["..."]))["answer"]

Shape letters: B batch, N windows of the batch, S max_seq_length, P context pieces, L
window pieces, C context characters.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from albert.errors import AlbertError
from albert.export import (
    check_export_dir,
    check_max_seq_length,
    same_rows,
    save_serving_module,
    utf8_text,
)
from albert.export_qa_spans import best_span, doc_windows, first_best, max_context
from albert.text_ops import InGraphTokenizer, char_class, strip_accents
from albert.tokenization import SPIECE_UNDERLINE, load_spm_model


class QuestionAnsweringError(AlbertError):
    """A model or setting that the QA SavedModel cannot serve."""


class _QuestionAnsweringServing(tf.Module):
    """Raw (question, context) -> in-graph tokenizer -> windows -> span head -> best span
    -> text.

    The Keras model is not an attribute (the SavedModel must not serialise the Keras object);
    its variables are tracked as a plain list.
    """

    def __init__(
        self,
        model,
        tokenizer,
        detokenizer,
        unknown_id,
        max_seq_length,
        max_query_length,
        max_answer_length,
        n_best_size,
        doc_stride,
    ):
        super().__init__(name="albert_question_answering_serving")
        self.tokenizer = tokenizer
        self.detokenizer = detokenizer
        self._unknown_id = unknown_id
        self.model_variables = list(model.variables)
        self._call_model = lambda inputs: model(inputs, training=False)
        self._max_seq_length = max_seq_length
        self._max_query_length = max_query_length
        self._max_answer_length = max_answer_length
        self._n_best_size = n_best_size
        self._doc_stride = doc_stride
        spec = [
            tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None], tf.string, name="context"),
        ]
        self.serve = tf.function(self._serve, input_signature=spec, autograph=False)

    def _serve(self, question, context):
        windows = self._windows(question, context)
        outputs = self._call_model(windows["inputs"])
        start_logits = tf.cast(outputs["start_logits"], tf.float32)  # [N, S]
        end_logits = tf.cast(outputs["end_logits"], tf.float32)  # [N, S]
        start, end, score = best_span(
            start_logits,
            end_logits,
            windows["is_context"],
            self._max_answer_length,
            self._n_best_size,
            windows["is_max_context"],
        )  # [N] each
        chosen = first_best(score, windows["example"], tf.shape(windows["context"])[0])  # [B]
        start, end, score = (tf.gather(t, chosen) for t in (start, end, score))
        answer = self._span_text(windows, chosen, start, end)
        return {"answer": answer, "start_index": start, "end_index": end, "score": score}

    def _windows(self, question, context):
        """Checks the text and reads each context in run_squad's windows (module doc).

        Returns:
            dict: `context` tf.string [B] and `context_ids` int32 [B, (P)]; each window's
            `example` int64 [N], `window_start` int64 [N] (its first context piece) and
            `context_start` int32 [N] (its first context token in the packed input);
            `inputs`, the model inputs (int32 [N, S] each); `is_context` and
            `is_max_context`, bool [N, S]: the tokens a span may cover and start at.
        """
        texts = [utf8_text(question, "question"), utf8_text(context, "context")]
        question, context = same_rows(texts, ("question", "context"))
        question_ids = self.tokenizer.tokenize(question)[:, : self._max_query_length]
        context_ids = self.tokenizer.tokenize(context)  # [B, (P)]
        # The windows of fine-tuning's features: the question whole, the context cut to the
        # rest (pack's truncate-the-longer rule could cut the question instead) in windows
        # `doc_stride` apart, each read as a row of its own.
        room = self._max_seq_length - 3 - question_ids.row_lengths()  # [B]
        example, window_start, length = doc_windows(
            context_ids.row_lengths(), room, self._doc_stride
        )  # [N] each
        positions = tf.ragged.range(window_start, window_start + length)  # [N, (L)]
        flat_positions = positions + tf.gather(context_ids.row_starts(), example)[:, None]
        window = tf.gather(context_ids.flat_values, flat_positions)  # [N, (L)]
        inputs = self.tokenizer.pack(
            [tf.gather(question_ids, example), window], self._max_seq_length
        )
        # Context tokens: segment 1 without the final [SEP].
        is_context = (inputs["segment_ids"] == 1) & (inputs["input_ids"] != self.tokenizer.sep_id)
        # The context's first token follows [CLS] question [SEP]: segment 0.
        is_first_segment = (inputs["segment_ids"] == 0) & (inputs["input_mask"] == 1)
        context_start = tf.reduce_sum(tf.cast(is_first_segment, tf.int32), axis=1)  # [N]
        is_max_context = tf.concat(
            [
                tf.ragged.range(context_start) < 0,  # all False: [CLS] question [SEP]
                max_context(flat_positions, length, tf.size(context_ids.flat_values)),
            ],
            axis=1,
        ).to_tensor(False, shape=[None, self._max_seq_length])  # [N, S]
        return {
            "context": context,
            "context_ids": context_ids,
            "example": example,
            "window_start": window_start,
            "context_start": context_start,
            "inputs": inputs,
            "is_context": is_context,
            "is_max_context": is_max_context,
        }

    def _span_text(self, windows, chosen, start, end):
        """tf.string [B]: the original text of each row's span, tokens start..end (int32 [B])
        of its window `chosen` (int32 [B]); "" for start 0 ([CLS]: no span found)."""
        piece_offset = tf.gather(
            tf.cast(windows["window_start"], tf.int32) - windows["context_start"], chosen
        )  # [B]
        first_piece = tf.where(start > 0, start + piece_offset, -1)  # -1 answers "".
        last_piece = tf.where(start > 0, end + piece_offset, -1)
        return self._original_text(
            windows["context"], windows["context_ids"], first_piece, last_piece
        )

    def _original_text(self, context, context_ids, first_piece, last_piece):
        """The characters of `context` that pieces first..last of `context_ids` came from.

        Args:
            context: tf.string [B], the raw context.
            context_ids: int32 [B, (P)], its pieces.
            first_piece, last_piece: int32 [B], the span, as indices into `context_ids`.

        Returns:
            tf.string [B]: from the first to the last original character the span's
            normalised characters came from; "" for a span of "▁" pieces only.
        """
        # Non-space normalised characters before each piece, and up to its end.
        pieces = self.detokenizer.id_to_string(context_ids)  # [B, (P)]
        piece_chars = tf.strings.length(
            tf.strings.regex_replace(pieces, SPIECE_UNDERLINE, ""), unit="UTF8_CHAR"
        )  # [B, (P)]
        piece_chars = piece_chars.with_flat_values(
            self._unknown_piece_chars(context, context_ids.flat_values, piece_chars.flat_values)
        ).to_tensor()  # [B, P]
        piece_end = tf.cumsum(piece_chars, axis=1)  # [B, P]
        begin = _take(piece_end - piece_chars, first_piece)  # [B]
        finish = _take(piece_end, last_piece)  # [B], exclusive
        # Each original character normalised alone (as `normalize_with_offsets` does, with
        # SentencePiece's NFKC after): how many non-space normalised characters it gives.
        chars, char_starts = tf.strings.unicode_split_with_offsets(context, "UTF-8")
        normalized = tf_text.normalize_utf8(self.tokenizer.normalize(chars.flat_values), "NFKC")
        counts = tf.strings.length(tf.strings.regex_replace(normalized, " ", ""), unit="UTF8_CHAR")
        counts = tf.where(self._kept_by_sentencepiece(chars.flat_values), counts, 0)
        char_counts = chars.with_flat_values(counts).to_tensor()  # [B, C]
        is_char = tf.sequence_mask(chars.row_lengths(), tf.shape(char_counts)[1])  # [B, C]
        char_end = tf.cumsum(char_counts, axis=1)  # [B, C]
        # The character holding normalised character `begin`, and the one holding
        # `finish - 1` (whitespace holds none, so neither end is whitespace).
        first = tf.reduce_sum(tf.cast(is_char & (char_end <= begin[:, None]), tf.int32), 1)
        last = tf.reduce_sum(
            tf.cast(is_char & (char_end - char_counts < finish[:, None]), tf.int32), 1
        )
        last = tf.maximum(last - 1, first)  # [B]
        # Characters that normalise to nothing (the accent of "e" + U+0301) belong to the one
        # before them, as in `squad_alignment`: else "café" written decomposed serves "cafe".
        accents_stripped = chars.with_flat_values(strip_accents(chars.flat_values))
        silent = is_char & (tf.strings.length(accents_stripped).to_tensor() == 0)  # [B, C]
        width = tf.shape(char_counts)[1]
        positions = tf.range(width)  # [C]

        def with_silent(index):  # [B]: index, or the last of the silent characters after it
            stops = (positions > index[:, None]) & ~silent  # [B, C]
            return tf.reduce_min(tf.where(stops, positions, width), 1) - 1

        last = with_silent(last)
        # A span that starts with a "▁" piece (no characters) starts, as `squad_alignment`'s
        # empty token, right after the token before it, ends stripped of whitespace: so it
        # keeps characters that normalise to a space or nothing ("´" of "don´t", U+200B).
        previous = tf.reduce_sum(tf.cast(is_char & (char_end < begin[:, None]), tf.int32), 1)
        after_previous = tf.where(begin > 0, with_silent(previous), -1) + 1  # [B]
        is_space = chars.with_flat_values(
            tf.strings.regex_full_match(chars.flat_values, char_class("space"))
        ).to_tensor(False)  # [B, C]
        is_start = is_char & ~is_space & (positions >= after_previous[:, None])  # [B, C]
        first = tf.where(
            _take(piece_chars, first_piece) == 0,
            tf.reduce_min(tf.where(is_start, positions, width), 1),
            first,
        )  # [B]
        char_bytes = tf.strings.length(chars).to_tensor()  # [B, C]
        char_starts = tf.cast(char_starts.to_tensor(), tf.int32)  # [B, C], bytes
        byte_begin = _take(char_starts, first)
        byte_end = _take(char_starts + char_bytes, last)
        text = tf.strings.substr(context, byte_begin, byte_end - byte_begin)
        return tf.where((finish > begin) & (first <= last), tf.strings.strip(text), "")

    def _kept_by_sentencepiece(self, chars):
        """bool [C]: whether SentencePiece keeps any of each character (tf.string [C]).

        Its normaliser drops control and format characters (BEL, U+200B, U+200E, U+FEFF) or
        makes them spaces, and so does predictions.json's alignment; counted as a character
        each, they shifted every later answer of the context by one ("a", U+200B, "b"
        answered "a" and U+200B for the span "a b").
        """
        unique, index = tf.unique(self.tokenizer.normalize(chars))  # [U], [C]
        pieces = self.detokenizer.id_to_string(self.detokenizer.tokenize(unique))  # [U, (p)]
        kept = tf.strings.length(tf.strings.regex_replace(pieces, SPIECE_UNDERLINE, ""))
        return tf.gather(tf.reduce_sum(kept, axis=1) > 0, index)

    def _unknown_piece_chars(self, context, flat_ids, flat_chars):
        """`flat_chars` with each <unk> piece's count replaced by the characters it covers.

        "<unk>" stands for text the vocabulary lacks ("``", "ß"), not for five characters.
        SentencePiece's offsets into the normalised text give that text; the digit-comma rule
        and the tie order never make, drop or move an unknown piece, so the k-th <unk> of
        `flat_ids` is the k-th of the plain SentencePiece pieces.

        Args:
            context: tf.string [B].
            flat_ids: int32 [N], the context's pieces, rows concatenated.
            flat_chars: int32 [N], their non-space characters as spelled by their strings.

        Returns:
            int32 [N].
        """
        normalized = self.tokenizer.normalize(context)  # [B]
        ids, starts, ends = self.detokenizer.tokenize_with_offsets(normalized)  # [B, (P0)]
        is_unknown = tf.equal(ids.flat_values, self._unknown_id)  # [P0]
        row_text = tf.gather(normalized, ids.value_rowids())  # [P0]
        text = tf.strings.substr(
            row_text, starts.flat_values, ends.flat_values - starts.flat_values
        )
        text = tf_text.normalize_utf8(tf.boolean_mask(text, is_unknown), "NFKC")  # [U0]
        # The text may hold characters SentencePiece drops ("σ" + BEL): they count none.
        chars = tf.strings.unicode_split(text, "UTF-8")  # [U0, (c)]
        kept = chars.with_flat_values(self._kept_by_sentencepiece(chars.flat_values))
        unknown_chars = tf.reduce_sum(tf.cast(kept, tf.int32), axis=1)  # [U0]
        targets = tf.where(tf.equal(flat_ids, self._unknown_id))  # [U, 1]
        # U == U0 (see above); the clamp keeps a mismatch from failing the request.
        rank = tf.minimum(tf.range(tf.shape(targets)[0]), tf.size(unknown_chars) - 1)
        values = tf.gather(tf.concat([unknown_chars, [1]], 0), tf.maximum(rank, 0))
        values = tf.where(rank < 0, 1, values)
        return tf.tensor_scatter_nd_update(flat_chars, targets, values)


def _take(values, index):
    """`values[b, index[b]]` for int [B, N] values; an index outside [0, N) (an empty context,
    a span outside it) reads 0 instead of failing."""
    width = tf.shape(values)[1]
    padded = tf.pad(values, [[0, 0], [0, 1]])  # [B, N + 1], the last column 0
    inside = (index >= 0) & (index < width)
    return tf.gather(padded, tf.where(inside, index, width), batch_dims=1)


def export_question_answering(
    model,
    spm_model_file,
    do_lower_case,
    export_dir,
    max_seq_length=384,
    max_query_length=64,
    max_answer_length=30,
    n_best_size=20,
    doc_stride=128,
    null_score_diff_threshold=0.0,
):
    """Writes a SavedModel of a fine-tuned SQuAD model that takes raw strings.

    Args:
        model: an `AlbertQuestionAnswering`, with the v1 span head or the v2 head (served as
            `albert.export_qa_v2` describes).
        spm_model_file: the SentencePiece model the model was fine-tuned with.
        do_lower_case: whether the text was lower-cased.
        export_dir: where to write the SavedModel.
        max_seq_length, max_query_length, max_answer_length, n_best_size, doc_stride: as
            in fine-tuning (`--n_best_size`: the v1 span is chosen among the highest start
            and end logits, as predictions.json's; `--doc_stride`: a long context is read in
            windows this many tokens apart, as run_squad's features).
        null_score_diff_threshold: v2 only: answer "" when the null score exceeds it, as
            predictions.json (pass the threshold tuned on dev).

    Returns:
        `export_dir`.

    Raises:
        QuestionAnsweringError: a question budget leaving no context room, or a `doc_stride`
            or `n_best_size` below 1.
        ValueError: `max_seq_length` exceeds the model's position embeddings.
        FileExistsError: `export_dir` holds something other than a SavedModel
            (`albert.export.check_export_dir`).
        albert.tokenization.TokenizerError: the SentencePiece model cannot be read.
    """
    check_export_dir(export_dir)
    if max_seq_length - max_query_length - 3 < 1:
        raise QuestionAnsweringError(
            f"max_seq_length={max_seq_length} leaves no room for the context after "
            f"max_query_length={max_query_length} and 3 special tokens."
        )
    if doc_stride < 1:
        raise QuestionAnsweringError(f"doc_stride must be positive. Received: {doc_stride}")
    if n_best_size < 1:
        raise QuestionAnsweringError(f"n_best_size must be positive. Received: {n_best_size}")
    check_max_seq_length(model, max_seq_length)
    tokenizer = InGraphTokenizer(spm_model_file, do_lower_case=do_lower_case)
    sp_model = load_spm_model(spm_model_file)
    detokenizer = tf_text.SentencepieceTokenizer(model=sp_model.serialized_model_proto())
    settings = (max_seq_length, max_query_length, max_answer_length, n_best_size, doc_stride)
    if getattr(model, "version_2_with_negative", False):
        from albert.export_qa_v2 import SquadV2Serving  # It subclasses the serving below.

        module = SquadV2Serving(
            model,
            tokenizer,
            detokenizer,
            sp_model.unk_id(),
            *settings,
            null_score_diff_threshold=null_score_diff_threshold,
        )
    else:
        module = _QuestionAnsweringServing(
            model, tokenizer, detokenizer, sp_model.unk_id(), *settings
        )
    save_serving_module(module, export_dir)
    return export_dir
