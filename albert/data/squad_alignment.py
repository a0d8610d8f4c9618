"""Aligning tokenizer pieces back to characters of the original (un-normalised) text.

SQuAD answers must come back as exact substrings of the context, but the tokenizer only sees
normalised text: whitespace collapsed, NFKD with accents dropped ("Beyoncé" -> "beyonce",
"½" -> "1⁄2", one character becoming several), lower-cased, and inside SentencePiece NFKC
again (Hangul jamo recomposed) and the digit-comma rule re-splitting pieces. The alignment
runs in two steps:

1. `normalize_with_offsets` rebuilds the normalised text one original character at a time,
   so every normalised character knows the original character it came from (exact).
2. `align_strings` matches the non-space characters of the pieces ("▁" dropped, and
   WordPiece's "##") to those of that normalised text. They are almost always equal (a
   linear check); where they are not (characters SentencePiece drops or changes, WordPiece's
   [UNK]), `difflib` aligns the differing stretch and a replaced stretch is shared out
   among its characters in proportion.

`align_tokens` combines the two: each token gets the first and last original character it
covers. Guarantee (tested): the slice `text[start[i]:end[j] + 1]` for tokens i <= j holds
every original character whose normalised form went into tokens i..j, and nothing outside
the characters of those tokens, except that one original character expanding into several
normalised ones ("ﬁ" -> "fi") is taken whole, and characters that normalise to nothing (a
decomposed accent) belong to the token before them. Inside a stretch where pieces and text
differ, the proportional share makes token boundaries approximate (each piece of a replaced
stretch still gets at least one of its characters). A token with no non-space character (the "▁" SentencePiece
puts before a word it splits off) gets an empty span: `end == start - 1`.
"""

from __future__ import annotations

import difflib
import unicodedata

SPIECE_UNDERLINE = "▁"


def normalize_with_offsets(text: str, do_lower_case: bool):
    """Normalises `text` as the tokenizer does, keeping where each character came from.

    Each character goes through NFKD with combining marks dropped, the whole text is
    lower-cased at once (as `str.lower` on the original text, so a word-final "Σ" becomes
    "ς"), then each character's result is put through the NFKC that SentencePiece applies
    (which recomposes the Hangul syllables NFKD split into jamo).

    Args:
        text: the original text.
        do_lower_case: the tokenizer's lower-casing.

    Returns:
        (normalized, offsets): `normalized[i]` came from `text[offsets[i]]`. A run of
        whitespace becomes one space that points at the run's first character; leading and
        trailing whitespace is dropped.
    """
    segments = []  # (index in text, its normalised characters).
    pending_space, seen_text = None, False  # First whitespace of a run not yet emitted.
    for index, char in enumerate(text):
        if char.isspace():  # The same characters str.split() splits on.
            if pending_space is None:
                pending_space = index
            continue
        if pending_space is not None and seen_text:
            segments.append((pending_space, " "))
        pending_space, seen_text = None, True
        form = unicodedata.normalize("NFKD", char)
        segments.append((index, "".join(c for c in form if not unicodedata.combining(c))))
    if do_lower_case:
        segments = _lower_whole(segments)
    chars, offsets = [], []
    for index, form in segments:
        for normal_char in unicodedata.normalize("NFKC", form):
            chars.append(normal_char)
            offsets.append(index)
    return "".join(chars), offsets


def _lower_whole(segments):
    """Lower-cases the segments' text as one string (context-sensitive final sigma).

    After NFKD no character lower-cases to a different length (U+0130 "İ" is decomposed
    already), so the result splits back at the same places; should one ever do so, each
    segment is lower-cased alone instead.
    """
    joined = "".join(form for _, form in segments)
    lowered = joined.lower()
    if len(lowered) != len(joined):
        return [(index, form.lower()) for index, form in segments]
    result, position = [], 0
    for index, form in segments:
        result.append((index, lowered[position : position + len(form)]))
        position += len(form)
    return result


def token_characters(tokens, wordpiece: bool = False) -> tuple:
    """The characters each token stands for, joined, and the token of every character.

    SentencePiece's "▁" becomes a space; with `wordpiece`, the "##" continuation mark is
    dropped (a SentencePiece piece such as "##" or "##x" is text and kept whole).

    Returns:
        (token_text, char_to_token): `token_text[k]` belongs to token `char_to_token[k]`.
    """
    chars, char_to_token = [], []
    for index, token in enumerate(tokens):
        if wordpiece and token.startswith("##"):
            surface = token[2:]
        else:
            surface = token.replace(SPIECE_UNDERLINE, " ")
        chars.append(surface)
        char_to_token.extend([index] * len(surface))
    return "".join(chars), char_to_token


