"""SQuAD v1.1 / v2.0: the JSON reader and the model-ready, cached feature set.

`read_squad_examples` reads the official JSON (v2.0's plausible answers are ignored).
`load_features` turns a file into features (`albert.data.squad_features`: sliding windows,
p_mask, answer targets) and, with `cache_dir`, writes them once: the model inputs as
TFRecords (`albert.data.features`) and, for prediction, a sidecar `*.meta.npz` of what
post-processing needs (`albert.data.squad_metadata.write_metadata`). A second run with the
same file, tokenizer and settings reads them and does not tokenize. Post-processing is in
`albert.data.squad_postprocessing`, the official evaluation in `albert.metrics.squad`.

Example:
    >>> data = load_features("dev-v2.0.json", tokenizer, is_training=False, cache_dir="cache")
    >>> batches = data.dataset.batch(32)   # dicts of unique_ids, input_ids, p_mask, ...
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import tensorflow as tf
from absl import logging

from albert.data import features as feature_lib
from albert.data.squad_features import (
    SquadDataError,
    convert_examples_to_features,
    iter_features,
)
from albert.data.squad_metadata import (
    MetadataError,
    metadata_path,
    read_metadata,
    write_metadata,
)

V2_HINT = "add --version_2_with_negative"


class SquadVersionError(SquadDataError):
    """A SQuAD 2.0 file given to a SQuAD 1.1 run.

    The message ends with `hint`, how to run the file as SQuAD 2.0; an entry point whose
    version is fixed (`albert.run_squad_v1`) gives its own, as it ignores the flag.

    Args:
        input_file: the SQuAD 2.0 file.
        hint: what to do, e.g. "add --version_2_with_negative".
    """

    def __init__(self, input_file, hint=V2_HINT):
        self.input_file = input_file
        super().__init__(
            f"SQuAD file {input_file!r} is a SQuAD 2.0 file (it has unanswerable questions); "
            f"{hint}."
        )


__all__ = [
    "SquadDataError",
    "SquadExample",
    "SquadVersionError",
    "SquadFeatures",
    "cache_file_name",
    "load_features",
    "read_squad_examples",
]


@dataclasses.dataclass
class SquadExample:
    """One question over one context.

    Attributes:
        qas_id: the question id.
        question_text, context_text: as in the file.
        answer_text: the first gold answer ("" when unanswerable).
        start_position: character offset of `answer_text` in `context_text` (-1 when none).
        is_impossible: SQuAD 2.0 question with no answer (plausible answers are ignored).
    """

    qas_id: str
    question_text: str
    context_text: str
    answer_text: str = ""
    start_position: int = -1
    is_impossible: bool = False

    @property
    def end_position(self) -> int:
        """Character offset of the answer's last character (-1 when none)."""
        if self.start_position < 0:
            return -1
        return self.start_position + len(self.answer_text) - 1


def _load_json(path):
    if not tf.io.gfile.exists(path):
        raise SquadDataError(f"SQuAD file {path!r} does not exist; check the path.")
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    try:
        # "utf-8-sig": a byte-order mark (Windows editors, PowerShell) is not a JSON error.
        return json.loads(data.decode("utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SquadDataError(f"SQuAD file {path!r} is not valid UTF-8 JSON ({e}).") from None


def read_squad_examples(input_file: str, version_2_with_negative: bool | None = None) -> list:
    """Reads a SQuAD v1.1 or v2.0 JSON file.

    Args:
        input_file: path (local or gs://) of e.g. train-v1.1.json or dev-v2.0.json.
        version_2_with_negative: False refuses a v2.0 file (one with `"version": "v2.0"`,
            `is_impossible` questions or plausible answers), whose unanswerable questions a
            v1.1 model would silently learn wrong; None reads either.

    Returns:
        list of `SquadExample`, in file order.

    Raises:
        SquadDataError: the file is missing, not JSON, lacks a SQuAD key, holds a question
            id twice.
        SquadVersionError: a v2.0 file while `version_2_with_negative` is False.
    """
    data = _load_json(input_file)
    examples = []
    places = {}
    where = "the top level"
    is_v2 = isinstance(data, dict) and str(data.get("version", "")).startswith("v2")
    try:
        for a, article in enumerate(data["data"]):
            for p, paragraph in enumerate(article["paragraphs"]):
                where = f"article {a} paragraph {p}"
                context = _text(paragraph["context"], "context")
                for q, qa in enumerate(paragraph["qas"]):
                    where = f"article {a} paragraph {p} question {q}"
                    example = _read_question(qa, context)
                    if example.qas_id in places:
                        raise SquadDataError(
                            f"SQuAD file {input_file!r} has the question id "
                            f"{example.qas_id!r} twice ({places[example.qas_id]} and {where}); "
                            "question ids must be unique."
                        )
                    places[example.qas_id] = where
                    is_v2 = is_v2 or example.is_impossible or "plausible_answers" in qa
                    examples.append(example)
    except KeyError as e:
        raise SquadDataError(
            f"SQuAD file {input_file!r} lacks the key {e} at {where}; is it a SQuAD v1.1 or "
            "v2.0 JSON file?"
        ) from None
    except SquadDataError:
        raise
    except (TypeError, ValueError, IndexError, AttributeError) as e:
        raise SquadDataError(
            f"SQuAD file {input_file!r} is malformed at {where} ({e}); is it a SQuAD v1.1 or "
            "v2.0 JSON file?"
        ) from None
    if is_v2 and version_2_with_negative is False:
        raise SquadVersionError(input_file)
    return examples


def _text(value, name):
    """`value` when it is a string; a TypeError (reported with the file and place) when
    not: a null or a number would otherwise fail in the tokenizer, as a traceback."""
    if not isinstance(value, str):
        raise TypeError(f"its {name} is {json.dumps(value)[:40]}, not a string")
    return value


def _read_question(qa, context):
    is_impossible = qa.get("is_impossible", False)
    # JSON true/false (or 0/1); the string "false" would be truthy: an unanswerable question.
    if is_impossible not in (True, False):
        raise TypeError(f"its is_impossible is {json.dumps(is_impossible)[:40]}, not true or false")
    answer_text, start = "", -1
    # A file to predict may have no "answers" key (the original reads it only to train); a
    # training question without an answer is skipped with a warning (squad_features).
    if not is_impossible and qa.get("answers"):
        answer_text = _text(qa["answers"][0]["text"], "answer text")
        start = int(qa["answers"][0]["answer_start"])
    question = _text(qa["question"], "question")
    return SquadExample(qa["id"], question, context, answer_text, start, bool(is_impossible))


def cache_file_name(
    squad_file, tokenizer, is_training, max_seq_length, doc_stride, max_query_length
) -> str:
    """`squad_{train|predict}_seq{T}_stride{S}_query{Q}_{hash}.tfrecord`.

    The hash covers the SQuAD file's bytes, the tokenizer's model file and `do_lower_case`.
    """
    digest = hashlib.sha256(feature_lib.tokenizer_fingerprint(tokenizer).encode())
    feature_lib.file_fingerprint(squad_file, digest)
    mode = "train" if is_training else "predict"
    return (
        f"squad_{mode}_seq{max_seq_length}_stride{doc_stride}_query{max_query_length}_"
        f"{digest.hexdigest()[:12]}.tfrecord"
    )


@dataclasses.dataclass
class SquadFeatures:
    """What `load_features` returns.

    Attributes:
        examples: the `SquadExample`s of the file.
        features: the `SquadFeature`s, for post-processing; None in training.
        dataset: unbatched `tf.data.Dataset` of dicts: `unique_ids`, `is_real_example`
            (int32 scalars), `input_ids`, `input_mask`, `segment_ids`, `p_mask` ([T] int32),
            and in training `start_positions`, `end_positions`, `is_impossible` (int32).
        num_features: elements of `dataset`.
        from_cache: whether the features were read from `cache_dir`.
        path: the feature TFRecord file, or None without a cache.
    """

    examples: list
    features: list | None
    dataset: tf.data.Dataset
    num_features: int
    from_cache: bool
    path: str | None


def load_features(
    squad_file,
    tokenizer,
    is_training,
    max_seq_length=384,
    doc_stride=128,
    max_query_length=64,
    cache_dir=None,
    version_2_with_negative=None,
) -> SquadFeatures:
    """Reads a SQuAD file into model-ready features, tokenizing at most once per cache.

    Args:
        squad_file: SQuAD v1.1 or v2.0 JSON.
        tokenizer: an `albert.tokenization.FullTokenizer` (a model file is needed to cache).
        is_training: training features (answer targets; no post-processing metadata).
        max_seq_length, doc_stride, max_query_length: see `iter_features`.
        cache_dir: directory of the feature cache, or None to keep everything in memory.
        version_2_with_negative: see `read_squad_examples`.

    Returns:
        A `SquadFeatures`.

    Raises:
        SquadDataError: see `read_squad_examples` and `iter_features`.
    """
    examples = read_squad_examples(squad_file, version_2_with_negative)
    settings = (max_seq_length, doc_stride, max_query_length, is_training)
    path = None
    if cache_dir:
        name = cache_file_name(squad_file, tokenizer, is_training, *settings[:3])
        path = os.path.join(cache_dir, name)
    metadata_cached = path is not None and tf.io.gfile.exists(metadata_path(path))
    features = None
    if metadata_cached and not is_training:
        try:
            features = read_metadata(metadata_path(path), tokenizer, max_seq_length)
        except MetadataError as e:
            logging.warning("The feature cache %s; rebuilding it.", e)
            metadata_cached = False
    if not is_training and features is None:
        features = convert_examples_to_features(examples, tokenizer, *settings)
        if path:
            write_metadata(metadata_path(path), features)

    def create():
        found = features or iter_features(examples, tokenizer, *settings)
        inputs = [feature.model_inputs(is_training) for feature in found]
        if not inputs:  # Else a FeatureError naming no file: "the input split is empty".
            reason = "no question"
            if examples:
                reason = "no training question whose answer is found (see the warnings above)"
            raise SquadDataError(f"SQuAD file {squad_file!r} has {reason}.")
        return inputs

    cached = feature_lib.load_or_create_features(path, create)
    if features is not None and len(features) != cached.num_examples:
        # A sidecar cut short at a record boundary passes its checksums: count it.
        logging.warning("The feature cache %s is truncated; rebuilding it.", metadata_path(path))
        features = convert_examples_to_features(examples, tokenizer, *settings)
        write_metadata(metadata_path(path), features)
        metadata_cached = False
    from_cache = cached.from_cache and (is_training or metadata_cached)
    logging.info(
        "SQuAD %s: %d examples, %d features %s.",
        squad_file,
        len(examples),
        cached.num_examples,
        f"read from {path}" if from_cache else "tokenized",
    )
    return SquadFeatures(examples, features, cached.dataset, cached.num_examples, from_cache, path)
