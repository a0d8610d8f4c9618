"""ALBERT tokenization as TensorFlow ops (tensorflow-text), for tf.data and serving.

`InGraphTokenizer` gives the same ids as `albert.tokenization.FullTokenizer` with a
SentencePiece model, but runs inside a graph, so a SavedModel can take raw strings:

- `normalize` is `preprocess_text` in string ops: whitespace runs (every character that
  Python's `str.isspace` accepts) become one space and the ends are stripped, NFKD
  (`tf_text.normalize_utf8`), characters with a non-zero canonical combining class removed
  (the same set `unicodedata.combining` selects, written out as a regex class; `\\p{Mn}` is
  a different set), and `tf.strings.lower(encoding="utf-8")`, which applies the full Unicode
  lower-casing that `str.lower` does (a word-final capital sigma becomes ς), with a guard
  for NUL characters.
- `tokenize` runs `tf_text.SentencepieceTokenizer`, then applies the digit-comma rule of
  `encode_pieces` on the ragged pieces: matching pieces are encoded again without the comma
  and spliced back in place. Last, every run of commuting pieces ("6", "66") is put in
  ascending length, `canonical_tie_order`: tensorflow-text and Python sentencepiece break
  such equal-score ties differently ("666" -> `66 6` vs `6 66`), and this makes both exact.

Known gaps, all far from real text:
- Unicode versions. Python 3.11 follows Unicode 14; TensorFlow's case tables are older and
  its NFKD newer. Over every code point, `normalize` equals `preprocess_text` except on
  about 300 characters added in Unicode 14 or later (Vithkuqi, Latin Extended-F/G,
  Znamenny notation...), which Python lower-cases or treats as case-ignorable and TF does
  not, or which TF decomposes and Python does not know.
- `FullTokenizer` checks the digit-comma rule on the text an unknown piece covers; here an
  unknown piece is "<unk>" and never matches. They differ only if a digit and "," are both
  missing from the vocabulary, which no ALBERT model has.
- Ties that are not runs of commuting pieces. A text with two best segmentations made of
  the same pieces in another order, such as "828282" (`82 8 282` or `8 282 82`, pieces "8",
  "82", "282") or "3,3,3," (`3,3 , 3,` or `3, 3,3 ,`, before the digit-comma split), has one
  score in exact arithmetic, and each library picks one by its float32 rounding: the same
  digits give equal ids in "x 828282 y". Rarer, two different segmentations whose scores
  differ by less than float32 resolves after a long unbroken run of pieces ("2 44 59" and
  "24 45 9", 1e-4 apart, after 100 one-letter pieces). `canonical_tie_order` covers only
  pieces that are powers of one root; matching the rest here would mean replaying Python
  sentencepiece's Viterbi and its rounding in graph ops, and a rule for such ties would
  have to change `FullTokenizer` too. Fuzzing found them only in words repeated many times
  without a space ("werewerewere...", "3,3,3,...") or periodic digits (about 1 text in
  3,000 of random words, digits and Unicode made to hold such runs); none in 3,000
  documents of 15k characters of Wikipedia and SQuAD text, 20k random numbers with commas
  or 20k random digit strings, with the test model and two trained on that text.

A SavedModel holding these ops needs `import tensorflow_text` before `tf.saved_model.load`,
or loading fails with an unknown-op error (SentencepieceOp).

Shape letters: B batch, P pieces of one text (ragged), S max_seq_length.
"""

from __future__ import annotations

import functools
import itertools
import sys
import unicodedata

import tensorflow as tf
import tensorflow_text as tf_text

from albert.tokenization import SPIECE_UNDERLINE, TokenizerError, load_spm_model, tie_classes

# Nothing here branches on tensor values, and AutoGraph would otherwise rewrite this code
# and tensorflow-text's on every trace (seconds each time).
_graph_only = tf.autograph.experimental.do_not_convert


@functools.cache
def char_class(kind: str) -> str:
    """A RE2 character class holding exactly the code points that Python puts in `kind`."""
    predicate = {
        "space": str.isspace,
        "digit": str.isdigit,
        "combining": unicodedata.combining,
    }[kind]
    codes = range(sys.maxunicode + 1)
    ranges = []
    for code in itertools.compress(codes, map(predicate, map(chr, codes))):
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    parts = "".join(
        f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in ranges
    )
    return f"[{parts}]"