def align_strings(source: str, target: str) -> list:
    """For each character of `source`, the range of `target` characters it matches.

    Args:
        source: the pieces' characters.
        target: the normalised text.

    Returns:
        list of (lo, hi) per source character, target[lo:hi] (lo == hi: matches nothing).
        Ranges never go backwards.
    """
    if source == target:
        return [(i, i + 1) for i in range(len(source))]
    ranges = [(0, 0)] * len(source)
    # Trim the common prefix and suffix: differences are local, difflib is quadratic.
    prefix = 0
    limit = min(len(source), len(target))
    while prefix < limit and source[prefix] == target[prefix]:
        ranges[prefix] = (prefix, prefix + 1)
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and source[-1 - suffix] == target[-1 - suffix]:
        suffix += 1
    for k in range(suffix):
        ranges[len(source) - 1 - k] = (len(target) - 1 - k, len(target) - k)
    middle_source = source[prefix : len(source) - suffix]
    middle_target = target[prefix : len(target) - suffix]
    matcher = difflib.SequenceMatcher(None, middle_source, middle_target, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        i1, i2, j1, j2 = i1 + prefix, i2 + prefix, j1 + prefix, j2 + prefix
        if tag == "equal":
            for k in range(i2 - i1):
                ranges[i1 + k] = (j1 + k, j1 + k + 1)
        elif tag == "replace":
            _share_out(ranges, i1, i2, j1, j2)
        elif tag == "delete":  # Source characters with no counterpart.
            for k in range(i1, i2):
                ranges[k] = (j1, j1)
        # "insert": target characters no piece claims (e.g. a character SentencePiece
        # drops); they stay outside every token.
    return ranges


def _share_out(ranges, i1, i2, j1, j2):
    """Source[i1:i2] replaced target[j1:j2]: give each source character its share, in order."""
    m, n = i2 - i1, j2 - j1
    for k in range(m):
        lo = j1 + k * n // m
        hi = max(lo + 1, j1 + (k + 1) * n // m)  # Every source character gets >= 1.
        ranges[i1 + k] = (lo, min(hi, j2))


def align_tokens(text: str, tokens, do_lower_case: bool, wordpiece: bool = False) -> tuple:
    """The original characters each token covers.

    Only non-space characters are aligned: spaces are frequent on both sides and would let
    `difflib` pair the wrong ones, and no answer starts or ends with one.

    Args:
        text: the original text the tokens were made from.
        tokens: the tokenizer's pieces of `text`.
        do_lower_case: the tokenizer's lower-casing.
        wordpiece: the tokens are WordPiece's (a leading "##" marks a continuation);
            False for SentencePiece pieces.

    Returns:
        (starts, ends): lists of ints, one per token; token i covers `text[starts[i]:
        ends[i] + 1]`. A token with no non-space character (a lone "▁") has an empty span
        placed just after the previous token: `ends[i] == starts[i] - 1`.
    """
    normalized, offsets = normalize_with_offsets(text, do_lower_case)
    kept = [i for i, char in enumerate(normalized) if char != " "]
    target = "".join(normalized[i] for i in kept)
    target_offsets = [offsets[i] for i in kept]
    token_text, char_to_token = token_characters(tokens, wordpiece)
    source_tokens = [t for char, t in zip(token_text, char_to_token, strict=True) if char != " "]
    ranges = align_strings(token_text.replace(" ", ""), target)
    first = [None] * len(tokens)  # First and last target index of each token.
    last = [None] * len(tokens)
    for token_index, (lo, hi) in zip(source_tokens, ranges, strict=True):
        if hi > lo:
            if first[token_index] is None:
                first[token_index] = lo
            last[token_index] = hi - 1
    end_of = _silent_extension(text, offsets)
    starts, ends = [], []
    previous_end = -1
    for lo, hi in zip(first, last, strict=True):
        if lo is None:
            starts.append(previous_end + 1)
            ends.append(previous_end)
        else:
            starts.append(target_offsets[lo])
            ends.append(end_of[target_offsets[hi]])
            previous_end = ends[-1]
    return starts, ends


def _silent_extension(text, offsets):
    """end_of[i]: i, or further when the characters after i normalise to nothing.

    A decomposed accent ("e" + U+0301) leaves no trace in the normalised text; the token of
    the "e" must still end after the accent, or the answer would lose it.
    """
    emitting = set(offsets)
    end_of = list(range(len(text)))
    for i in range(len(text) - 2, -1, -1):
        following = text[i + 1]
        if i + 1 not in emitting and not following.isspace():
            end_of[i] = end_of[i + 1]
    return end_of


def char_span_to_token_span(starts, ends, char_start: int, char_end: int):
    """Token indices (first, last) of the smallest token span covering [char_start, char_end].

    Args:
        starts, ends: from `align_tokens`.
        char_start, char_end: first and last character (inclusive) of the answer.

    Returns:
        (first, last), or None when no non-empty token lies inside the characters (an
        answer made only of whitespace or of characters the tokenizer drops).
    """
    first = last = None
    for index, (start, end) in enumerate(zip(starts, ends, strict=True)):
        if end < start:
            continue  # Empty token: never an answer boundary.
        if first is None and end >= char_start:
            first = index
        if start <= char_end:
            last = index
    if first is None or last is None or last < first:
        return None
    return first, last
