"""The weights a fine-tuning run starts from (`--init_checkpoint`) and ends with.

A run starts from any checkpoint `albert.checkpoints.load_any` reads: the encoder always, the
task head too when the checkpoint holds one of the same shape. Evaluation, prediction and
export after training use `model.ckpt-best` in `output_dir`, else its latest checkpoint, else
`--init_checkpoint` (which must then hold the task head, e.g. an MNLI fine-tuning run to
predict AX with). An HF classifier's classes are put in the task's order (`labels`, see
`albert.checkpoints.hf.order_classes`). A run that predicts without evaluating takes the final
evaluation an earlier run wrote for the same weights (`earlier_evaluation`: SQuAD 2.0's tuned
threshold).
"""

from __future__ import annotations

import os

import tensorflow as tf
from absl import logging

from albert.checkpoints import hf, load_any, training_format
from albert.fileio import is_remote
from albert.metrics import EVAL_RESULTS_FILE, read_eval_results
from albert.tasks import FineTuningError
from albert.training import checkpointing


def resolve_checkpoint(path):
    """`path`, or the `model.ckpt-best` of a run directory that holds one (a fine-tuning
    or pretraining output directory, or a released model's)."""
    # By file names only: on ram:// and some object stores `isdir` is true for any prefix.
    best = os.path.join(path, training_format.BEST_PREFIX)
    if not tf.io.gfile.exists(path + ".index") and tf.io.gfile.exists(best + ".index"):
        return best
    return path


def head_weights(model):
    backbone = {id(w) for w in model.backbone.weights}
    return [w for w in model.weights if id(w) not in backbone]


def load_finetuning_weights(model, path, require_head=False, labels=()):
    """Loads `--init_checkpoint` into a fine-tuning model: the encoder always, the head too
    when the checkpoint holds one of the same shape (e.g. MNLI weights to predict AX).

    Args:
        model: a task model holding its `AlbertBackbone` as `.backbone`.
        path: one of our training checkpoints or run directories (fine-tuning or
            pretraining), an official TF1 checkpoint, an HF directory or Keras weights.
        require_head: raise unless the head was loaded too (to predict without training).
        labels: the class names of the head's outputs in class-id order (a GLUE task's): an
            HF head of other names or order is reordered or warned about.

    Returns:
        Whether the head was loaded.

    Raises:
        FineTuningError: `require_head` and the checkpoint holds no fitting head.
        albert.checkpoints.CheckpointError: the checkpoint does not fit the encoder (another
            config) or does not exist.
    """
    head = head_weights(model)
    result = load_any(model, resolve_checkpoint(path), optional_weights=head)
    path = result.path
    initialised = set(result.initialised)
    head_loaded = not any(w.path in initialised for w in head)
    if head_loaded and result.format == "hf" and labels:
        hf.order_classes(model, path, labels)  # HF's id2label may order them otherwise
    if require_head and not head_loaded:
        hf_class = _hf_head_class(model) if result.format == "hf" else ""
        raise FineTuningError(
            f"--init_checkpoint={path} holds no {type(model).__name__} head of this shape"
            f"{hf_class}, so its predictions would be random; fine-tune first (--do_train) or "
            "pass the output_dir of a fine-tuning run."
        )
    logging.info(
        "Initialised from %s: encoder%s.",
        path,
        " and task head" if head_loaded else " (the task head starts from random values)",
    )
    return head_loaded


def _hf_head_class(model):
    """What an HF file needs to hold `model`'s head, for the error that it holds none: its
    class named (config.json's `architectures`), or, for SQuAD 2.0's head, which no HF class
    computes (`head_architecture` None), that none can."""
    architecture = hf.head_architecture(model)
    if architecture is None:
        return " (no HF class computes SQuAD 2.0's head)"
    return f" of the HF class {architecture}"


