"""Which of HF's fine-tuning classes computes which of our task heads, and their labels.

AlbertForSequenceClassification is our GLUE classifier (`classifier.weight [num_labels, H]`
over the pooled output), AlbertForMultipleChoice our RACE head (`[1, H]` per choice) and
AlbertForQuestionAnswering our SQuAD v1.1 span head (`qa_outputs.weight [2, H]`: start, end);
SQuAD v2.0's XLNet-style head has no HF class. `albert.checkpoints.hf` reads and writes the
files; this module decides whether a file's head fits a model (`fitting_head`), puts an HF
classifier's named classes (config.json's `id2label`) in a task's order (`reorder`) and writes
the label keys of config.json (`task_config`).
"""

from __future__ import annotations

import numpy as np
from absl import logging

from albert.checkpoints.table import CLASSIFIER, SQUAD_V1, CheckpointError, task_head
from albert.modeling import AlbertMultipleChoice


def head_architecture(model) -> str | None:
    """The HF class whose task head computes `model`'s, or None (no task head, or SQuAD
    v2.0's XLNet-style one, which HF has no class for)."""
    kind, _ = task_head(model)
    if kind == CLASSIFIER:
        multiple_choice = isinstance(model, AlbertMultipleChoice)
        return "AlbertForMultipleChoice" if multiple_choice else "AlbertForSequenceClassification"
    return "AlbertForQuestionAnswering" if kind == SQUAD_V1 else None


def class_names(values: dict, count: int) -> list:
    """The names an HF config's keys `values` give classes 0..count-1 (`id2label`, whose JSON
    keys are strings), HF's default `LABEL_i` where it names none."""
    id2label = {str(key): str(name) for key, name in (values.get("id2label") or {}).items()}
    return [id2label.get(str(i), f"LABEL_{i}") for i in range(count)]


def default_names(count: int) -> list:
    """HF's names for unnamed classes, which say nothing of their order."""
    return [f"LABEL_{i}" for i in range(count)]


def reorder(model, values: dict, labels, source: str) -> None:
    """`albert.checkpoints.hf.order_classes` of an HF config's keys `values` (read from
    `source`)."""
    if values.get("problem_type") == "multi_label_classification" and len(labels) > 1:
        logging.warning(
            "%s: problem_type multi_label_classification: HF scores each class with a "
            "sigmoid; here the same logits are scored with a softmax over the classes (the "
            "predicted class is the same, the probabilities are not).",
            source,
        )
    rows = _task_rows(values, labels, source)
    if rows is not None:
        head = model.classifier
        for variable in (head.output_weights, head.output_bias):  # [C, H], [C]
            variable.assign(np.asarray(variable.numpy())[rows])


def _task_rows(values: dict, labels, source: str) -> list | None:
    """The file's class id of each of `labels` (`order_classes`), or None to keep its order."""
    names = class_names(values, len(labels))
    found, wanted = [n.lower() for n in names], [n.lower() for n in labels]
    if len(labels) < 2 or found == wanted:
        return None
    if found == [n.lower() for n in default_names(len(labels))]:
        logging.warning(
            "%s names its classes %s, which say nothing of their order: it is assumed to be "
            "the task's (%s).",
            source,
            ", ".join(names),
            ", ".join(labels),
        )
        return None
    if sorted(found) == sorted(wanted) and len(set(wanted)) == len(wanted):
        logging.info(
            "%s holds the classes in the order %s: its head is reordered to the task's (%s).",
            source,
            ", ".join(names),
            ", ".join(labels),
        )
        return [found.index(name) for name in wanted]
    logging.warning(
        "%s names its classes %s (in class-id order), not the task's %s: the file's order is "
        "assumed to be the task's (%s).",
        source,
        ", ".join(names),
        ", ".join(labels),
        ", ".join(f"{n} as {label}" for n, label in zip(names, labels, strict=True)),
    )
    return None


def fitting_head(model, head: dict, shapes: dict, architectures: list, source: str) -> bool:
    """Whether the file's task head loads into `model`'s (`head`: name -> Binding).

    Only a file of the HF class that computes `model`'s head holds it (an
    AlbertForTokenClassification's `classifier` is applied to every position, not to the
    pooled output). A head of another shape (3 labels for a 2-label classifier) is left out,
    with a warning, as a training checkpoint's is: the model's head starts from its initial
    values.
    """
    if not any(name in shapes for name in head):
        return True  # none stored: `plan_load` leaves the head initialised
    if head_architecture(model) not in architectures:
        return False
    wrong = [name for name, binding in head.items() if shapes.get(name) != binding.foreign_shape]
    if any(name in shapes for name in wrong):
        logging.warning(
            "%s: the %s head (%s) does not fit this %s (it needs %s); it starts from its "
            "initial values.",
            source,
            head_architecture(model),
            ", ".join(f"{name} {tuple(shapes[name])}" for name in wrong if name in shapes),
            type(model).__name__,
            ", ".join(f"{name} {head[name].foreign_shape}" for name in wrong),
        )
        return False
    return True


def task_config(model, architecture, labels, problem_type) -> dict:
    """config.json's label keys for a task model's HF class ({} for the others).

    HF sizes AlbertForSequenceClassification's `classifier` and AlbertForQuestionAnswering's
    `qa_outputs` by `num_labels` (from `id2label`); AlbertForMultipleChoice's is always [1, H].

    Raises:
        CheckpointError: `labels` is not one name per class.
    """
    if architecture == "AlbertForQuestionAnswering":
        num_labels, problem_type = 2, None  # start and end
    elif architecture == "AlbertForSequenceClassification":
        num_labels = model.num_labels
        if problem_type is None:
            one = num_labels == 1
            problem_type = "regression" if one else "single_label_classification"
    else:
        return {}
    labels = list(labels or [f"LABEL_{i}" for i in range(num_labels)])
    if len(labels) != num_labels or len(set(labels)) != num_labels:
        raise CheckpointError(
            f"{len(labels)} label names ({', '.join(labels)}) for the {num_labels} distinct "
            f"outputs of this {type(model).__name__}."
        )
    values = {
        "num_labels": num_labels,
        "id2label": {str(i): label for i, label in enumerate(labels)},
        "label2id": {label: i for i, label in enumerate(labels)},
    }
    if problem_type:
        values["problem_type"] = problem_type
    return values
