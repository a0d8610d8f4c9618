"""FullTokenizer: SentencePiece with the original's text normalisation, WordPiece fallback.

ALBERT's released models tokenize with a SentencePiece unigram model (`30k-clean.model`). Text
goes through `preprocess_text` first: runs of whitespace become one space and the ends are
stripped, NFKD decomposition drops accents (every character with a non-zero canonical
combining class), and the text is lower-cased when `do_lower_case`. Unlike the original,
`FullTokenizer.tokenize` normalises by itself; normalising twice changes nothing, so callers
that still run `preprocess_text` first get the same pieces.

Two choices differ from a peer and are deliberate:
- ``` `` ``` and `''` are left as they are, as in the original. HF transformers' ALBERT
  tokenizer turns both into `"`, so the two disagree on text that holds them.
- The digit-comma rule (see `encode_pieces`) follows the original's intent, which is also
  what HF transformers 4.x's slow `AlbertTokenizer` does. Under Python 3 the original keeps
  a stray "▁" ("1,000" -> `▁ ▁1 , 0 00`); here it is `▁ 1 , 0 00`.

One choice is this project's own: equal-score segmentations. The unigram model scores a
segmentation by the sum of its pieces' scores, so pieces that are powers of one string ("6",
"66"; "a", "aa") can be reordered at no cost: "666" is `6 66` or `66 6`. Python sentencepiece
and tensorflow-text each pick one by float32 rounding and loop order, and they differ (about 1
text in 10,000; "2.666"), so `canonical_tie_order` puts every run of such pieces in ascending
length, the order both libraries give when the sums tie exactly. `InGraphTokenizer` applies
the same rule, so a served model sees the ids it was fine-tuned on. Ids differ from the
original's only on the texts where its sentencepiece broke the tie by rounding.

Without a SentencePiece model the tokenizer falls back to BERT's WordPiece over a `vocab.txt`
(the path the Chinese ALBERT models take).

Example:
    >>> tokenizer = FullTokenizer(spm_model_file="30k-clean.model", do_lower_case=True)
    >>> tokenizer.tokenize("Héllo   World")
    ['▁hello', '▁world']
"""

from __future__ import annotations

import os
import unicodedata

import sentencepiece as spm

from albert.errors import AlbertError
from albert.fileio import is_remote

SPIECE_UNDERLINE = "▁"

# WordPiece gives up on words longer than this and emits [UNK] (BERT's value).
MAX_INPUT_CHARS_PER_WORD = 200


class TokenizerError(AlbertError):
    """A tokenizer file that is missing or unreadable, or no file at all."""


def preprocess_text(inputs: str, remove_space: bool = True, lower: bool = False) -> str:
    """Normalises text as the original did before SentencePiece.

    Args:
        inputs: raw text.
        remove_space: collapse every run of whitespace to one space and strip the ends.
        lower: lower-case the result (the `do_lower_case` flag).

    Returns:
        The normalised text: whitespace collapsed, NFKD with combining marks removed,
        lower-cased when asked. ``` `` ``` and `''` are kept (the original's behaviour).
    """
    outputs = " ".join(inputs.strip().split()) if remove_space else inputs
    if not outputs.isascii():  # NFKD and the mark filter leave ASCII unchanged: skip them
        outputs = unicodedata.normalize("NFKD", outputs)
        outputs = "".join(c for c in outputs if not unicodedata.combining(c))
    if lower:
        outputs = outputs.lower()
    return outputs


def encode_pieces(sp_model: spm.SentencePieceProcessor, text: str, sample: bool = False) -> list:
    """SentencePiece pieces of already normalised `text`, with the digit-comma rule.

    A piece longer than one character that ends in a digit followed by "," is encoded again
    without the comma, and the comma becomes its own piece, so that "1,000" does not glue the
    comma to the number (`▁1,` `000` -> `▁1` `,` `000`). When the original piece did not
    start a word but the re-encoded first piece does, its "▁" is dropped (and a lone "▁"
    piece removed). Equal-score orders of commuting pieces are then made canonical
    (`canonical_tie_order`).

    Args:
        sp_model: a loaded SentencePiece model.
        text: text already passed through `preprocess_text`.
        sample: draw a segmentation (subword regularisation: nbest 64, alpha 0.1) instead of
            taking the best one.

    Returns:
        The list of pieces (str).
    """
    if sample:
        pieces = sp_model.encode(text, out_type=str, enable_sampling=True, nbest_size=64, alpha=0.1)
    else:
        pieces = sp_model.encode(text, out_type=str)
    new_pieces = []
    for piece in pieces:
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            new_pieces.extend(_split_digit_comma(sp_model, piece))
        else:
            new_pieces.append(piece)
    if sample:
        return new_pieces  # A sampled segmentation has no tie to break.
    return canonical_tie_order(new_pieces, tie_classes(sp_model))


