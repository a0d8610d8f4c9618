"""SQuAD features: sliding windows over the context, packed for the model.

A context longer than the model's input is cut into windows ("doc spans") of at most
`max_seq_length - len(question) - 3` tokens, `doc_stride` tokens apart, each packed as

    [CLS] question [SEP] context window [SEP] <padding>     (the question keeps its first
                                                            `max_query_length` tokens)
    segment_ids  0 ...    0     1 ...         1   0 ...
    p_mask       0  1 ... 1     0 ...         1   1 ...    1 = cannot be part of an answer

`[CLS]` has p_mask 0: it is the null answer of SQuAD 2.0 (start = end = 0). A context token
seen by several windows is "max context" only in the window where it has the most context
on its shorter side (BERT's rule); predictions are taken there only.

Training targets follow the original ALBERT (which took them from XLNet): an answer that lies
outside a window gives that window start = end = 0 and is_impossible = 1, as an unanswerable
question does; the window is kept, not dropped. An answer whose text does not match the
context at `answer_start`, or that covers no token, is skipped with a warning (as BERT), and
a last warning counts them.

Tokens are mapped back to characters of the original context (`albert.data.squad_alignment`),
so a predicted answer is `context_text[first:last + 1]`, whitespace and case as written.

For prediction, post-processing needs each feature's tokens, token -> character map and
max-context flags, which `albert.data.squad_metadata` stores beside a feature cache.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from absl import logging

from albert.data import features as feature_lib
from albert.data.squad_alignment import align_tokens, char_span_to_token_span
from albert.errors import AlbertError
from albert.progress import Progress

# The original numbers features from here, so ids never collide with example indices.
FIRST_UNIQUE_ID = 1000000000


class SquadDataError(AlbertError):
    """A SQuAD file or setting that cannot be turned into features."""


@dataclasses.dataclass
class SquadFeature:
    """One window of one example, packed for the model (lists of `max_seq_length` ints).

    Attributes:
        unique_id: id of the feature (matches the model's `unique_ids` input).
        example_index: index of its example in the example list.
        doc_span_index: which window of the example it is.
        tokens: the pieces, `[CLS]` ... `[SEP]`, unpadded.
        token_to_orig_map: feature token index -> (first, last) character of the context it
            covers (inclusive); only context tokens are keys.
        token_is_max_context: feature token index -> whether this window is the token's max
            context; only context tokens are keys.
        input_ids, input_mask, segment_ids, p_mask: the model inputs.
        start_position, end_position: answer tokens in this window, 0 for none (training).
        is_impossible: no answer in this window (training).
    """

    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: list
    token_to_orig_map: dict
    token_is_max_context: dict
    input_ids: list
    input_mask: list
    segment_ids: list
    p_mask: list
    start_position: int = 0
    end_position: int = 0
    is_impossible: bool = False

    def model_inputs(self, is_training: bool) -> dict:
        """The record fed to the model: int32 arrays [T] and scalars."""
        inputs = {
            "unique_ids": self.unique_id,
            "input_ids": np.asarray(self.input_ids, np.int32),
            "input_mask": np.asarray(self.input_mask, np.int32),
            "segment_ids": np.asarray(self.segment_ids, np.int32),
            "p_mask": np.asarray(self.p_mask, np.int32),
            "is_real_example": 1,
        }
        if is_training:
            inputs["start_positions"] = self.start_position
            inputs["end_positions"] = self.end_position
            inputs["is_impossible"] = int(self.is_impossible)
        return inputs


def check_window(max_seq_length: int, doc_stride: int, max_query_length: int):
    """Raises SquadDataError unless the settings leave context room and a positive stride.

    A window holds at least `max_seq_length - max_query_length - 3` context tokens. A
    `doc_stride` beyond that is cut to the window, as the original does (`doc_spans`): the
    windows then follow each other end to end without overlap, so no token is skipped but
    tokens at a window's edge see little context; a warning says so.
    """
    if max_query_length < 1:
        raise SquadDataError(f"--max_query_length must be positive. Received: {max_query_length}")
    window = max_seq_length - max_query_length - 3
    if window < 1:
        raise SquadDataError(
            f"--max_seq_length={max_seq_length} leaves no room for the context after "
            f"--max_query_length={max_query_length} and 3 special tokens; raise "
            "max_seq_length or lower max_query_length."
        )
    if doc_stride < 1:
        raise SquadDataError(f"--doc_stride must be positive. Received: {doc_stride}")
    if doc_stride > window:
        logging.warning(
            "--doc_stride=%d is beyond the %d context tokens of a window (--max_seq_length=%d "
            "- --max_query_length=%d - 3): the windows of a long context do not overlap, each "
            "starting where the one before it ended (as the original); lower --doc_stride for "
            "overlapping windows.",
            doc_stride,
            window,
            max_seq_length,
            max_query_length,
        )


def doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list:
    """Windows (start, length) over `num_tokens` context tokens, as BERT cuts them.

    Each window starts `min(length, doc_stride)` after the previous one; the last one ends
    at the last token. An empty context still gets one (empty) window, so that every
    example has a feature and a prediction.
    """
    spans, start = [], 0
    while True:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, doc_stride)


def max_context_windows(spans) -> list[int]:
    """BERT's rule for every context token at once: the index of the window in which each
    token has the most context, scored min(left, right) + 0.01 * window length (the first
    window wins ties). One pass over the windows, not one per token and window.

    Returns:
        [num_tokens] window indices (tokens no window covers get -1).
    """
    num_tokens = max((start + length for start, length in spans), default=0)
    best_index, best_score = [-1] * num_tokens, [float("-inf")] * num_tokens
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        for position in range(start, end + 1):
            score = min(position - start, end - position) + 0.01 * length
            if score > best_score[position]:
                best_score[position], best_index[position] = score, index
    return best_index


def is_max_context(spans, span_index: int, position: int) -> bool:
    """Whether `spans[span_index]` is the window where context token `position` has the most
    context (`max_context_windows`)."""
    windows = max_context_windows(spans)
    return 0 <= position < len(windows) and windows[position] == span_index


def _answer_tokens(example, starts, ends):
    """(first, last) context token of the gold answer, or None to skip the example."""
    answer_chars = example.context_text[example.start_position : example.end_position + 1]
    if example.start_position < 0 or answer_chars != example.answer_text:
        logging.warning(
            "Skipping question %s: its answer %r is not at answer_start %d of the context.",
            example.qas_id,
            example.answer_text,
            example.start_position,
        )
        return None
    span = char_span_to_token_span(starts, ends, example.start_position, example.end_position)
    if span is None:
        logging.warning("Skipping question %s: no token covers its answer.", example.qas_id)
    return span


def pack_window(query_ids, doc_ids, max_seq_length, cls_id, sep_id):
    """`[CLS] query [SEP] doc [SEP]` padded -> input_ids, input_mask, segment_ids, p_mask."""
    input_ids = [cls_id, *query_ids, sep_id, *doc_ids, sep_id]
    segment_ids = [0] * (len(query_ids) + 2) + [1] * (len(doc_ids) + 1)
    p_mask = [0] + [1] * (len(query_ids) + 1) + [0] * len(doc_ids) + [1]
    padding = max_seq_length - len(input_ids)
    return {
        "input_ids": input_ids + [0] * padding,
        "input_mask": [1] * len(input_ids) + [0] * padding,
        "segment_ids": segment_ids + [0] * padding,
        "p_mask": p_mask + [1] * padding,
    }


def iter_features(examples, tokenizer, max_seq_length, doc_stride, max_query_length, is_training):
    """Yields the `SquadFeature`s of `examples` one at a time (see the module doc).

    Args:
        examples: list of `SquadExample`.
        tokenizer: an `albert.tokenization.FullTokenizer` (`tokenize`,
            `convert_tokens_to_ids`, `do_lower_case`), whose vocabulary has [CLS] and [SEP].
        max_seq_length: T.
        doc_stride: tokens between the starts of consecutive windows.
        max_query_length: the question keeps its first this many tokens.
        is_training: compute answer targets (and skip examples whose answer is not found).

    Raises:
        SquadDataError: the settings leave no room for context tokens.
    """
    cls_id, sep_id = feature_lib.special_token_ids(tokenizer)
    do_lower_case = getattr(tokenizer, "do_lower_case", True)
    wordpiece = getattr(tokenizer, "sp_model", None) is None  # A vocab.txt tokenizer.
    check_window(max_seq_length, doc_stride, max_query_length)
    unique_id = FIRST_UNIQUE_ID
    skipped = 0  # Training questions whose answer is not found (each warned about).
    context_cache = (None, None)  # Questions of one paragraph share its tokens.
    # SQuAD 2.0's 130k training questions take minutes, as the original logged too.
    progress = Progress("SQuAD: tokenized", len(examples), "questions")
    for example_index, example in enumerate(examples):
        progress.update()
        if context_cache[0] != example.context_text:
            doc_tokens = tokenizer.tokenize(example.context_text)
            starts, ends = align_tokens(example.context_text, doc_tokens, do_lower_case, wordpiece)
            doc_ids = tokenizer.convert_tokens_to_ids(doc_tokens)
            context_cache = (example.context_text, (doc_tokens, doc_ids, starts, ends))
        doc_tokens, doc_ids, starts, ends = context_cache[1]
        answer = None
        if is_training and not example.is_impossible:
            answer = _answer_tokens(example, starts, ends)
            if answer is None:
                skipped += 1
                continue
        query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
        query_ids = tokenizer.convert_tokens_to_ids(query_tokens)
        doc_offset = len(query_tokens) + 2  # Feature index of the first context token.
        spans = doc_spans(len(doc_tokens), max_seq_length - len(query_tokens) - 3, doc_stride)
        best_window = max_context_windows(spans)  # [context tokens]
        for span_index, (span_start, span_length) in enumerate(spans):
            window = range(span_start, span_start + span_length)
            window_tokens = doc_tokens[window.start : window.stop]
            packed = pack_window(
                query_ids, doc_ids[window.start : window.stop], max_seq_length, cls_id, sep_id
            )
            feature = SquadFeature(
                unique_id=unique_id,
                example_index=example_index,
                doc_span_index=span_index,
                tokens=["[CLS]", *query_tokens, "[SEP]", *window_tokens, "[SEP]"],
                token_to_orig_map={
                    doc_offset + i - span_start: (starts[i], ends[i]) for i in window
                },
                token_is_max_context={
                    doc_offset + i - span_start: best_window[i] == span_index for i in window
                },
                is_impossible=is_training and example.is_impossible,
                **packed,
            )
            if answer is not None:
                if span_start <= answer[0] and answer[1] < span_start + span_length:
                    feature.start_position = answer[0] - span_start + doc_offset
                    feature.end_position = answer[1] - span_start + doc_offset
                else:
                    feature.is_impossible = True  # Answer outside this window: [CLS].
            yield feature
            unique_id += 1
    if skipped:
        # One line a user sees among the per-question ones: how much of the file is unused.
        logging.warning(
            "Skipped %d of %d training questions: their answer is missing, not at "
            "answer_start in the context, or covers no token (they are not trained on); check "
            "the file's answers and answer_start offsets.",
            skipped,
            len(examples),
        )


def convert_examples_to_features(
    examples,
    tokenizer,
    max_seq_length=384,
    doc_stride=128,
    max_query_length=64,
    is_training=False,
) -> list:
    """The list of `SquadFeature`s of `examples` (see `iter_features`)."""
    return list(
        iter_features(
            examples, tokenizer, max_seq_length, doc_stride, max_query_length, is_training
        )
    )
