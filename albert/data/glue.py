"""GLUE readers: the GLUE TSV files -> `InputExample`s -> features -> cached datasets.

Each task reads the files of the GLUE download (`download_glue_data.py` layout), from
`--data_dir` itself or from its task folder (`--data_dir=glue/` finds `glue/MRPC/train.tsv`,
as the original ALBERT expects; `--data_dir=glue/MRPC` works too). The tasks, their files,
columns and labels are the table of `albert.glue_tasks` (re-exported here: `get_task`,
`TASKS`, `GlueTask`, `GlueDataError`, `MNLI_LABELS`).

Files are split on tabs only, without csv quoting: MRPC and others hold unbalanced `"` that a
quoting reader would glue across lines. Every row must have as many columns as the header (a
tab inside a sentence would shift them), else it is an error naming the file and line, except
in QQP's train and dev files, which hold a few malformed rows: these are skipped (as the
original does) and counted in a warning. A file whose first line is a data row where a header
belongs, an STS-B score outside [0, 5] and a binary (non-UTF-8) file are errors too. Test
examples keep the file's index column as their `guid`, which is the `index` of the GLUE
submission file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os

import tensorflow as tf
from absl import logging

from albert.data.features import (
    file_fingerprint,
    load_or_create_features,
    pack_segments,
    special_token_ids,
    tokenizer_fingerprint,
)
from albert.fileio import is_remote
from albert.glue_tasks import MNLI_LABELS as MNLI_LABELS
from albert.glue_tasks import STSB_SCORE_RANGE, GlueDataError, get_task
from albert.glue_tasks import TASKS as TASKS
from albert.glue_tasks import GlueTask as GlueTask
from albert.progress import Progress

SPLITS = ("train", "dev", "test")


@dataclasses.dataclass(frozen=True)
class InputExample:
    """One GLUE example.

    Attributes:
        guid: the file's index column (test: the submission's `index`), or `{split}-{line}`
            for files without one.
        text_a: the first sentence.
        text_b: the second sentence, or None for single-sentence tasks.
        label: a label string, a float score (STS-B), or None (test).
    """

    guid: str
    text_a: str
    text_b: str | None = None
    label: str | float | None = None


def find_data_file(task, data_dir, split):
    """The path of a task's split file under `data_dir` or its GLUE task folder.

    Raises:
        GlueDataError: the split does not exist for the task, or no candidate file exists.
    """
    if split not in SPLITS:
        raise GlueDataError(f"Unknown split {split!r}; choose one of {', '.join(SPLITS)}.")
    if split not in task.files:
        raise GlueDataError(
            f"GLUE task {task.name} has only a test set; fine-tune and evaluate with "
            "--task_name=mnli, then predict ax with that model."
        )
    directories = [data_dir, os.path.join(data_dir, task.folder)]
    candidates = [os.path.join(d, name) for d in directories for name in task.files[split]]
    for path in candidates:
        if tf.io.gfile.exists(path):
            return path
    raise GlueDataError(
        f"No {task.name} {split} file in --data_dir={data_dir} (looked for "
        f"{', '.join(candidates)}); point --data_dir at the GLUE data of {task.folder}."
    )


def _open_text(path):
    # tf.io.gfile also reads gs:// and other file systems, but is ~10x slower per line.
    if is_remote(path):
        return tf.io.gfile.GFile(path, "r")
    # Lines end at "\n" only: a stray "\r" inside a field must not split the row.
    return open(path, encoding="utf-8", newline="\n")


def _read_rows(path):
    """(line number, columns) of every non-empty line; tabs only, no quoting.

    Raises:
        GlueDataError: the file is not UTF-8 text (a binary or UTF-16 file).
    """
    line_number = 0
    try:
        with _open_text(path) as f:
            for line_number, line in enumerate(f, start=1):
                # Lines end at "\n" only, so a CR-only file is one line: one garbled row
                # (its fields run across the CRs) or none, read without an error.
                if line_number == 1 and not line.endswith("\n") and "\r" in line.rstrip("\r"):
                    raise GlueDataError(
                        f"{path} has CR (\\r) line endings, as old Mac editors write; convert "
                        "it to \\n (or \\r\\n) line endings, e.g. tr '\\r' '\\n'."
                    )
                line = line.rstrip("\r\n")
                if line_number == 1:
                    line = line.lstrip("\ufeff")  # a UTF-8 byte order mark
                if "\x00" in line:
                    raise GlueDataError(_not_text_message(path, line_number))
                if line:
                    yield line_number, line.split("\t")
    except UnicodeError:
        raise GlueDataError(_not_text_message(path, _first_undecodable_line(path))) from None


def _first_undecodable_line(path):
    """The number of the first line that is not UTF-8. The text reader decodes blocks of
    thousands of bytes, so the line it had reached when decoding failed can be far off."""
    with tf.io.gfile.GFile(path, "rb") as f:
        for line_number, line in enumerate(f.read().split(b"\n"), start=1):
            try:
                line.decode("utf-8")
            except UnicodeError:
                return line_number
            if b"\x00" in line:  # binary or UTF-16, as `_read_rows` counts it
                return line_number
    return 1


def _not_text_message(path, line_number):
    return (
        f"{path} line {line_number} is not UTF-8 text: is it a binary, UTF-16 or Latin-1 "
        "file? Pass the GLUE TSV file as downloaded (UTF-8)."
    )


def _parse_label(task, raw, path, line_number):
    if task.is_regression:
        try:
            score = float(raw)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise GlueDataError(
                f"{path} line {line_number} has the score {raw!r}, which is not a number."
            )
        if not STSB_SCORE_RANGE[0] <= score <= STSB_SCORE_RANGE[1]:
            raise GlueDataError(
                f"{path} line {line_number} has the score {raw!r}, outside {task.folder}'s "
                f"range [{STSB_SCORE_RANGE[0]}, {STSB_SCORE_RANGE[1]}]."
            )
        return score
    if raw not in task.labels:
        raise GlueDataError(
            f"{path} line {line_number} has the label {raw!r}, but {task.name} labels are "
            f"{', '.join(task.labels)}; is this the {task.folder} file?"
        )
    return raw


def read_examples(task_name, data_dir, split):
    """The `InputExample`s of one split of a GLUE task, in file order.

    Args:
        task_name: a `--task_name` (see `get_task`).
        data_dir: the GLUE directory, or the task's folder in it.
        split: "train", "dev" or "test" (test examples have label None).

    Returns:
        list of `InputExample`.

    Raises:
        GlueDataError: an unknown task or split, a missing file, a row without a needed
            column (outside QQP), or an unknown label.
    """
    task = get_task(task_name)
    path = find_data_file(task, data_dir, split)
    columns = task.test_columns if split == "test" else task.train_columns
    required = columns.required()
    # A skipped test row would be missing from the submission, so only train/dev rows skip.
    skip_malformed = task.skip_malformed and split != "test"
    examples, num_columns, skipped = [], None, 0
    for line_number, row in _read_rows(path):
        if num_columns is None:
            # Every row has as many columns as the header (or, without one, the first row).
            num_columns = len(row)
            if columns.header:
                _check_header(task, columns, row, path, split)
                continue
        if skip_malformed and len(row) != num_columns:
            skipped += 1
            continue
        for field, count in required:
            if len(row) < count:
                raise GlueDataError(
                    f"{path} line {line_number} has {len(row)} tab-separated columns, but "
                    f"{task.name} needs {count} to read its {field}; is this the "
                    f"{task.folder} {split} file?"
                )
        if len(row) != num_columns:
            raise GlueDataError(
                f"{path} line {line_number} has {len(row)} tab-separated columns, but "
                f"{'the header' if columns.header else 'line 1'} has {num_columns}; a tab "
                "inside a sentence shifts the columns: replace it with a space."
            )
        guid = row[columns.index] if columns.index is not None else f"{split}-{line_number}"
        text_b = row[columns.text_b] if columns.text_b is not None else None
        label = None
        if columns.label is not None:
            label = _parse_label(task, row[columns.label], path, line_number)
        examples.append(InputExample(guid, row[columns.text_a], text_b, label))
    if skipped:
        logging.warning(
            "Skipped %d malformed rows of %s (column count unlike the header's).", skipped, path
        )
    return examples


def _check_header(task, columns, row, path, split):
    """Raises GlueDataError when the first line of a file with a header is a data row.

    Header cells are names ("index", "label", "Quality", "score"), so an integer in the
    index column or a valid label in the label column means the header is missing, and the
    first example would have been dropped as if it were the header.
    """
    looks_like_data = columns.index is not None and len(row) > columns.index
    looks_like_data = looks_like_data and row[columns.index].strip().isdigit()
    if columns.label is not None and len(row) > max(columns.label, -columns.label - 1):
        try:
            _parse_label(task, row[columns.label], path, 1)
            looks_like_data = True
        except GlueDataError:
            pass
    if looks_like_data:
        raise GlueDataError(
            f"{path} line 1 is a data row, but {task.folder} {split} files start with a header "
            "row; put the header line back (as in the GLUE download)."
        )


def label_id(task, label):
    """A label string -> class id, a score -> float; None (test) -> 0 / 0.0."""
    if task.is_regression:
        return 0.0 if label is None else float(label)
    if label is None:
        return 0
    try:
        return task.labels.index(label)
    except ValueError:
        raise GlueDataError(
            f"Label {label!r} is not a {task.name} label ({', '.join(task.labels)})."
        ) from None


def convert_examples_to_features(examples, task_name, max_seq_length, tokenizer):
    """Tokenizes examples into the original's classifier features.

    Args:
        examples: list of `InputExample`.
        task_name: a `--task_name`.
        max_seq_length: T; pairs are cut by BERT's truncate-the-longer rule.
        tokenizer: any object with `tokenize(text)` and `convert_tokens_to_ids(tokens)`
            whose vocabulary holds `[CLS]` and `[SEP]` (an `albert.tokenization.FullTokenizer`).

    Returns:
        list of dicts: `input_ids`, `input_mask`, `segment_ids` (T ints each), `label_ids`
        (int class id, or float for STS-B) and `is_real_example` (1).
    """
    task = get_task(task_name)
    cls_id, sep_id = special_token_ids(tokenizer)
    features = []
    # MNLI's 393k pairs take minutes to tokenize.
    progress = Progress(f"{task.name}: tokenized", len(examples), "examples")
    for example in examples:
        progress.update()
        ids_a = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.text_a))
        ids_b = None
        if example.text_b:
            ids_b = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.text_b))
        feature = pack_segments(ids_a, ids_b, max_seq_length, cls_id, sep_id)
        feature["label_ids"] = label_id(task, example.label)
        feature["is_real_example"] = 1
        features.append(feature)
    return features


def cache_file_name(task_name, split, max_seq_length, fingerprint):
    """`{task}_{split}_seq{T}_{fingerprint}.tfrecord`, e.g. `mrpc_dev_seq128_0123456789ab...`."""
    return f"{get_task(task_name).name}_{split}_seq{max_seq_length}_{fingerprint}.tfrecord"


def load_features(task_name, data_dir, split, tokenizer, max_seq_length, cache_dir=None):
    """A split as an unbatched `tf.data.Dataset` of features, tokenized at most once.

    With `cache_dir`, the features are written there as TFRecords whose file name encodes the
    task, split, max_seq_length and a hash of the tokenizer's model file, `do_lower_case` and
    the data file's bytes; a later call with the same inputs reads that file instead of
    tokenizing again.

    Args:
        task_name, data_dir, split: see `read_examples`.
        tokenizer: an `albert.tokenization.FullTokenizer` (a model file is needed to cache).
        max_seq_length: T.
        cache_dir: directory of the feature cache, or None to keep the features in memory.

    Returns:
        An `albert.data.features.CachedFeatures` (`dataset`, `num_examples`, `from_cache`,
        `path`); the dataset's elements are dicts of `input_ids`, `input_mask`,
        `segment_ids` ([T] int32), `label_ids` (int32, float32 for STS-B) and
        `is_real_example` (int32), in file order.
    """
    task = get_task(task_name)

    def create():
        examples = read_examples(task.name, data_dir, split)
        if not examples:
            raise GlueDataError(f"The {task.name} {split} file under {data_dir} has no rows.")
        return convert_examples_to_features(examples, task.name, max_seq_length, tokenizer)

    path = None
    if cache_dir:
        digest = hashlib.sha256(tokenizer_fingerprint(tokenizer).encode())
        file_fingerprint(find_data_file(task, data_dir, split), digest)
        name = cache_file_name(task.name, split, max_seq_length, digest.hexdigest()[:12])
        path = os.path.join(cache_dir, name)
    cached = load_or_create_features(path, create)
    logging.info(
        "%s %s: %d examples %s.",
        task.name,
        split,
        cached.num_examples,
        f"read from {path}" if cached.from_cache else "tokenized",
    )
    return cached
