"""A synthetic corpus for pretraining-data tests: every token knows where it came from."""

import random

import numpy as np

from albert.data.masking import MaskingVocabulary
from albert.data.pretraining import Document

SPECIALS = {"<pad>": 0, "<unk>": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


class NumberedCorpus:
    """Documents whose every token says which document and sentence it comes from.

    Token ids are unique; a piece starts a word ("▁" + letters) or continues one (letters
    only), so words have one or more pieces.
    """

    def __init__(self, num_documents, sentences_per_document, tokens_per_sentence, seed=0):
        rng = random.Random(seed)
        self.vocab = dict(SPECIALS)
        self.origin = {}  # id -> (document, sentence)
        self.documents = []
        for d in range(num_documents):
            sentences = []
            for s in range(rng.choice(sentences_per_document)):
                ids = []
                for t in range(rng.choice(tokens_per_sentence)):
                    starts_word = t == 0 or rng.random() < 0.6
                    piece = ("▁" if starts_word else "") + letters(len(self.vocab))
                    self.origin[len(self.vocab)] = (d, s)
                    ids.append(len(self.vocab))
                    self.vocab[piece] = len(self.vocab)
                sentences.append(ids)
            bounds = np.cumsum([0] + [len(s) for s in sentences]).tolist()
            self.documents.append(Document(np.concatenate(sentences).astype(np.int32), bounds))
        self.masking_vocab = MaskingVocabulary(self.vocab)


def letters(number):
    """A distinct piece of ASCII letters for each number (digits would start a word)."""
    piece = ""
    while True:
        number, digit = divmod(number, 26)
        piece += chr(ord("a") + digit)
        if not number:
            return piece


def origins(corpus, ids):
    """[(document, sentence)] of each id."""
    return [corpus.origin[int(i)] for i in ids]
