"""Evaluation metrics and the result files every fine-tuning task writes.

`albert.metrics.glue` holds the GLUE metrics (numpy only), `albert.metrics.squad` the
official SQuAD evaluation and `albert.metrics.squad_threshold` the SQuAD 2.0 null threshold
chosen on dev; this module holds what every task shares: `eval_results.txt`, one
`key = value` line per metric, written by the training loop after each evaluation and by the
fine-tuning engine for its final weights. TensorFlow (for `tf.io.gfile`, so results can go to
any file system the run writes checkpoints to) is imported only when a file is written, so
that importing a metric stays light.
"""

from __future__ import annotations

import os

from albert import fileio

EVAL_RESULTS_FILE = "eval_results.txt"
# The original ends each evaluated checkpoint's block in eval_results.txt with this line.
BLOCK_SEPARATOR = "=" * 50
# The original fine-tuning scripts' eval_results.txt names (their metric_fn keys) for ours.
ORIGINAL_NAMES = {
    "accuracy": "eval_accuracy",
    "loss": "eval_loss",
    "matthews_corr": "matthew_corr",
    "mse": "MSE",
}


def with_original_names(metrics):
    """`metrics`, plus the same values under the original's names where it has one, so that
    scripts reading the original's `eval_results.txt` read ours."""
    original = {ORIGINAL_NAMES[k]: v for k, v in metrics.items() if k in ORIGINAL_NAMES}
    return {**metrics, **original}


def format_eval_results(results):
    """`key = value` lines sorted by key, as the original's `eval_results.txt`.

    Args:
        results: dict of metric name -> number (or anything printable).

    Returns:
        The text, one line per key, each ending in a newline.
    """
    return "".join(f"{key} = {results[key]}\n" for key in sorted(results))


def write_eval_results(output_dir, results, append=False):
    """Writes (or appends a block to) `output_dir/eval_results.txt`.

    Args:
        output_dir: directory (local or any `tf.io.gfile` file system); created if needed.
        results: dict of metric name -> value.
        append: add the lines after those already there, followed by a line of 50 "=", as
            the original does once per evaluated checkpoint; otherwise replace the file.

    Returns:
        The path written.
    """
    import tensorflow as tf

    tf.io.gfile.makedirs(output_dir)
    path = os.path.join(output_dir, EVAL_RESULTS_FILE)
    text = format_eval_results(results)
    if append:
        previous = ""
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                previous = f.read()
        text = previous + text + BLOCK_SEPARATOR + "\n"
    # The whole file is rewritten under a temporary name and renamed: a kill or a full disk
    # never leaves earlier blocks truncated.
    fileio.write_text(path, text)
    return path


def read_eval_results(output_dir):
    """The blocks of `output_dir/eval_results.txt` that `write_eval_results` writes, in file
    order: dicts of key -> value (an int or float where the text is one, else the text);
    [] when there is no such file."""
    import tensorflow as tf

    path = os.path.join(output_dir, EVAL_RESULTS_FILE)
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    blocks = []
    for block in text.split(BLOCK_SEPARATOR + "\n"):
        results = dict(line.split(" = ", 1) for line in block.splitlines() if " = " in line)
        if results:
            blocks.append({key: _number(value) for key, value in results.items()})
    return blocks


def _number(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
