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
TF1 names, as a one-label `AlbertClassifier`'s. HF checkpoints are read as pretraining ones.
"""

from __future__ import annotations

from albert.checkpoints.table import CLASSIFIER, SQUAD_V1, SQUAD_V2
from albert.modeling import AlbertClassifier, AlbertPretrainer, AlbertQuestionAnswering

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


def stored_task_head(path: str, format_name: str) -> tuple:
    """(kind, num_labels) of the fine-tuning head stored at `path`, or (None, None).

    Args:
        path: a checkpoint that `albert.checkpoints.load_checkpoint` reads.
        format_name: its format, as `albert.checkpoints.detect_format` names it.

    Returns:
        kind is `CLASSIFIER`, `SQUAD_V1` or `SQUAD_V2`; num_labels is set for a classifier.
    """
    markers = _MARKERS.get(format_name)
    if markers is None:
        return None, None
    shapes = _stored_shapes(path, format_name)
    for kind, name in markers.items():
        if name in shapes:
            return kind, (int(shapes[name][0]) if kind == CLASSIFIER else None)
    return None, None


def build_stored_model(config, path: str, format_name: str):
    """The model that holds every weight stored at `path`, built from `config`.

    Returns:
        An `AlbertClassifier` or `AlbertQuestionAnswering` for a fine-tuned checkpoint, else an
        `AlbertPretrainer` (whose heads an encoder-only checkpoint leaves initialised).
    """
    kind, num_labels = stored_task_head(path, format_name)
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

        shapes = {}
        with h5py.File(keras_format.weights_path(path), "r") as f:
            f.visititems(lambda name, item: shapes.update({name: getattr(item, "shape", ())}))
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