def _primitive_root(piece: str) -> str:
    """The shortest string whose repetition is `piece` ("6" for "666", "ab" for "abab")."""
    length = len(piece)
    for period in range(1, length // 2 + 1):
        if length % period == 0 and piece[:period] * (length // period) == piece:
            return piece[:period]
    return piece


def tie_classes(sp_model: spm.SentencePieceProcessor) -> dict:
    """Pieces that can trade places at equal score, grouped by their primitive root.

    Two adjacent pieces can be swapped without changing the text only when they commute
    (xy == yx), that is when both are powers of one root ("6", "66"). Only scored pieces take
    part: control, unknown, unused and byte pieces, and user-defined symbols (score 0, matched
    before any scoring), never tie.

    Returns:
        dict piece -> class index, for every piece whose root has at least two pieces.
    """
    cached = _TIE_CLASSES.get(id(sp_model))
    if cached is None or cached[0] is not sp_model:
        by_root = {}
        for i in range(sp_model.get_piece_size()):
            special = (
                sp_model.is_control(i)
                or sp_model.is_unknown(i)
                or sp_model.is_unused(i)
                or sp_model.is_byte(i)
            )
            if special or sp_model.get_score(i) >= 0.0:
                continue
            piece = sp_model.id_to_piece(i)
            by_root.setdefault(_primitive_root(piece), []).append(piece)
        groups = [pieces for pieces in by_root.values() if len(pieces) > 1]
        if len(_TIE_CLASSES) >= 8:  # A process loads few models; keep the cache small.
            _TIE_CLASSES.clear()
        classes = {piece: c for c, pieces in enumerate(groups) for piece in pieces}
        # The model is kept with its classes so that its id() cannot be reused meanwhile.
        cached = _TIE_CLASSES[id(sp_model)] = (sp_model, classes)
    return cached[1]


_TIE_CLASSES = {}  # id(model) -> (model, tie classes)


def canonical_tie_order(pieces: list, classes: dict) -> list:
    """Sorts every run of adjacent pieces of one tie class by ascending length.

    The run spells the same text in any order and has the same score, so this only picks one
    of several best segmentations, deterministically: "66 6" and "6 66" both become "6 66".

    Args:
        pieces: pieces (str) of one text.
        classes: `tie_classes` of the model.

    Returns:
        The pieces, runs reordered (a new list).
    """
    result, start = list(pieces), 0
    while start < len(result):
        group = classes.get(result[start])
        end = start + 1
        while group is not None and end < len(result) and classes.get(result[end]) == group:
            end += 1
        if end - start > 1:
            result[start:end] = sorted(result[start:end], key=len)
        start = end
    return result


def _split_digit_comma(sp_model, piece):
    """`piece` ends in digit + ","; returns it re-encoded without the comma, then ","."""
    cur_pieces = sp_model.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
    if not piece.startswith(SPIECE_UNDERLINE) and cur_pieces[0].startswith(SPIECE_UNDERLINE):
        if len(cur_pieces[0]) == 1:
            cur_pieces = cur_pieces[1:]
        else:
            cur_pieces[0] = cur_pieces[0][1:]
    return cur_pieces + [piece[-1]]


def _read_bytes(path: str, flag: str) -> bytes:
    """Reads a local file, or a remote one (gs://...) through tf.io.gfile."""
    if is_remote(path):
        import tensorflow as tf  # Only remote paths need TensorFlow.

        if not tf.io.gfile.exists(path):
            raise TokenizerError(f"`{flag}` {path!r} does not exist; check the path.")
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    if not os.path.isfile(path):
        raise TokenizerError(f"`{flag}` {path!r} does not exist; check the path.")
    with open(path, "rb") as f:
        return f.read()


def load_spm_model(spm_model_file: str) -> spm.SentencePieceProcessor:
    """Loads a SentencePiece model, raising TokenizerError with the path if it cannot."""
    proto = _read_bytes(spm_model_file, "spm_model_file")
    sp_model = spm.SentencePieceProcessor()
    try:
        sp_model.LoadFromSerializedProto(proto)
    except (RuntimeError, OSError) as e:
        raise TokenizerError(
            f"`spm_model_file` {spm_model_file!r} is not a SentencePiece model (expected a "
            f"file like 30k-clean.model): {e}"
        ) from None
    return sp_model


def load_vocab(vocab_file: str) -> dict:
    """Reads a WordPiece vocab (one token a line; a SentencePiece .vocab also works).

    As the original's `load_vocab`: lines end at "\\n" only, a line gives its first
    whitespace-separated field (a blank line gives " "), and ids number the distinct tokens
    in order, so a repeated token takes no id of its own.

    Returns:
        dict token -> id: the line number (0-based) when no token repeats.

    Raises:
        TokenizerError: the file is missing, not UTF-8 text, or empty.
    """
    try:
        text = _read_bytes(vocab_file, "vocab_file").decode("utf-8")
    except UnicodeDecodeError:
        raise TokenizerError(
            f"`vocab_file` {vocab_file!r} is not UTF-8 text; pass a vocab.txt with one token a line."
        ) from None
    lines = text.split("\n")  # str.splitlines would also break at \x0c, \x1c, \u2028, ...
    if lines[-1] == "":
        lines.pop()  # The newline that ends the last line.
    vocab = {}
    for line in lines:
        # A .vocab file holds "piece<TAB>score": keep the first field.
        fields = line.split()
        vocab.setdefault(fields[0] if fields else " ", len(vocab))
    if not vocab:
        raise TokenizerError(f"`vocab_file` {vocab_file!r} is empty.")
    return vocab


def casing_mismatch(tokenizer: FullTokenizer) -> str | None:
    """Says when `do_lower_case` does not suit the vocabulary's casing, else None.

    The published ALBERT models' SentencePiece model was trained on lower-cased text: almost
    none of its pieces holds a capital, so text left cased (`--do_lower_case=false`) reads every
    capital as a piece the model never saw in pretraining, with no error and lower scores.
    A vocabulary whose pieces hold capitals (a cased model) is not used by lower-cased text.
    Control symbols (`[CLS]`, `<unk>`, ...) are not counted.

    Args:
        tokenizer: the tokenizer a script built from its flags.

    Returns:
        The warning's text, naming the flag and the file, or None when they agree (or the
        vocabulary holds no cased letters, as a Chinese one).
    """
    pieces = [
        piece
        for piece in tokenizer.vocab
        if (piece[:1], piece[-1:]) not in (("[", "]"), ("<", ">"))
        and any(char.lower() != char.upper() for char in piece)
    ]
    if not pieces:
        return None
    capitalised = sum(any(char.isupper() for char in piece) for piece in pieces)
    share = capitalised / len(pieces)
    file = tokenizer.spm_model_file or tokenizer.vocab_file
    # The published model keeps a few capital letters alone ("Hello" -> "▁ H ello"): under
    # 0.5% of its pieces, not none. A cased vocabulary holds capitals in far more than 2%.
    if not tokenizer.do_lower_case and share < 0.005:
        return (
            f"--do_lower_case=false, but only {capitalised} of the {len(pieces)} pieces of "
            f"{file} hold a capital letter (an uncased vocabulary, as the published ALBERT "
            "models'): capitals are read as pieces the model hardly saw in pretraining; pass "
            "--do_lower_case=true unless the text is already lower-case."
        )
    if tokenizer.do_lower_case and share >= 0.02:
        return (
            f"--do_lower_case=true, but {share:.0%} of the pieces of {file} hold capital "
            "letters (a cased vocabulary) that lower-cased text never uses; pass "
            "--do_lower_case=false if the model was pretrained on cased text."
        )
    return None


class FullTokenizer:
    """Text -> pieces -> ids, as the original ALBERT `FullTokenizer`.

    Args:
        vocab_file: WordPiece `vocab.txt`; used only when `spm_model_file` is not given.
        do_lower_case: lower-case the text (and, for WordPiece, strip accents).
        spm_model_file: SentencePiece model (`30k-clean.model`).

    Raises:
        TokenizerError: neither file is given, or the given one is missing or unreadable.

    Example:
        >>> tokenizer = FullTokenizer(spm_model_file="30k-clean.model")
        >>> tokenizer.convert_tokens_to_ids(tokenizer.tokenize("It costs 1,000."))
    """

    def __init__(self, vocab_file=None, do_lower_case=True, spm_model_file=None):
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.spm_model_file = spm_model_file
        self.sp_model = None
        if spm_model_file:
            self.sp_model = load_spm_model(spm_model_file)
            self.vocab = {
                self.sp_model.id_to_piece(i): i for i in range(self.sp_model.get_piece_size())
            }
        elif vocab_file:
            self.vocab = load_vocab(vocab_file)
        else:
            raise TokenizerError(
                "Pass `spm_model_file` (a SentencePiece .model such as 30k-clean.model) or "
                "`vocab_file` (a WordPiece vocab.txt); neither was given."
            )
        self.inv_vocab = {i: token for token, i in self.vocab.items()}

    def tokenize(self, text) -> list:
        """Normalises `text` (str, or UTF-8 bytes) and splits it into pieces.

        Bytes that are not UTF-8 are dropped, as the original's `convert_to_unicode` does.
        """
        if isinstance(text, bytes):
            text = text.decode("utf-8", "ignore")
        if self.sp_model is not None:
            return encode_pieces(self.sp_model, preprocess_text(text, lower=self.do_lower_case))
        return [
            piece
            for token in basic_tokenize(text, self.do_lower_case)
            for piece in wordpiece_tokenize(token, self.vocab)
        ]

    def convert_tokens_to_ids(self, tokens) -> list:
        """Pieces -> ids; a piece not in the vocabulary maps to the unknown id.

        Raises:
            TokenizerError: a WordPiece token is missing and the vocab has no `[UNK]`.
        """
        if self.sp_model is not None:
            return [self.sp_model.piece_to_id(token) for token in tokens]
        unk_id = self.vocab.get("[UNK]")
        missing = [token for token in tokens if token not in self.vocab]
        if missing and unk_id is None:
            raise TokenizerError(
                f"`vocab_file` {self.vocab_file!r} has neither {missing[0]!r} nor [UNK]; "
                "use the vocab.txt that came with the model."
            )
        return [self.vocab.get(token, unk_id) for token in tokens]

    def convert_ids_to_tokens(self, ids) -> list:
        """Ids -> pieces."""
        return [self.inv_vocab[int(i)] for i in ids]


# --- WordPiece fallback (BERT's BasicTokenizer + WordpieceTokenizer semantics) ------------


def basic_tokenize(text: str, do_lower_case: bool) -> list:
    """Splits text into words and punctuation; CJK characters become words of their own.

    Control and format characters (categories Cc, Cf) are dropped, whitespace splits,
    lower-casing also strips accents (NFD, then every non-spacing mark removed), and each
    punctuation character is a token. Private-use and unassigned characters stay, as in the
    original.
    """
    chars = []
    for char in text:
        if char in "\t\n\r" or unicodedata.category(char) == "Zs":
            chars.append(" ")
        elif ord(char) in (0, 0xFFFD) or unicodedata.category(char) in ("Cc", "Cf"):
            continue
        elif _is_cjk(ord(char)):
            chars.append(f" {char} ")
        else:
            chars.append(char)
    tokens = []
    for word in "".join(chars).split():
        if do_lower_case:
            word = unicodedata.normalize("NFD", word.lower())
            word = "".join(c for c in word if unicodedata.category(c) != "Mn")
        tokens.extend(_split_on_punctuation(word))
    return tokens


def wordpiece_tokenize(word: str, vocab: dict, unk_token: str = "[UNK]") -> list:
    """Greedy longest-match-first split of one word; "##" marks a continuation."""
    if len(word) > MAX_INPUT_CHARS_PER_WORD:
        return [unk_token]
    pieces = []
    start = 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return [unk_token]  # Some part of the word matches nothing.
        pieces.append(piece)
        start = end
    return pieces


def _split_on_punctuation(word):
    tokens, current = [], ""
    for char in word:
        if _is_punctuation(char):
            tokens.extend([current, char] if current else [char])
            current = ""
        else:
            current += char
    return tokens + [current] if current else tokens


def _is_punctuation(char):
    # All non-alphanumeric ASCII counts (BERT's choice: "$", "^", "`" are not Unicode "P*").
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(cp):
    # CJK Unified Ideographs blocks (not Hangul or kana, which are written with spaces).
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )
