"""RACE: the reader for the released layout, multiple-choice features, accuracy per level.

The release unpacks to `RACE/{train,dev,test}/{middle,high}/*.txt`, each file one article in
JSON: `{"article", "questions": [...], "options": [[4 strings], ...], "answers": ["A", ...],
"id"}`; a file may also hold one such article per line (JSON Lines), as the original reads. Every question becomes one `RaceExample`; `--high_only` / `--middle_only` keep one
level (the paper reports both and their union).

Each of the 4 choices is packed as `[CLS] article [SEP] question+option [SEP]`, as the
original: the option replaces the blank "_" when the question has one, otherwise it follows
the question after a space; question+option keeps its LAST `max_qa_length` tokens (the end,
where the option is, matters most) and the article its first tokens that still fit. The model
(`AlbertMultipleChoice`) takes arrays [C=4, T] and gives logits [C].

Example:
    >>> data = load_features("data", "dev", tokenizer, max_seq_length=512, cache_dir="cache")
    >>> data.dataset.batch(8)   # input_ids [8, 4, 512], label_ids [8], ...
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np
import tensorflow as tf
from absl import logging

from albert import fileio
from albert.data import features as feature_lib
from albert.errors import AlbertError
from albert.progress import Progress

LEVELS = ("middle", "high")
SPLITS = ("train", "dev", "test")
ANSWER_LETTERS = "ABCD"
NUM_CHOICES = len(ANSWER_LETTERS)


class RaceDataError(AlbertError):
    """A RACE directory, file or setting that cannot be read or packed."""


@dataclasses.dataclass
class RaceExample:
    """One question of one article.

    Attributes:
        example_id: `{file id}-{question index}`, e.g. "high1234.txt-0"; a file without
            "id" is identified by level and name, e.g. "high/12.txt-0".
        article, question: the texts.
        options: the 4 answer options.
        label: index of the right option (0..3).
        level: "middle" or "high".
    """

    example_id: str
    article: str
    question: str
    options: list
    label: int
    level: str


def race_levels(high_only=False, middle_only=False) -> tuple:
    """The levels to read: both, or one of them."""
    if high_only and middle_only:
        raise RaceDataError("Pass at most one of --high_only and --middle_only.")
    if high_only:
        return ("high",)
    if middle_only:
        return ("middle",)
    return LEVELS


def _race_root(data_dir):
    """`data_dir/RACE` when present (the original's layout), else `data_dir` itself."""
    nested = os.path.join(data_dir, "RACE")
    return nested if tf.io.gfile.isdir(nested) else data_dir


def race_files(data_dir, split, levels) -> list:
    """(level, path) of every article file of a split, sorted by level then file name.

    Raises:
        RaceDataError: an unknown split, or a missing split/level directory.
    """
    if split not in SPLITS:
        raise RaceDataError(f"RACE split must be one of {', '.join(SPLITS)}; got {split!r}.")
    root = _race_root(data_dir)
    files = []
    for level in levels:
        directory = os.path.join(root, split, level)
        if not tf.io.gfile.isdir(directory):
            raise RaceDataError(
                f"RACE directory {directory!r} does not exist; --data_dir must hold "
                "RACE/{train,dev,test}/{middle,high}/*.txt as released."
            )
        names = sorted(n for n in tf.io.gfile.listdir(directory) if n.endswith(".txt"))
        files.extend((level, os.path.join(directory, name)) for name in names)
    return files


def _read_articles(path, level):
    """The examples of one RACE file: one JSON article (the release), or one article per
    line (JSON Lines), as the original reads each line of a file."""
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            # "utf-8-sig": a byte-order mark (Windows editors, PowerShell) is not a JSON error.
            text = f.read().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise RaceDataError(f"RACE file {path!r} is not valid UTF-8 JSON ({e}).") from None
    try:
        return _read_article(path, level, json.loads(text), default_id=None)
    except json.JSONDecodeError as e:
        # Lines end at "\n" only, as the original's file iteration: str.splitlines would also
        # cut at U+2028, U+0085 or \x1c, which a JSON string may hold unescaped.
        # Numbered before blank lines are left out: "line N" is the editor's line N.
        lines = [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
        if e.msg != "Extra data" or len(lines) < 2:
            raise RaceDataError(f"RACE file {path!r} is not valid UTF-8 JSON ({e}).") from None
    examples = []
    for number, line in lines:
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise RaceDataError(
                f"RACE file {path!r} line {number} is not one JSON article ({e})."
            ) from None
        examples.extend(_read_article(path, level, data, default_id=f"line{number}"))
    return examples


def _read_article(path, level, data, default_id):
    """The examples of one RACE article, `data` (parsed JSON) from the file `path`."""
    try:
        questions, options, answers = data["questions"], data["options"], data["answers"]
        article = data["article"]
    except (KeyError, TypeError) as e:
        raise RaceDataError(
            f"RACE file {path!r} lacks the key {e}; each file needs article, questions, "
            "options and answers."
        ) from None
    if not all(isinstance(v, list) for v in (questions, options, answers)):
        raise RaceDataError(
            f"RACE file {path!r} must hold lists under questions, options and answers."
        )
    # A null or a number would otherwise fail in the tokenizer, as a traceback.
    if not isinstance(article, str):
        raise RaceDataError(f"RACE file {path!r} has the article {article!r:.40}, not a string.")
    if not len(questions) == len(options) == len(answers):
        raise RaceDataError(
            f"RACE file {path!r} has {len(questions)} questions, {len(options)} option lists "
            f"and {len(answers)} answers; they must be equally many."
        )
    # Released files carry "id" (e.g. "high1234.txt"); without one, the level and file name
    # (and line) identify the article as the released layout does (middle/12.txt and
    # high/12.txt differ).
    file_id = f"{level}/{os.path.basename(path)}" + (f":{default_id}" if default_id else "")
    file_id = data.get("id") or file_id
    examples = []
    for index, (question, choices, answer) in enumerate(
        zip(questions, options, answers, strict=True)
    ):
        valid_answer = isinstance(answer, str) and len(answer) == 1 and answer in ANSWER_LETTERS
        if not isinstance(choices, list) or len(choices) != NUM_CHOICES or not valid_answer:
            raise RaceDataError(
                f"RACE file {path!r} question {index} has options {choices!r} and answer "
                f"{answer!r}; expected a list of 4 options and an answer among A, B, C, D."
            )
        if not isinstance(question, str) or not all(isinstance(c, str) for c in choices):
            raise RaceDataError(
                f"RACE file {path!r} question {index} is {question!r:.40} with options "
                f"{choices!r:.80}; the question and each option must be a string."
            )
        examples.append(
            RaceExample(
                f"{file_id}-{index}",
                article,
                question,
                list(choices),
                ANSWER_LETTERS.index(answer),
                level,
            )
        )
    return examples


def read_race_examples(data_dir, split, high_only=False, middle_only=False) -> list:
    """Every question of a RACE split.

    Args:
        data_dir: directory holding `RACE/` (or the `RACE` directory itself).
        split: "train", "dev" or "test".
        high_only, middle_only: keep one level.

    Returns:
        list of `RaceExample`, middle before high, files in name order.

    Raises:
        RaceDataError: a missing directory, a malformed file, or two files with one id
            (both named in the message).
    """
    examples, files_by_id = [], {}
    for level, path in race_files(data_dir, split, race_levels(high_only, middle_only)):
        article_examples = _read_articles(path, level)
        for example in article_examples:
            other = files_by_id.setdefault(example.example_id, path)
            if other != path:
                raise RaceDataError(
                    f"RACE files {other!r} and {path!r} both give the question id "
                    f'{example.example_id!r}; give each article file its own "id".'
                )
        examples.extend(article_examples)
    return examples


def question_with_option(question: str, option: str) -> str:
    """The option fills the blank "_" when the question has one, else follows it."""
    if "_" in question:
        return question.replace("_", option)
    return f"{question} {option}"


def check_max_qa_length(max_qa_length: int, max_seq_length: int) -> None:
    """Raises RaceDataError when question+option's `max_qa_length` tokens leave no room for
    the 3 special tokens in `max_seq_length` (or is not positive)."""
    if max_qa_length < 1 or max_qa_length > max_seq_length - 3:
        raise RaceDataError(
            f"--max_qa_length={max_qa_length} must be between 1 and --max_seq_length - 3 = "
            f"{max_seq_length - 3} (3 special tokens)."
        )


def convert_examples_to_features(examples, tokenizer, max_seq_length=512, max_qa_length=128):
    """Packs every choice of every example.

    Args:
        examples: list of `RaceExample`.
        tokenizer: an `albert.tokenization.FullTokenizer` (vocabulary with [CLS], [SEP]).
        max_seq_length: T.
        max_qa_length: question+option keeps its last this many tokens.

    Returns:
        list of dicts: `input_ids`, `input_mask`, `segment_ids` (C*T ints, choice-major:
        reshape to [C, T]), `label_ids` (0..3), `is_real_example` (1).

    Raises:
        RaceDataError: max_qa_length leaves no room for the special tokens.
    """
    check_max_qa_length(max_qa_length, max_seq_length)
    cls_id, sep_id = feature_lib.special_token_ids(tokenizer)
    features, cached_article = [], (None, None)
    progress = Progress("RACE: tokenized", len(examples), "questions")  # 88k: minutes
    for example in examples:
        progress.update()
        if cached_article[0] != example.article:  # Questions of one article share it.
            article_ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.article))
            cached_article = (example.article, article_ids)
        article_ids = cached_article[1]
        choices = []
        for option in example.options:
            qa_tokens = tokenizer.tokenize(question_with_option(example.question, option))
            qa_ids = tokenizer.convert_tokens_to_ids(qa_tokens[-max_qa_length:])
            context_ids = article_ids[: max_seq_length - 3 - len(qa_ids)]
            choices.append(
                feature_lib.pack_segments(
                    context_ids, qa_ids, max_seq_length, cls_id, sep_id, pair=True
                )
            )
        features.append(
            {
                name: [value for choice in choices for value in choice[name]]
                for name in ("input_ids", "input_mask", "segment_ids")
            }
            | {"label_ids": example.label, "is_real_example": 1}
        )
    return features


@dataclasses.dataclass
class RaceFeatures:
    """What `load_features` returns.

    Attributes:
        examples: the `RaceExample`s, in the dataset's order.
        dataset: unbatched `tf.data.Dataset` of dicts: `input_ids`, `input_mask`,
            `segment_ids` [C, T] int32, `label_ids` and `is_real_example` int32 scalars.
        num_examples: elements of `dataset`.
        from_cache: whether the features were read from `cache_dir`.
        path: the feature TFRecord file, or None without a cache.
    """

    examples: list
    dataset: tf.data.Dataset
    num_examples: int
    from_cache: bool
    path: str | None


def _cache_path(cache_dir, files, split, levels, tokenizer, max_seq_length, max_qa_length):
    digest = hashlib.sha256(feature_lib.tokenizer_fingerprint(tokenizer).encode())
    for _, path in files:
        digest.update(os.path.basename(path).encode())
        feature_lib.file_fingerprint(path, digest)
    name = (
        f"race_{split}_{'_'.join(levels)}_seq{max_seq_length}_qa{max_qa_length}_"
        f"{digest.hexdigest()[:12]}.tfrecord"
    )
    return os.path.join(cache_dir, name)


def load_features(
    data_dir,
    split,
    tokenizer,
    max_seq_length=512,
    max_qa_length=128,
    high_only=False,
    middle_only=False,
    cache_dir=None,
) -> RaceFeatures:
    """A RACE split as a dataset of [C, T] features, tokenized at most once per cache.

    Args:
        data_dir, split, high_only, middle_only: see `read_race_examples`.
        tokenizer, max_seq_length, max_qa_length: see `convert_examples_to_features`.
        cache_dir: directory of the feature cache (its file name hashes the data files, the
            tokenizer and the settings), or None to keep the features in memory.

    Returns:
        A `RaceFeatures`.
    """
    levels = race_levels(high_only, middle_only)
    examples = read_race_examples(data_dir, split, high_only, middle_only)
    if not examples:
        raise RaceDataError(f"The RACE {split} split under {data_dir!r} has no question.")
    path = None
    if cache_dir:
        files = race_files(data_dir, split, levels)
        path = _cache_path(
            cache_dir, files, split, levels, tokenizer, max_seq_length, max_qa_length
        )
    cached = feature_lib.load_or_create_features(
        path,
        lambda: convert_examples_to_features(examples, tokenizer, max_seq_length, max_qa_length),
    )

    def to_choices(feature):  # [C * T] -> [C, T]
        for name in ("input_ids", "input_mask", "segment_ids"):
            feature[name] = tf.reshape(feature[name], (NUM_CHOICES, max_seq_length))
        return feature

    logging.info(
        "RACE %s (%s): %d questions %s.",
        split,
        "+".join(levels),
        cached.num_examples,
        f"read from {path}" if cached.from_cache else "tokenized",
    )
    dataset = cached.dataset.map(tf.autograph.experimental.do_not_convert(to_choices))
    return RaceFeatures(examples, dataset, cached.num_examples, cached.from_cache, path)


def _predicted_options(examples, predictions):
    """[N] option indices from [N] indices or [N, C] logits, checked against the examples."""
    predicted = np.asarray(predictions)
    if predicted.ndim == 2:
        predicted = predicted.argmax(axis=-1)
    if len(predicted) != len(examples):
        raise RaceDataError(
            f"Got {len(predicted)} predictions for {len(examples)} RACE examples; predict "
            "every example (and drop batch padding) first."
        )
    return predicted


def accuracy_by_level(examples, predictions) -> dict:
    """Accuracy overall and per level.

    Args:
        examples: the `RaceExample`s.
        predictions: predicted option per example ([N] ints) or logits [N, C].

    Returns:
        dict with `accuracy` and `num_examples`, and `{level}_accuracy` and
        `{level}_num_examples` for each level present.
    """
    predicted = _predicted_options(examples, predictions)
    labels = np.asarray([example.label for example in examples])
    levels = np.asarray([example.level for example in examples])
    correct = predicted == labels
    result = {"accuracy": float(correct.mean()), "num_examples": len(examples)}
    for level in LEVELS:
        selected = levels == level
        if selected.any():
            result[f"{level}_accuracy"] = float(correct[selected].mean())
            result[f"{level}_num_examples"] = int(selected.sum())
    return result


def write_predictions(path, examples, predictions) -> None:
    """Writes `{example_id: "A".."D"}` as JSON, atomically (any tf.io.gfile path).

    Args:
        path: the JSON file to write.
        examples: the `RaceExample`s.
        predictions: predicted option per example ([N] ints) or logits [N, C].
    """
    predicted = _predicted_options(examples, predictions)
    letters = {
        ex.example_id: ANSWER_LETTERS[int(p)] for ex, p in zip(examples, predicted, strict=True)
    }
    fileio.write_text(path, json.dumps(letters, indent=1))