@_graph_only
def normalize_text(strings, do_lower_case=True):
    """`albert.tokenization.preprocess_text` as string ops.

    Args:
        strings: tf.string tensor of any shape, UTF-8.
        do_lower_case: lower-case as `str.lower` does.

    Returns:
        tf.string of the same shape: whitespace collapsed and stripped, NFKD with combining
        marks removed, lower-cased when asked.
    """
    strings = tf.strings.regex_replace(strings, char_class("space") + "+", " ")
    strings = tf.strings.regex_replace(strings, "^ | $", "")
    strings = strip_accents(strings)
    if do_lower_case:
        strings = _lower(strings)
    return strings


@_graph_only
def strip_accents(strings):
    """NFKD with combining marks removed: `preprocess_text`'s accent step alone (no
    whitespace or case change), so a lone decomposed accent ("\u0301") becomes ""."""
    strings = tf_text.normalize_utf8(strings, "NFKD")
    return tf.strings.regex_replace(strings, char_class("combining"), "")


def _lower(strings):
    """`str.lower` on a string tensor of any shape.

    `tf.strings.lower` stops at the first NUL character and drops the rest, so the text is
    split at NULs, lower-cased in parts and joined again (the join cannot take NUL as its
    separator, so each part but the last gets its NUL back first). NUL is neither cased nor
    case-ignorable, so the parts see the same context (final sigma) as the whole text.
    """
    flat = tf.reshape(strings, [-1])  # [N]
    parts = tf.strings.split(flat, sep="\x00")  # [N, (parts)]
    rows = parts.value_rowids()  # [parts]
    is_last = tf.not_equal(rows, tf.concat([rows[1:], [-1]], axis=0))
    lowered = tf.strings.lower(parts.flat_values, encoding="utf-8")
    lowered = tf.strings.join([lowered, tf.where(is_last, "", "\x00")])
    joined = tf.strings.unsorted_segment_join(lowered, rows, num_segments=tf.size(flat))
    return tf.reshape(joined, tf.shape(strings))


