"""The files a GLUE run writes for the test set (`--do_predict`), in `output_dir`.

- `test_results.tsv`: one row per test example, its class probabilities (for STS-B, the
  predicted score) separated by tabs, as the original writes them.
- The GLUE submission file named as the server expects (`CoLA.tsv`, `MNLI-m.tsv`,
  `MNLI-mm.tsv`, `AX.tsv`, ...): `index<TAB>prediction`, the label string of the predicted
  class, or for STS-B the score clipped to [0, 5] with 3 decimals.
- `submit_results.tsv`: the same lines under the original's name (the original leaves STS-B
  unclipped there).

Example:
    >>> write_glue_predictions("out/mrpc", "mrpc", test_examples, probabilities)
    ['out/mrpc/test_results.tsv', 'out/mrpc/MRPC.tsv', 'out/mrpc/submit_results.tsv']
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from albert import fileio
from albert.glue_tasks import STSB_SCORE_RANGE, GlueDataError, get_task
from albert.metrics.glue import class_predictions

TEST_RESULTS_FILE = "test_results.tsv"
SUBMIT_RESULTS_FILE = "submit_results.tsv"


def write_glue_predictions(output_dir, task_name, examples, outputs):
    """Writes the three files of the module doc; returns their paths.

    Args:
        output_dir: directory (any `tf.io.gfile` file system); created if needed.
        task_name: a `--task_name`.
        examples: the test `InputExample`s, in order.
        outputs: [N, C] class probabilities, or [N] scores (STS-B), of those examples.
    """
    paths = [write_test_results(output_dir, outputs)]
    submission = write_submission(output_dir, task_name, examples, outputs)
    submit_results = os.path.join(output_dir, SUBMIT_RESULTS_FILE)
    with fileio.atomic_path(submit_results) as temporary:
        tf.io.gfile.copy(submission, temporary, overwrite=True)
    return [*paths, submission, submit_results]


def write_test_results(output_dir, outputs):
    """Writes `test_results.tsv`: one row per example, its outputs separated by tabs.

    Args:
        output_dir: directory (any `tf.io.gfile` file system); created if needed.
        outputs: [N, C] class probabilities, or [N] / [N, 1] scores (STS-B), of the real
            examples only (padding dropped). Values are written as float32 in the shortest
            form that reads back exactly.

    Returns:
        The path written.
    """
    outputs = np.asarray(outputs, np.float32)
    outputs = outputs.reshape(len(outputs), -1)  # [N, C]
    lines = ["\t".join(str(value) for value in row) + "\n" for row in outputs]
    return _write_lines(os.path.join(output_dir, TEST_RESULTS_FILE), lines)


def write_submission(output_dir, task_name, examples, predictions):
    """Writes the GLUE server's file for a task's test predictions (e.g. `MNLI-m.tsv`).

    Args:
        output_dir: directory (any `tf.io.gfile` file system); created if needed.
        task_name: a `--task_name`.
        examples: the test `InputExample`s (their `guid` is the GLUE index), in order.
        predictions: [N] class ids or [N, C] scores; for STS-B [N] or [N, 1] scores.

    Returns:
        The path written.

    Raises:
        GlueDataError: the number of predictions differs from the number of examples.
    """
    task = get_task(task_name)
    predictions = class_predictions(task, predictions)
    if len(predictions) != len(examples):
        raise GlueDataError(
            f"{len(predictions)} predictions for {len(examples)} {task.name} test examples; "
            "drop the padding examples (is_real_example 0) before writing."
        )
    if task.is_regression:
        clipped = np.clip(predictions, *STSB_SCORE_RANGE)
        values = [f"{score:.3f}" for score in clipped]
    else:
        values = [task.labels[class_id] for class_id in predictions]
    lines = ["index\tprediction\n"]
    lines += [f"{example.guid}\t{value}\n" for example, value in zip(examples, values, strict=True)]
    return _write_lines(os.path.join(output_dir, task.submission_file), lines)


def _write_lines(path, lines):
    fileio.write_text(path, "".join(lines))
    return path
