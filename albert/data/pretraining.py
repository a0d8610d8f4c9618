"""Pretraining instances: documents -> sentence pairs (SOP / NSP) -> masked batches.

Pure Python and numpy, no TensorFlow, so it runs in worker processes. The algorithm is the
original `create_pretraining_data.py`'s (reference section 5):

1. Each document is walked once per dupe. The target length is `max_seq_length - 3`, or with
   probability `short_seq_prob` a random length in [2, max] (drawn once per document and
   dupe, as the original). Sentences gather into a chunk until it reaches the target or the
   document ends; the chunk splits into A and B at a random sentence boundary.
2. Sentence order prediction (SOP): with probability 0.5 A and B swap (label 1), else they keep
   the order of the text (label 0). A chunk of one sentence takes B from a random other
   document (label 1). With `random_next_sentence` the negative is BERT's NSP instead: B from
   another document with probability 0.5, the unused sentences of the chunk going back.
3. The longer of A and B loses a token from the front or the back (a coin each) until the pair
   fits in `max_seq_length - 3`; the layout is `[CLS] A [SEP] B [SEP]`.
4. Masking: see `albert.data.masking`.

Choices where the original has a quirk:
- Every draw comes from generators the caller seeds per unit of work, so output is
  reproducible (the original's is not).
- The "random other document" comes from the same unit of work (a block of documents of one
  input file), so the corpus never has to be in memory; in a unit of one document it comes
  from that document, like the original's fallback after ten tries.
- The truncation coins are drawn in one go (a binomial count of front cuts per side), which
  has the same distribution as the original's token-by-token loop.
- Instances are shuffled within each (unit, dupe) pass rather than across the whole corpus;
  the driver spreads the passes over the output shards.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from typing import NamedTuple

import numpy as np

from albert.data.masking import InstanceBatch, create_masked_lm_batch
from albert.errors import AlbertError
from albert.tokenization import TokenizerError


class InstanceOptionsError(AlbertError):
    """Instance-creation flags that are out of range."""


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """The original's flags that shape instances; defaults are the original's.

    Attributes:
        max_seq_length: T, tokens per instance including [CLS] and the two [SEP].
        max_predictions_per_seq: P, the most masked tokens per instance.
        masked_lm_prob: fraction of an instance's tokens to mask (before the P cap).
        short_seq_prob: probability of a random target length in [2, T - 3].
        ngram: longest n-gram of whole words to mask.
        favor_shorter_ngram: p(n) proportional to 1/n; False reverses it.
        do_whole_word_mask: mask whole words; False masks single pieces.
        random_next_sentence: BERT's NSP negatives (B from another document) instead of SOP.
        dupe_factor: passes over each document, each drawn and masked anew.

    Example:
        >>> InstanceOptions(max_seq_length=128, dupe_factor=10).validate()
    """

    max_seq_length: int = 512
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True
    random_next_sentence: bool = False
    dupe_factor: int = 40

    def validate(self) -> None:
        """Raises InstanceOptionsError naming the first flag that is out of range."""
        if self.max_seq_length < 5:
            raise InstanceOptionsError(
                f"--max_seq_length must be at least 5 ([CLS] A [SEP] B [SEP]); got {self.max_seq_length}."
            )
        if not 1 <= self.max_predictions_per_seq <= self.max_seq_length:
            raise InstanceOptionsError(
                f"--max_predictions_per_seq must be in [1, max_seq_length={self.max_seq_length}]; "
                f"got {self.max_predictions_per_seq}."
            )
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise InstanceOptionsError(
                f"--masked_lm_prob must be in (0, 1]; got {self.masked_lm_prob}."
            )
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise InstanceOptionsError(
                f"--short_seq_prob must be in [0, 1]; got {self.short_seq_prob}."
            )
        if self.ngram < 1:
            raise InstanceOptionsError(f"--ngram must be at least 1; got {self.ngram}.")
        if self.dupe_factor < 1:
            raise InstanceOptionsError(f"--dupe_factor must be at least 1; got {self.dupe_factor}.")

    def ngram_probabilities(self) -> np.ndarray:
        """[ngram] p(n) for n = 1..ngram: proportional to 1/n, reversed if not favouring short."""
        pvals = 1.0 / np.arange(1, self.ngram + 1)
        pvals /= pvals.sum()
        return pvals if self.favor_shorter_ngram else pvals[::-1].copy()


class Document(NamedTuple):
    """A tokenized document: all sentences' ids back to back.

    Attributes:
        ids: [N] int32 ids of every sentence, concatenated.
        bounds: list of S + 1 offsets; sentence s is ids[bounds[s]:bounds[s + 1]].
    """

    ids: np.ndarray
    bounds: list


class PieceIds:
    """Piece -> id through a dict: `FullTokenizer.convert_tokens_to_ids` without a Python-level
    SentencePiece call per piece (which costs as much as the masking of an instance).

    Args:
        tokenizer: a FullTokenizer (or anything with `vocab` and `convert_tokens_to_ids`).
    """

    def __init__(self, tokenizer):
        self.vocab = tokenizer.vocab
        if getattr(tokenizer, "sp_model", None) is None and "[UNK]" not in self.vocab:
            raise TokenizerError(
                f"`vocab_file` {getattr(tokenizer, 'vocab_file', None)!r} has no [UNK], which "
                "every piece outside it becomes; use a vocab.txt that holds one."
            )
        # A piece no vocabulary holds maps to the unknown id, whichever kind of tokenizer.
        self.unknown_id = tokenizer.convert_tokens_to_ids(["\x00no such piece\x00"])[0]

    def __call__(self, pieces) -> list:
        vocab, unknown_id = self.vocab, self.unknown_id
        return [vocab.get(piece, unknown_id) for piece in pieces]


def tokenize_document(sentences, tokenizer, piece_ids=None) -> Document | None:
    """Sentences (str) -> Document; sentences without tokens are dropped, None if none left.

    Args:
        sentences: list of str.
        tokenizer: a FullTokenizer.
        piece_ids: a PieceIds for `tokenizer` (built here when not given).
    """
    piece_ids = piece_ids or PieceIds(tokenizer)
    sentence_ids = [piece_ids(tokenizer.tokenize(s)) for s in sentences]
    sentence_ids = [ids for ids in sentence_ids if ids]
    if not sentence_ids:
        return None
    bounds = [0, *itertools.accumulate(len(ids) for ids in sentence_ids)]
    ids = np.fromiter(itertools.chain.from_iterable(sentence_ids), np.int32, count=bounds[-1])
    return Document(ids, bounds)


def truncation_counts(len_a: int, len_b: int, max_num_tokens: int) -> tuple[int, int]:
    """How many tokens A and B lose when the longer side is cut one token at a time.

    Ties cut B, as the original (`len(a) > len(b)` picks A). Returns (cut_a, cut_b).
    """
    excess = max(0, len_a + len_b - max_num_tokens)
    gap = min(excess, abs(len_a - len_b))
    cut_a, cut_b = (gap, 0) if len_a > len_b else (0, gap)
    rest = excess - gap  # The two sides are now equal; the cuts alternate, B first.
    return cut_a + rest // 2, cut_b + rest - rest // 2


def _random_segment(documents, document_index, target_b_length, rng):
    """B for a one-sentence chunk or an NSP negative: sentences of another document.

    Returns (document, start, end): whole sentences from a random start in a random other
    document until they reach `target_b_length` tokens (at least one sentence).
    """
    for _ in range(10):  # As the original: try to avoid the current document.
        random_index = rng.randrange(len(documents))
        if random_index != document_index:
            break
    document = documents[random_index]
    bounds = document.bounds
    sentence = rng.randrange(len(bounds) - 1)
    start = bounds[sentence]
    end_index = bisect.bisect_left(bounds, start + target_b_length, lo=sentence + 1)
    return document, start, bounds[min(end_index, len(bounds) - 1)]


def create_pairs_from_document(documents, document_index, options, rng):
    """One pass over `documents[document_index]` -> list of (A ids, B ids, label).

    Args:
        documents: list of Document, the unit of work a random B may come from.
        document_index: which document to walk.
        options: InstanceOptions.
        rng: random.Random.

    Returns:
        Truncated pairs in the order of the document; A and B are [la] / [lb] int32 views with
        la, lb >= 1 and la + lb <= max_seq_length - 3.
    """
    document = documents[document_index]
    bounds = document.bounds
    num_sentences = len(bounds) - 1
    max_num_tokens = options.max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < options.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    pairs = []
    chunk_start = 0  # First sentence of the current chunk.
    i = 0
    while i < num_sentences:
        if i == num_sentences - 1 or bounds[i + 1] - bounds[chunk_start] >= target_seq_length:
            num_chunk = i + 1 - chunk_start
            a_end = chunk_start + (rng.randint(1, num_chunk - 1) if num_chunk >= 2 else 1)
            a = (document, bounds[chunk_start], bounds[a_end])
            if num_chunk == 1 or (options.random_next_sentence and rng.random() < 0.5):
                label = 1
                target_b_length = target_seq_length - (a[2] - a[1])
                b = _random_segment(documents, document_index, target_b_length, rng)
                i = a_end - 1  # The sentences after A go back; the next chunk starts there.
            else:
                b = (document, bounds[a_end], bounds[i + 1])
                label = 0
                if not options.random_next_sentence and rng.random() < 0.5:
                    a, b, label = b, a, 1
            pairs.append((*_truncate_pair(a, b, max_num_tokens, rng), label))
            chunk_start = i + 1
        i += 1
    return pairs


def _truncate_pair(a, b, max_num_tokens, rng):
    """(document, start, end) A and B -> their ids, cut to fit `max_num_tokens` together."""
    (doc_a, start_a, end_a), (doc_b, start_b, end_b) = a, b
    cut_a, cut_b = truncation_counts(end_a - start_a, end_b - start_b, max_num_tokens)
    # Each cut token comes off the front or the back with probability 0.5.
    front_a = rng.getrandbits(cut_a).bit_count() if cut_a else 0
    front_b = rng.getrandbits(cut_b).bit_count() if cut_b else 0
    tokens_a = doc_a.ids[start_a + front_a : end_a - (cut_a - front_a)]
    tokens_b = doc_b.ids[start_b + front_b : end_b - (cut_b - front_b)]
    return tokens_a, tokens_b


def create_instance_batches(documents, options, vocab, rng, np_rng):
    """All instances of one unit of work: one masked, shuffled batch per dupe pass.

    Args:
        documents: list of Document (every one with at least one sentence).
        options: InstanceOptions.
        vocab: albert.data.masking.MaskingVocabulary.
        rng: random.Random, seeded for this unit.
        np_rng: np.random.Generator, seeded for this unit.

    Yields:
        `options.dupe_factor` InstanceBatch objects (some may hold no instance when
        `documents` is empty).
    """
    for _ in range(options.dupe_factor):
        pairs = []
        for index in range(len(documents)):
            pairs.extend(create_pairs_from_document(documents, index, options, rng))
        rng.shuffle(pairs)
        yield create_masked_lm_batch(pairs, options, vocab, np_rng)


__all__ = [
    "Document",
    "InstanceBatch",
    "InstanceOptions",
    "InstanceOptionsError",
    "PieceIds",
    "create_instance_batches",
    "create_pairs_from_document",
    "tokenize_document",
    "truncation_counts",
]
