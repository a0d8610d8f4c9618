r"""Converts an ALBERT checkpoint between the TF1, HF transformers and Keras formats.

The input format is detected. The config comes from `--albert_config_file`, or else from the
checkpoint (an HF directory's `config.json`, an `albert_config.json` beside a TF1 or Keras
checkpoint). Pretraining heads the checkpoint lacks are not written; the ones it has are (an
HF AlbertForMaskedLM keeps its MLM head), except in Keras, whose file holds both or none. A
fine-tuning run's checkpoint (its output_dir, a `model.ckpt-<step>`, or its
`model.weights.h5`, an original fine-tuned TF1 checkpoint, an HF fine-tuned directory) is
written with its task head: in TF1, under the original's fine-tuned names (`output_weights`
and `output_bias` for GLUE and RACE, `cls/squad/...`, `start_logits/...`); in Keras, as
`model.weights.h5`; in HF, as the HF class that computes the same head
(AlbertForSequenceClassification for GLUE, AlbertForMultipleChoice for RACE,
AlbertForQuestionAnswering, without a pooler, for SQuAD v1.1). A run does not record its task:
`--task_name` (a GLUE task, or race) gives HF's config.json the GLUE label names, and tells
RACE's one-label head from STS-B's, which `--output_format=hf` otherwise refuses to guess.
An HF fine-tuned input names its classes (`id2label`), perhaps in another order than the GLUE
task's: to HF it keeps its own names and order; to TF1 or Keras, which hold no names, with
`--task_name` its head's rows are put in the task's order (`hf.order_classes`), and without
it they are written in the file's order (with a warning naming its classes). SQuAD v2.0's XLNet-style head has no HF class:
`--output_format=hf` refuses it. `--input` and `--output` may be remote (gs://) in every format
(an HF or Keras folder there is read from, and written through, a local temporary copy).

Usage:
    python -m albert.convert_checkpoint --input=albert_base/model.ckpt-best \
        --albert_config_file=albert_base/albert_config.json --output=albert_base_hf \
        --output_format=hf
    python -m albert.convert_checkpoint --input=out/MRPC --output=mrpc_tf1 --output_format=tf1
    python -m albert.convert_checkpoint --input=out/MRPC --output=mrpc_hf --output_format=hf \
        --task_name=mrpc
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time

from albert import keras_version

# An old Keras: one line and exit 2 here, not the traceback of the model's import below.
keras_version.exit_if_too_old("convert_checkpoint")

from absl import app, flags, logging  # noqa: E402

from albert import glue_tasks  # noqa: E402
from albert.checkpoints import (  # noqa: E402
    CheckpointError,
    detect_format,
    hf,
    hf_heads,
    load_checkpoint,
    read_config,
    remote,
    save_checkpoint,
)
from albert.checkpoints.stored_model import build_stored_model  # noqa: E402
from albert.checkpoints.table import task_head  # noqa: E402
from albert.config import AlbertConfig, ConfigError  # noqa: E402
from albert.modeling import AlbertMultipleChoice  # noqa: E402
from albert.progress import format_duration  # noqa: E402
from albert.training import flags as training_flags  # noqa: E402
from albert.training.failures import describe_failure, traceback_requested  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "albert_config_file",
    None,
    "The model's albert_config.json; optional when the input carries its config.",
)
flags.DEFINE_string(
    "input",
    None,
    "A TF1 checkpoint prefix or directory, an HF directory or Keras weights (local or gs://).",
)
flags.DEFINE_string(
    "output", None, "The directory to write the converted checkpoint into (local or gs://)."
)
flags.DEFINE_enum("output_format", None, ["tf1", "hf", "keras"], "The format to write.")
flags.DEFINE_string(
    "task_name",
    None,
    "The task a fine-tuned --input was trained on, for --output_format=hf: a GLUE task (its "
    "label names go into config.json's id2label) or race (AlbertForMultipleChoice). Needed for "
    "a one-label head, which is STS-B's regression or RACE's. For an HF --input to tf1 or "
    "keras, the head's classes are put in the GLUE task's order (HF's id2label may differ). "
    "Given for any input and format, it must be the task of the input's head.",
)
flags.DEFINE_bool(
    "overwrite", False, "Write into a --output directory that already holds files (not a run's)."
)
# Files that mark a training run's output_dir (albert.training): converting into one would
# rewrite its `checkpoint` file and break its resume.
_TRAINING_MARKS = ("input_state", "run.lock", "best_checkpoint.txt", "evaluated_checkpoint.txt")


class OutputFormatError(CheckpointError):
    """`--output_format` cannot hold what the input holds (a usage error: exit status 2)."""


def check_output_dir(output: str, overwrite: bool = False) -> None:
    """Refuses an `output` that is a training run's directory, or is not empty.

    Raises:
        CheckpointError: `output` holds a training run's files, or any file without
            `overwrite`.
    """
    import tensorflow as tf

    from albert.checkpoints.training_format import is_training_checkpoint

    try:
        names = sorted(tf.io.gfile.listdir(output))
    except tf.errors.NotFoundError:
        return  # a new directory
    marks = [n.rstrip("/") for n in names if n.rstrip("/") in _TRAINING_MARKS]
    if marks or ("checkpoint" in names and is_training_checkpoint(output)):
        held = ", ".join(marks) or "a training checkpoint"
        raise CheckpointError(
            f"--output={output} is a training run's directory (it holds {held}); write the "
            "converted checkpoint into another directory."
        )
    if names and not overwrite:
        shown = ", ".join(n.rstrip("/") for n in names[:3]) + (", ..." if len(names) > 3 else "")
        raise CheckpointError(
            f"--output={output} is not empty ({shown}); pass --overwrite to replace the files "
            "in it, or choose an empty directory."
        )


def convert(
    input_path: str,
    output: str,
    output_format: str,
    albert_config_file: str | None = None,
    overwrite: bool = False,
    task_name: str | None = None,
) -> str:
    """Reads the checkpoint at `input_path` and writes it to `output` in `output_format`.

    Args:
        input_path: a TF1 prefix or directory, an HF directory or Keras weights (local or
            remote: gs://).
        output: the directory to write (local or remote).
        output_format: "tf1", "hf" or "keras".
        albert_config_file: the config; read from the checkpoint when None.
        overwrite: write into an `output` that already holds files (never a training run's).
        task_name: the fine-tuned input's task (a GLUE task or "race"), for "hf"; for an
            HF input to "tf1" or "keras", the class order its head is written in.

    Returns:
        What was written (see `albert.checkpoints.save_checkpoint`).

    Raises:
        CheckpointError: no checkpoint at `input_path`, no config, a checkpoint that does
            not fit the config, or an `output` that `check_output_dir` refuses.
        OutputFormatError: to "hf", a head HF has no class for (SQuAD v2.0) or a one-label
            head without `task_name`; a `task_name` whose task has another head.
        ConfigError: an invalid config file.
    """
    with remote.shared_copies():  # a remote input's weights are downloaded once
        return _convert(input_path, output, output_format, albert_config_file, overwrite, task_name)


def _convert(input_path, output, output_format, albert_config_file, overwrite, task_name):
    start = time.perf_counter()
    check_output_dir(output, overwrite)
    if albert_config_file:
        config = AlbertConfig.from_json_file(albert_config_file)
    else:
        config = read_config(input_path)
        if config is None:
            raise CheckpointError(
                f"{input_path} has no config beside it; pass --albert_config_file."
            )
    format_name = detect_format(input_path)
    # An HF file names its class; elsewhere RACE's head is a one-label classifier's weights.
    race = _is_race(task_name) and format_name != "hf"
    # Each phase takes seconds at xxlarge (0.9 GB): a line before each shows where it is.
    logging.info("Building the model that %s holds (%s format).", input_path, format_name)
    model = build_stored_model(config, input_path, format_name, multiple_choice=race)
    labels = classes = None
    if output_format == "hf":
        labels = hf_labels(model, input_path, format_name, task_name)  # before writing
    elif format_name == "hf" and task_name is not None:
        classes = task_labels(model, input_path, task_name)
    elif format_name == "hf":
        warn_names_dropped(model, input_path, output_format)
    elif task_name is not None:
        task_labels(model, input_path, task_name)  # a task that is not the input's is an error
    logging.info(
        "Reading %s into its %s (%s parameters).",
        input_path,
        type(model).__name__,
        f"{sum(math.prod(v.shape) for v in model.weights):,}",
    )
    result = load_checkpoint(model, input_path, format_name)
    if classes:
        # TF1 and Keras files hold no label names: the head's rows go in the task's order.
        hf.order_classes(model, input_path, classes)
    source = loaded_parts(model, result, output_format)
    logging.info("Writing the %s checkpoint into %s.", output_format, output)
    if output_format == "hf":
        written = hf.save(source, output, *labels)
    else:
        written = save_checkpoint(source, output, output_format, source_step(input_path))
    shapes = written_shapes(written, output_format)
    logging.info(
        "Wrote %s (%s): %d tensors, %s parameters, in %s.",
        written,
        output_format,
        len(shapes),
        f"{sum(math.prod(shape) for shape in shapes):,}",
        format_duration(time.perf_counter() - start),
    )
    return written


def written_shapes(written: str, output_format: str) -> list:
    """The shape of each tensor in the file `convert` wrote (TF1: not `global_step`), read
    back from its index or header, so the summary counts what the file holds."""
    if output_format != "tf1" and remote.is_remote(written):
        # gs://: safetensors and h5py read a local temporary copy of the one file.
        folder, name = (
            (written, hf.WEIGHTS_FILE) if output_format == "hf" else os.path.split(written)
        )
        with remote.local_copies(folder, (name,)) as local:
            local_file = os.path.join(local, name)
            return written_shapes(local if output_format == "hf" else local_file, output_format)
    if output_format == "tf1":
        from albert.checkpoints import tf1

        return list(tf1.stored_shapes(written).values())
    if output_format == "hf":
        from safetensors import safe_open

        with safe_open(os.path.join(written, hf.WEIGHTS_FILE), framework="np") as f:
            return [f.get_slice(name).get_shape() for name in f.keys()]
    import h5py

    shapes = []

    def add(_, item):  # datasets have a shape, groups none; None goes on visiting
        if isinstance(item, h5py.Dataset):
            shapes.append(item.shape)

    with h5py.File(written, "r") as f:
        f.visititems(add)
    return shapes


def hf_labels(model, input_path: str, format_name: str, task_name: str | None) -> tuple:
    """(label names, problem_type) of HF's config.json for `model`, as `hf.save` takes them.

    The names are an HF input's own (its rows are written in its order), else the GLUE
    task's (`task_name`), else HF's LABEL_i (None); the problem_type is an HF input's own,
    else None (`hf.save` picks it).

    Raises:
        OutputFormatError: a head HF has no class for, a one-label classifier (STS-B's or
            RACE's) without `task_name`, or a `task_name` whose task has another head.
    """
    kind, _ = task_head(model)
    architecture = hf.head_architecture(model)
    if kind is not None and architecture is None:
        raise OutputFormatError(
            f"--input={input_path} is a fine-tuned {type(model).__name__} with the SQuAD 2.0 "
            "head (the original's XLNet-style start, end and answer-class layers), which no HF "
            "class computes; use --output_format=tf1 (the original's names) or keras."
        )
    classifier = architecture == "AlbertForSequenceClassification"
    labels = None if task_name is None else task_labels(model, input_path, task_name)
    if format_name == "hf" and classifier:
        values = hf.read_values(input_path)
        return hf_heads.class_names(values, model.num_labels), values.get("problem_type")
    if task_name is None:
        if classifier and model.num_labels == 1:
            raise OutputFormatError(
                f"--input={input_path} holds a one-label classifier head: STS-B's regression "
                "head or RACE's multiple-choice one; pass --task_name=sts-b "
                "(AlbertForSequenceClassification) or --task_name=race (AlbertForMultipleChoice)."
            )
        return None, None
    return labels, None


def task_labels(model, input_path: str, task_name: str) -> list | None:
    """The class names of `task_name` (a GLUE task) in class-id order, None for RACE's or
    STS-B's head, after checking that `model`'s head is that task's.

    Raises:
        OutputFormatError: an unknown task, or a `task_name` whose task has another head.
    """
    classifier = hf.head_architecture(model) == "AlbertForSequenceClassification"
    try:
        task = None if _is_race(task_name) else glue_tasks.get_task(task_name)
    except glue_tasks.GlueDataError as e:
        raise OutputFormatError(f"{str(e).rstrip('.')} (or race).") from None
    if task is None and isinstance(model, AlbertMultipleChoice):
        return None
    if task is None or not classifier or task.num_labels != model.num_labels:
        expected = "multiple-choice head" if task is None else _head_of(task.num_labels)
        raise OutputFormatError(
            f"--input={input_path} holds {_head_description(model)}, not the "
            f"{expected} of --task_name={task_name}; pass the task it was fine-tuned on."
        )
    return list(task.labels) or None


def warn_names_dropped(model, input_path: str, output_format: str) -> None:
    """Warns that an HF classifier's class names (not HF's LABEL_i) are not written to TF1 or
    Keras, which hold none: whatever reads it takes the file's order as its task's."""
    if hf.head_architecture(model) != "AlbertForSequenceClassification" or model.num_labels < 2:
        return
    names = hf_heads.class_names(hf.read_values(input_path), model.num_labels)
    if names != hf_heads.default_names(model.num_labels):
        logging.warning(
            "%s names its classes %s (in class-id order); %s holds no names, so they are "
            "written in this order. Pass --task_name to put them in a GLUE task's order.",
            input_path,
            ", ".join(names),
            output_format,
        )


def _is_race(task_name: str | None) -> bool:
    return (task_name or "").strip().lower() == "race"


def _head_description(model) -> str:
    architecture = hf.head_architecture(model)
    if architecture == "AlbertForSequenceClassification":
        return f"a {_head_of(model.num_labels)} ({architecture})"
    if architecture:
        return f"an {architecture} head"
    # SQuAD 2.0's head is the one no HF class computes.
    return "no fine-tuning head" if task_head(model)[0] is None else "the SQuAD 2.0 head"


def _head_of(outputs: int) -> str:
    return f"{outputs}-output classifier head" if outputs != 1 else "one-output classifier head"


@dataclasses.dataclass(frozen=True)
class LoadedParts:
    """A pretrainer's backbone and the pretraining heads its input held, for the TF1 and HF
    writers (which read `.backbone`, `.masked_lm_head` and `.sentence_order_head`)."""

    backbone: object
    masked_lm_head: object = None
    sentence_order_head: object = None
    # False when the input held no pooler (HF's AlbertForMaskedLM saves none): the HF writer
    # then leaves out the initial values rather than write them as trained.
    pooler_loaded: bool = True


def loaded_parts(model, result, output_format: str):
    """What to write: `model`, or only its parts that `result` loaded.

    Heads the input lacks would be written with random values, so they are left out. An
    HF AlbertForMaskedLM file (albert-base-v2 on the hub) holds the MLM head and no SOP head:
    TF1 and HF outputs keep its MLM head; a Keras weights file holds a whole pretrainer or a
    backbone, so it gets the backbone (with a warning naming the head left out).
    """
    # A task model is written whole: HF's AlbertForQuestionAnswering holds no pooler, which
    # its span head never reads.
    if not result.initialised or task_head(model)[0] is not None:
        return model
    initialised = set(result.initialised)
    heads = {
        name: head
        for name in ("masked_lm_head", "sentence_order_head")
        if (head := getattr(model, name, None)) is not None
        and not any(variable.path in initialised for variable in head.weights)
    }
    if heads and output_format == "keras":
        logging.warning(
            "Writing the encoder only: the Keras format holds no %s without the head the "
            "input lacks; use --output_format=tf1 or hf to keep it.",
            " and ".join(heads),
        )
    if not heads or output_format == "keras":
        return model.backbone
    pooler = model.backbone.pooler.weights
    pooler_loaded = not any(variable.path in initialised for variable in pooler)
    return LoadedParts(model.backbone, **heads, pooler_loaded=pooler_loaded)


def source_step(input_path: str) -> int:
    """The step the input was trained to, from a training checkpoint or a TF1 one that
    holds `global_step`; 0 for any other input."""
    from albert.checkpoints import tf1, training_format

    step = training_format.global_step(input_path)
    if step is None:
        step = tf1.stored_global_step(input_path)
    return step or 0


def main(argv):
    del argv  # unused
    try:
        # One line and exit 2 for a missing flag, as every entry point.
        training_flags.require(FLAGS, "input", "output", "output_format")
        convert(
            FLAGS.input,
            FLAGS.output,
            FLAGS.output_format,
            FLAGS.albert_config_file,
            FLAGS.overwrite,
            FLAGS.task_name,
        )
    except (CheckpointError, ConfigError, training_flags.FlagError) as e:
        # Exit 2 for every one-line error (a missing, corrupted or fine-tuned-for-hf input, a
        # config that does not fit, an --output in use), as every entry point.
        print(f"convert_checkpoint: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        # A read-only or full disk under --output: one line and exit 2, as every entry point.
        message = describe_failure(e)
        if message is None or traceback_requested(FLAGS.verbosity):
            raise
        print(f"convert_checkpoint: error: {message}", file=sys.stderr)
        return 2
    return 0


def run():
    """Console-script entry point (`albert-convert`)."""
    app.run(main)


if __name__ == "__main__":
    run()