def load_final_weights(model, options, labels=()):
    """Loads the weights that evaluation, prediction and export use (see the module doc).

    Args:
        labels: as `load_finetuning_weights` takes them, for `--init_checkpoint`.

    Returns:
        (checkpoint path, its global step or None).

    Raises:
        FineTuningError: no checkpoint in `output_dir` and no `--init_checkpoint`.
    """
    best = os.path.join(options.output_dir, training_format.BEST_PREFIX)
    path = best if tf.io.gfile.exists(best + ".index") else None
    path = path or checkpointing.latest_checkpoint(options.output_dir)
    if path:
        training_format.restore_model_weights(model, path)
    elif options.init_checkpoint:
        path = resolve_checkpoint(options.init_checkpoint)
        load_finetuning_weights(model, path, require_head=True, labels=labels)
    else:
        raise FineTuningError(
            f"--output_dir={options.output_dir} holds no checkpoint to evaluate or predict "
            "with; train first (--do_train) or pass --init_checkpoint of a fine-tuned model."
        )
    step = training_format.global_step(path)
    # Weights without a step (HF directories, Keras files) are reported as global step 0 in
    # eval_results.txt; "global step None" on the console read as a failed load.
    stepped = "no global step" if step is None else f"global step {step}"
    logging.info("Final weights: %s (%s).", path, stepped)
    return path, step


def earlier_evaluation(output_dir, path, step):
    """The final evaluation an earlier run wrote to `output_dir/eval_results.txt` for the
    weights at `path` (global step `step`), or None.

    A block matches when it names the same weights (`names_weights`) and the file was
    written after them: `model.ckpt-best` rewritten by later training (with --nodo_eval) is
    not matched by the evaluation of the weights it replaced.
    """
    blocks = read_eval_results(output_dir)
    for results in reversed(blocks):
        if names_weights(output_dir, results, path, step):
            results_file = os.path.join(output_dir, EVAL_RESULTS_FILE)
            return results if written_after(results_file, path) else None
    return None


def names_weights(output_dir, record, path, step):
    """Whether `record` (a dict holding the `checkpoint` and `global_step` of some weights, as
    an eval_results.txt block does) names the weights at `path` (global step `step`) of a run
    in `output_dir`: the same weights (`_same_weights`) of the same global step."""
    checkpoint = str(record.get("checkpoint", ""))
    same_step = _step_text(record.get("global_step")) == _step_text(step)
    return _same_weights(output_dir, checkpoint, path, step) and same_step


def _step_text(step):
    """A global step as eval_results.txt holds it: weights without a step (None) are written
    as 0, and as "None" by earlier versions; compared as text, since the file reads back
    numbers or strings. A step-less file is told from a step-0 checkpoint by its path."""
    return "0" if step in (None, "None") else str(step)


def _same_weights(output_dir, checkpoint, path, step):
    """Whether the `checkpoint` an evaluation names is the weights at `path`: a training
    checkpoint of `output_dir` by its file name (the directory may be named another way;
    its step is compared too), any other weights by their whole path. Another run's
    `model.ckpt-best` of the same step, or any other Keras file (convert_checkpoint names
    each `model.weights.h5`), is other weights."""
    in_output_dir = os.path.dirname(_normalised(path)) == _normalised(output_dir)
    if step is not None and in_output_dir:
        return os.path.basename(checkpoint) == os.path.basename(path)
    return _normalised(checkpoint) == _normalised(path)


def _normalised(path):
    # A local path made absolute (a flag given relative in one run, not the other).
    return path.rstrip("/") if is_remote(path) else os.path.abspath(path)


def written_after(record_file, path):
    """Whether `record_file` was written after the weights at `path` (a checkpoint's index,
    else the file or directory itself); False when `path` does not exist."""
    for written in (path + ".index", path):
        if tf.io.gfile.exists(written):
            mtime = tf.io.gfile.stat(written).mtime_nsec
            return tf.io.gfile.stat(record_file).mtime_nsec >= mtime
    return False