class InGraphTokenizer(tf.Module):
    """Raw strings -> SentencePiece ids, in graph, equal to `FullTokenizer`'s ids.

    Args:
        spm_model_file: SentencePiece model (`30k-clean.model`); read once and stored in the
            graph (and in any SavedModel that tracks this object).
        do_lower_case: lower-case the text, as `FullTokenizer(do_lower_case=...)`.

    Raises:
        TokenizerError: the model file is missing or not a SentencePiece model.

    Example:
        >>> tokenizer = InGraphTokenizer("30k-clean.model")
        >>> ids = tokenizer.tokenize(tf.constant(["It costs 1,000."]))  # int32 [1, (P)]
        >>> features = tokenizer.pack([ids], max_seq_length=128)
    """

    def __init__(self, spm_model_file, do_lower_case=True, name=None):
        super().__init__(name=name)
        sp_model = load_spm_model(spm_model_file)
        if sp_model.piece_to_id("[CLS]") == sp_model.unk_id():
            raise TokenizerError(
                f"`spm_model_file` {spm_model_file!r} has no [CLS] piece; train it with "
                "albert.data.vocab (control symbols [CLS], [SEP], [MASK])."
            )
        self.do_lower_case = do_lower_case
        self.cls_id = sp_model.piece_to_id("[CLS]")
        self.sep_id = sp_model.piece_to_id("[SEP]")
        # 0, not the model's <pad> id: fine-tuning's features (and the original's) pad
        # input_ids with 0 whatever id <pad> has.
        self.pad_id = 0
        self._comma_id = sp_model.piece_to_id(",")
        # Per id: its tie class (-1: none) and its length in characters, for the tie order.
        classes = tie_classes(sp_model)
        pieces = [sp_model.id_to_piece(i) for i in range(sp_model.get_piece_size())]
        self._tie_class = tf.constant([classes.get(p, -1) for p in pieces], tf.int64)
        self._piece_length = tf.constant([len(p) for p in pieces], tf.int64)
        self._sp = tf_text.SentencepieceTokenizer(
            model=sp_model.serialized_model_proto(), out_type=tf.int32
        )

    @_graph_only
    def normalize(self, strings):
        """tf.string of any shape -> the same shape, normalised as `preprocess_text`."""
        return normalize_text(strings, self.do_lower_case)

    @_graph_only
    def tokenize(self, strings):
        """Raw text -> ids.

        Args:
            strings: tf.string [B] (or a scalar).

        Returns:
            int32 RaggedTensor [B, (P)] (or a dense [P] for a scalar).
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        if strings.shape.rank == 0:
            return self.tokenize(strings[None])[0]
        ids = self._sp.tokenize(self.normalize(strings))  # [B, (P)]
        return self._canonical_tie_order(self._split_digit_comma(ids))

    def _canonical_tie_order(self, ids):
        """`canonical_tie_order` on ids [B, (P)]: runs of one tie class by ascending length.

        A run never crosses rows, and runs are numbered in flat order, so one stable sort by
        (run, length) reorders pieces inside runs only.
        """
        flat_ids = ids.flat_values  # [N]
        tie_class = tf.gather(self._tie_class, flat_ids)  # [N]
        rows = ids.value_rowids()  # [N]
        continues = (
            (tie_class >= 0)
            & tf.equal(tie_class, tf.concat([[-1], tie_class[:-1]], axis=0))
            & tf.equal(rows, tf.concat([[-1], rows[:-1]], axis=0))
        )  # [N]: same class as the previous piece of the same text
        run = tf.cumsum(tf.cast(tf.logical_not(continues), tf.int64))  # [N]
        key = run * (tf.reduce_max(self._piece_length) + 1) + tf.gather(
            self._piece_length, flat_ids
        )
        order = tf.argsort(key, stable=True)  # [N]
        return ids.with_flat_values(tf.gather(flat_ids, order))

    def _split_digit_comma(self, ids):
        """`encode_pieces`' digit-comma rule on ids [B, (P)] -> [B, (P')].

        Written with flat tensors and one scatter rather than ragged ops: the graph is a
        tenth of the size and traces in a fraction of the time.
        """
        flat_ids = ids.flat_values  # [N]
        pieces = self._sp.id_to_string(flat_ids)  # [N]
        matches = tf.strings.regex_full_match(pieces, f"(?s).*{char_class('digit')},")
        matched = tf.where(matches)[:, 0]  # [M]
        unmatched = tf.where(tf.logical_not(matches))[:, 0]  # [N - M]
        new_ids, new_rows = self._reencode(tf.gather(pieces, matched))  # [R], [R] in [0, M)
        num_matched = tf.shape(matched, out_type=tf.int64)[0]
        row_counts = tf.math.unsorted_segment_sum(tf.ones_like(new_rows), new_rows, num_matched)
        # Piece i becomes counts[i] tokens starting at offsets[i]: one for an unmatched piece,
        # the re-encoded pieces and the comma for a matched one.
        counts = tf.tensor_scatter_nd_update(
            tf.ones_like(flat_ids, tf.int64), matched[:, None], row_counts + 1
        )  # [N]
        offsets = tf.cumsum(counts, exclusive=True)  # [N]
        rank_in_row = tf.range(tf.size(new_rows, out_type=tf.int64)) - tf.gather(
            tf.cumsum(row_counts, exclusive=True), new_rows
        )  # [R]
        matched_offsets = tf.gather(offsets, matched)  # [M]
        positions = tf.concat(
            [
                tf.gather(offsets, unmatched),
                tf.gather(matched_offsets, new_rows) + rank_in_row,
                matched_offsets + row_counts,  # The comma ends each replacement.
            ],
            axis=0,
        )
        values = tf.concat(
            [
                tf.gather(flat_ids, unmatched),
                new_ids,
                tf.fill([num_matched], tf.constant(self._comma_id, tf.int32)),
            ],
            axis=0,
        )
        total = tf.reduce_sum(counts, keepdims=True)
        new_flat_ids = tf.scatter_nd(positions[:, None], values, total)  # [N']
        row_splits = tf.gather(tf.concat([[0], tf.cumsum(counts)], axis=0), ids.row_splits)
        return tf.RaggedTensor.from_row_splits(new_flat_ids, row_splits, validate=False)

    def _reencode(self, pieces):
        """Pieces ending in digit + "," [M] -> ids of their digits re-encoded [R], rows [R].

        Returns the new pieces' ids and, for each, the index of the piece it replaces, in
        order; the comma is added by the caller.
        """
        starts_word = tf.strings.substr(pieces, 0, len(SPIECE_UNDERLINE.encode())) == (
            SPIECE_UNDERLINE
        )
        digits = tf.strings.regex_replace(pieces, ",$", "")
        digits = tf.strings.regex_replace(digits, SPIECE_UNDERLINE, "")
        encoded = self._sp.tokenize(digits)  # [M, (K)]
        new_pieces = self._sp.id_to_string(encoded.flat_values)  # [R0]
        rows = encoded.value_rowids()  # [R0]
        # A piece that did not start a word must not start one after re-encoding: drop the
        # "▁" of the first new piece (the whole piece when it is a lone "▁").
        is_first = tf.equal(
            tf.range(tf.size(rows, out_type=tf.int64)), tf.gather(encoded.row_splits, rows)
        )
        fix = is_first & tf.logical_not(tf.gather(starts_word, rows))
        fix = fix & tf.strings.regex_full_match(new_pieces, f"(?s){SPIECE_UNDERLINE}.*")
        stripped = tf.strings.regex_replace(new_pieces, f"^{SPIECE_UNDERLINE}", "")
        new_pieces = tf.where(fix, stripped, new_pieces)
        kept = tf.where(tf.logical_not(fix & tf.equal(new_pieces, "")))[:, 0]  # [R]
        return self._sp.string_to_id(tf.gather(new_pieces, kept)), tf.gather(rows, kept)

    @_graph_only
    def pack(self, segments, max_seq_length):
        """Ids of one or two segments -> `[CLS] A [SEP] (B [SEP])`; see `pack_inputs`."""
        return pack_inputs(segments, max_seq_length, self.cls_id, self.sep_id, self.pad_id)


@_graph_only
def truncate_segment_lengths(length_a, length_b, max_num_tokens):
    """BERT's `_truncate_seq_pair` in closed form: the lengths left after truncation.

    The original pops the last token of the longer segment (of B on a tie) until the pair
    fits. So a short segment is kept whole and the other takes the rest; if both are long,
    A keeps ceil(T / 2) tokens and B floor(T / 2).

    Args:
        length_a: int [B] lengths of segment A.
        length_b: int [B] lengths of segment B.
        max_num_tokens: T, tokens available for A and B together.

    Returns:
        (new_length_a, new_length_b), int [B] each.
    """
    new_b = tf.minimum(length_b, tf.maximum(max_num_tokens - length_a, max_num_tokens // 2))
    new_a = tf.minimum(length_a, max_num_tokens - new_b)
    return new_a, new_b


@_graph_only
def pack_inputs(segments, max_seq_length, cls_id, sep_id, pad_id=0):
    """Packs one or two tokenized segments into fixed-length model inputs.

    The layout is `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`. Too long inputs lose tokens
    from the end: a single segment is cut to `max_seq_length - 2`; a pair loses tokens from
    its longer segment first (BERT's `_truncate_seq_pair`).

    Args:
        segments: list of one or two int RaggedTensors [B, (P)].
        max_seq_length: S, the padded length.
        cls_id: id of `[CLS]`.
        sep_id: id of `[SEP]`.
        pad_id: id used for padding.

    Returns:
        dict of int32 [B, S]: `input_ids`, `input_mask` (1 for real tokens),
        `segment_ids` (0 for `[CLS] A [SEP]`, 1 for `B [SEP]`).

    Raises:
        ValueError: not one or two segments, or `max_seq_length` leaves no room for text.
    """
    if len(segments) not in (1, 2):
        raise ValueError(f"pack_inputs takes one or two segments. Received: {len(segments)}")
    max_num_tokens = max_seq_length - len(segments) - 1
    if max_num_tokens < 1:
        raise ValueError(
            f"`max_seq_length` must leave room for text after [CLS] and [SEP]. "
            f"Received: max_seq_length={max_seq_length} for {len(segments)} segment(s)"
        )
    segments = [tf.cast(s, tf.int32) for s in segments]
    lengths = [s.row_lengths() for s in segments]
    if len(segments) == 1:
        new_lengths = [tf.minimum(lengths[0], max_num_tokens)]
    else:
        new_lengths = truncate_segment_lengths(*lengths, max_num_tokens)
    segments = [
        tf.ragged.boolean_mask(s, tf.ragged.range(n) < new_n[:, None])
        for s, n, new_n in zip(segments, lengths, new_lengths, strict=True)
    ]
    input_ids, segment_ids = tf_text.combine_segments(segments, cls_id, sep_id)
    input_ids, input_mask = tf_text.pad_model_inputs(input_ids, max_seq_length, pad_id)
    segment_ids, _ = tf_text.pad_model_inputs(segment_ids, max_seq_length, 0)
    return {
        "input_ids": tf.cast(input_ids, tf.int32),
        "input_mask": tf.cast(input_mask, tf.int32),
        "segment_ids": tf.cast(segment_ids, tf.int32),
    }
