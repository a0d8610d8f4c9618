"""The SQuAD 2.0 null threshold predictions.json was written with, recorded beside it.

A run that only exports (`--export_dir`) has no predictions to tune a threshold on. When an
earlier run of the same `output_dir` wrote predictions.json with a threshold tuned on its
--predict_file, or given by --null_score_diff_threshold, the SavedModel must null answers as
predictions.json does. So a v2 run that writes predictions.json also writes, beside it,
`predictions_null_threshold.json`:

    {"checkpoint": "out/model.ckpt-best", "global_step": 4,
     "null_score_diff_threshold": -1.25, "source": "tuned on --predict_file"}

An export reads it for the same weights only: the same checkpoint and global step, matched as
`albert.tasks.weights.earlier_evaluation` matches an evaluation, and the record written after
them (`model.ckpt-best` rewritten by later training is other weights).
"""

from __future__ import annotations

import json
import math
import os

import tensorflow as tf
from absl import logging

from albert import fileio
from albert.tasks.weights import names_weights, written_after

RECORD_FILE = "predictions_null_threshold.json"
# The source of a threshold neither given nor tuned (0.0): an export does not serve it as
# chosen, but warns as when no record is there.
UNTUNED = "none given or tuned (0.0)"


def write_record(output_dir, path, step, threshold, source):
    """Writes (atomically) the threshold predictions.json of the weights at `path` (global
    step `step`, or None) was written with, and how it was chosen (`source`, for the log of
    the export that reads it). Returns the path written."""
    record_file = os.path.join(output_dir, RECORD_FILE)
    fileio.write_json(
        record_file,
        {
            "checkpoint": path,
            "global_step": step,
            "null_score_diff_threshold": float(threshold),
            "source": source,
        },
    )
    return record_file


def read_record(output_dir, path, step):
    """The record of the weights at `path` (global step `step`) in `output_dir`, or None: no
    record, one of other weights, or one that cannot be read (warned about in one line).

    Returns:
        dict with `null_score_diff_threshold` (a float), `source` and `path` (the record's).
    """
    record_file = os.path.join(output_dir, RECORD_FILE)
    try:
        if not tf.io.gfile.exists(record_file):
            return None
        with tf.io.gfile.GFile(record_file, "rb") as f:
            record = json.loads(f.read().decode("utf-8"))
        if not isinstance(record, dict):
            raise ValueError(f"a JSON {type(record).__name__}, not an object")
        threshold = record["null_score_diff_threshold"]
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise ValueError(f"null_score_diff_threshold is {threshold!r}, not a number")
        if math.isnan(threshold):
            raise ValueError("null_score_diff_threshold is NaN")
        if not isinstance(record.get("checkpoint"), str):
            raise ValueError("it names no checkpoint")
    except (tf.errors.OpError, OSError, ValueError, KeyError, TypeError) as e:
        # A damaged record must not decide what the SavedModel serves; one line on why not.
        detail = (str(e).splitlines() or [type(e).__name__])[0]
        if isinstance(e, KeyError):
            detail = f"it holds no {e}"
        logging.warning("Ignoring %s: not a readable threshold record (%s).", record_file, detail)
        return None
    if not (names_weights(output_dir, record, path, step) and written_after(record_file, path)):
        return None
    return {
        "null_score_diff_threshold": float(threshold),
        "source": str(record.get("source", "")),
        "path": record_file,
    }


def warn_if_other_than(record, threshold):
    """Warns when `record` (`read_record`'s, or None) holds a threshold other than
    `threshold`, the one tuned by an evaluation of the same weights, which an export alone
    serves instead (the flag, given again, serves predictions.json's)."""
    if record is None or record["null_score_diff_threshold"] == threshold:
        return
    logging.warning(
        "predictions.json of these weights was written with null threshold %s (%s), not "
        "their evaluation's %s, which the SavedModel serves; pass "
        "--null_score_diff_threshold=%s to serve predictions.json's.",
        record["null_score_diff_threshold"],
        record["source"],
        threshold,
        record["null_score_diff_threshold"],
    )
