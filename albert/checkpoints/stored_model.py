"""The model whose weights a checkpoint holds: a pretrainer, or a fine-tuning task model.

A fine-tuning run (`run_classifier`, `run_squad`, `run_race`) does not record its task; its
head is recognised by the names it stores, in each format that can hold one:

    head               training (model.ckpt-N)  TF1 (the original's)
    classifier, RACE   classifier/output_bias   output_bias
    SQuAD v1.1         squad/output_bias        cls/squad/output_bias
    SQuAD v2.0         squad_v2/start_dense/... start_logits/dense/kernel

and in Keras weights (`model.weights.h5`) by the layers `classifier`, `albert_span_head` and
`albert_squad_v2_head`. A classifier's first dimension is its number of labels. RACE
scores each choice with a one-label classifier, so its head is the same weights, and the same
TF1 names, as a one-label `AlbertClassifier`'s (only the caller can tell them apart:
`multiple_choice`). An HF directory names its class in config.json's `architectures`: the
three whose head is one of ours (`albert.checkpoints.hf.head_architecture`) are task models,
any other is read as a pretraining one.
"""

from __future__ import annotations

import os

from albert.checkpoints import remote
from albert.checkpoints.table import CLASSIFIER, SQUAD_V1, SQUAD_V2, CheckpointError
from albert.modeling import (
    AlbertClassifier,
    AlbertMultipleChoice,
    AlbertPretrainer,
    AlbertQuestionAnswering,
)

# Only an HF file's `architectures` tells RACE's one-label head from a regression one.
MULTIPLE_CHOICE = "multiple_choice"

# format -> head kind -> the stored name that marks it (a classifier's holds num_labels first).
_MARKERS = {
    "training": {
        CLASSIFIER: "classifier/output_bias",
        SQUAD_V1: "squad/output_bias",
        SQUAD_V2: "squad_v2/start_dense/kernel",
    },
    "keras": {
        CLASSIFIER: "classifier/vars/0",  # output_weights [num_labels, H]
        SQUAD_V1: "layers/albert_span_head/vars/0",
        SQUAD_V2: "layers/albert_squad_v2_head/start_dense/vars/0",
    },
    "tf1": {
        CLASSIFIER: "output_bias",
        SQUAD_V1: "cls/squad/output_bias",
        SQUAD_V2: "start_logits/dense/kernel",
    },
}
# HF class -> (head kind, the tensor [out, H] that holds its head).
_HF_HEADS = {
    "AlbertForSequenceClassification": (CLASSIFIER, "classifier.weight"),
    "AlbertForMultipleChoice": (MULTIPLE_CHOICE, "classifier.weight"),
    "AlbertForQuestionAnswering": (SQUAD_V1, "qa_outputs.weight"),
}


def stored_task_head(path: str, format_name: str) -> tuple:
    """(kind, num_labels) of the fine-tuning head stored at `path`, or (None, None).

    Args:
        path: a checkpoint that `albert.checkpoints.load_checkpoint` reads.
        format_name: its format, as `albert.checkpoints.detect_format` names it.

    Returns:
        kind is `CLASSIFIER`, `SQUAD_V1` or `SQUAD_V2` (or `MULTIPLE_CHOICE`, for an HF
        AlbertForMultipleChoice); num_labels is set for a classifier.
    """
    if format_name == "hf":
        return _hf_task_head(path)
    markers = _MARKERS.get(format_name)
    if markers is None:
        return None, None
    shapes = _stored_shapes(path, format_name)
    for kind, name in markers.items():
        if name in shapes:
            return kind, (int(shapes[name][0]) if kind == CLASSIFIER else None)
    return None, None


def build_stored_model(config, path: str, format_name: str, multiple_choice: bool = False):
    """The model that holds every weight stored at `path`, built from `config`.

    Args:
        multiple_choice: a one-label classifier head is RACE's (an `AlbertMultipleChoice`,
            the same weights); an HF file says so itself.

    Returns:
        An `AlbertClassifier`, `AlbertMultipleChoice` or `AlbertQuestionAnswering` for a
        fine-tuned checkpoint, else an `AlbertPretrainer` (whose heads an encoder-only
        checkpoint leaves initialised).
    """
    kind, num_labels = stored_task_head(path, format_name)
    if kind == MULTIPLE_CHOICE or (kind == CLASSIFIER and num_labels == 1 and multiple_choice):
        return AlbertMultipleChoice(config)
    if kind == CLASSIFIER:
        return AlbertClassifier(config, num_labels=num_labels)
    if kind in (SQUAD_V1, SQUAD_V2):
        return AlbertQuestionAnswering(config, version_2_with_negative=kind == SQUAD_V2)
    return AlbertPretrainer(config)


def _stored_shapes(path: str, format_name: str) -> dict:
    """Stored name -> shape, with the names of `_MARKERS[format_name]`."""
    if format_name == "keras":
        import h5py

        from albert.checkpoints import keras_format

        file = keras_format.weights_path(path)
        if remote.is_remote(file):  # gs://: h5py reads a local temporary copy
            folder, name = os.path.split(file)
            with remote.local_copies(folder, (name,)) as local:
                return _stored_shapes(os.path.join(local, name), format_name)
        shapes = {}
        try:
            with h5py.File(file, "r") as f:
                f.visititems(lambda name, item: shapes.update({name: getattr(item, "shape", ())}))
        except OSError as e:  # truncated (a copy cut off) or not HDF5: one line, not h5py's
            raise CheckpointError(f"Cannot read the Keras weights {file}: {e}") from None
        return shapes
    if format_name == "tf1":
        from albert.checkpoints import tf1

        return tf1.stored_shapes(path)
    from albert.checkpoints import training_format

    stored = training_format.stored_shapes(path)  # keyed by `value_key(variable path)`
    return {
        name: stored[training_format.value_key(name)]
        for name in _MARKERS[format_name].values()
        if training_format.value_key(name) in stored
    }


def _hf_task_head(path: str) -> tuple:
    """`stored_task_head` of an HF directory: its class's head, where it is one of ours."""
    from albert.checkpoints import hf, hf_weights

    if remote.is_remote(path):  # gs://: safetensors reads a local temporary copy
        names = (hf.CONFIG_FILE, *hf_weights.files(path))
        with remote.local_copies(path, names) as local:
            return _hf_task_head(local)
    architectures = hf.read_values(path).get("architectures") or []
    with hf_weights.open_weights(path) as f:  # model.safetensors, or a sharded save's shards
        shapes = {name: f.get_slice(name).get_shape() for name in f.keys()}
    for architecture in architectures:
        kind, name = _HF_HEADS.get(architecture, (None, None))
        if name in shapes:
            outputs = int(shapes[name][0])
            if kind == CLASSIFIER:
                return kind, outputs
            if outputs == (1 if kind == MULTIPLE_CHOICE else 2):  # else it loads nowhere here
                return kind, None
    return None, None
