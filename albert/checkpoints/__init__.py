"""Checkpoints: the original TF1 release, HF transformers, this project's Keras weights and
the training loop's own checkpoints (`model.ckpt-<step>`, see `training_format`).

`load_checkpoint` detects the format of a path and loads it, checking that every model
variable is matched; `save_checkpoint` writes TF1, HF or Keras. `load_any` is what
`--init_checkpoint` reads: a training checkpoint (or a run directory's newest one) first,
else whatever `load_checkpoint` reads. Every format reads and writes local and remote (gs://)
paths: a remote HF or Keras folder through a local temporary copy (`albert.checkpoints.remote`).
TensorFlow is imported only for the TF1 and training formats and for remote paths, so local
HF and Keras checkpoints load under any Keras backend.

Example:
    >>> model = AlbertPretrainer(AlbertConfig.from_json_file("albert_base/albert_config.json"))
    >>> result = load_checkpoint(model, "albert_base")  # holds model.ckpt-best.*
    >>> result.initialised  # variables the checkpoint did not hold
    []
"""

from __future__ import annotations

from absl import logging

from albert.checkpoints import hf, hf_weights, keras_format, remote
from albert.checkpoints.table import CheckpointError, LoadResult

__all__ = [
    "FORMATS",
    "CheckpointError",
    "LoadResult",
    "detect_format",
    "load_any",
    "load_checkpoint",
    "read_config",
    "save_checkpoint",
]

FORMATS = ("tf1", "hf", "keras")  # the formats `save_checkpoint` writes
TRAINING = "training"  # the training loop's checkpoints: read, never written, here
_EXPECTED = (
    "expected a TF1 checkpoint prefix or directory, an HF directory (config.json + "
    "model.safetensors) or Keras weights (*.weights.h5 with albert_config.json)"
)


def _tf1():
    from albert.checkpoints import tf1  # imports TensorFlow

    return tf1


def _training():
    from albert.checkpoints import training_format  # imports TensorFlow

    return training_format


def detect_format(path: str) -> str:
    """ "hf", "keras", "training" or "tf1" for the checkpoint at `path`.

    A run directory (a TF `checkpoint` state file) is its newest checkpoint, not the Keras
    weights it exported beside it (stale once a resumed run has saved past them).

    Raises:
        CheckpointError: `path` holds none of them.
    """
    if hf.is_hf(path):
        return "hf"
    if keras_format.is_keras(path):
        return "keras"
    if path.endswith(".keras") and remote.isfile(path):
        raise CheckpointError(
            f"{path} is a whole Keras model (model.save), not a checkpoint: load it with "
            "keras.saving.load_model, or write its weights with save_checkpoint(model, DIR, "
            '"keras") and pass DIR.'
        )
    torch_file = hf_weights.torch_only(path)
    if torch_file:
        raise CheckpointError(
            f"{path} holds its HF weights only as {torch_file} (torch's pickle format), which "
            "is read here only as safetensors: with transformers, "
            "AlbertForPreTraining.from_pretrained(DIR).save_pretrained(DIR) (the class its "
            "config.json names) writes model.safetensors beside it."
        )
    # A remote path too: "No TF1 checkpoint at ..." misled about an HF or Keras folder's typo.
    if not remote.exists(path) and not remote.exists(path + ".index"):
        raise CheckpointError(f"No checkpoint found at {path}: {_EXPECTED}.")
    prefix = _tf1().resolve_prefix(path)  # raises naming what is wrong with the TF1 path
    return TRAINING if _training().is_training_checkpoint(prefix) else "tf1"


def read_config(path: str):
    """The `AlbertConfig` stored with the checkpoint at `path`, or None when there is none.

    An HF directory's `config.json` is converted; TF1, training and Keras checkpoints may
    have an `albert_config.json` beside them.
    """
    format_name = detect_format(path)
    if format_name == "hf":
        return hf.read_config(path)
    if format_name == "keras":
        return keras_format.read_config(path)
    return _tf1().read_config(path)  # TF1 and training: a prefix with the config beside it


def load_checkpoint(model, path: str, format_name: str | None = None) -> LoadResult:
    """Loads a TF1, HF or Keras checkpoint into `model`, matching every variable.

    Args:
        model: an AlbertBackbone, an AlbertPretrainer, or a model holding an AlbertBackbone as
            `.backbone` (its other variables are left initialised and reported).
        path: a TF1 or training checkpoint prefix or directory, an HF directory or Keras
            weights.
        format_name: "tf1", "hf", "keras" or "training"; detected from `path` when None.

    Returns:
        A `LoadResult`: what was loaded, what was left initialised (e.g. pretraining heads an
        encoder-only checkpoint lacks) and what was ignored (optimizer slots, heads a backbone
        has no place for).

    Raises:
        CheckpointError: the path holds no checkpoint, or it does not fit the model (a missing,
            unexpected or mis-shaped variable, or a config that differs).
    """
    format_name = format_name or detect_format(path)
    if format_name == "hf":
        result = hf.load(model, path)
    elif format_name == "keras":
        result = keras_format.load(model, path)
    elif format_name == "tf1":
        result = _tf1().load(model, path)
    elif format_name == TRAINING:
        result = _training().load(model, _tf1().resolve_prefix(path))
    else:
        raise CheckpointError(
            f"Unknown checkpoint format {format_name!r}; use one of {(*FORMATS, TRAINING)}."
        )
    return _logged(result, format_name, path)


def load_any(model, path: str, optional_weights=()) -> LoadResult:
    """Loads `--init_checkpoint`: one of our training checkpoints, else any format.

    This is the one place that tells the training loop's own checkpoints from foreign ones.
    A training checkpoint, or a run directory (its newest checkpoint, not the Keras weights
    exported beside it), loads its model weights only (a run that starts from it restarts
    the step); any other path is read by `load_checkpoint`.

    Args:
        model: as `load_checkpoint` takes it.
        path: a training checkpoint prefix or run directory, or what `load_checkpoint` reads.
        optional_weights: weights of `model` (e.g. a fine-tuning head) that a training
            checkpoint may lack: loaded only when it holds all of them with the same shapes,
            else left initialised and reported in `initialised`. (The foreign formats leave
            a head the checkpoint lacks initialised anyway.)

    Returns:
        A `LoadResult`.

    Raises:
        CheckpointError: as `load_checkpoint`; for a training checkpoint, a weight outside
            `optional_weights` that is missing or of another shape.
    """
    if _training().is_training_checkpoint(path):
        return _logged(_training().load(model, path, optional_weights), TRAINING, path)
    return load_checkpoint(model, path)


def _logged(result: LoadResult, format_name: str, path: str) -> LoadResult:
    """Logs what `result` loaded, left initialised and ignored; returns it."""
    # The checkpoint read: a run directory names its newest model.ckpt-N, which the log must
    # show (a directory means its best checkpoint elsewhere, e.g. as a fine-tuning source).
    path = result.path or path
    logging.info(
        "Loaded %d variables from the %s checkpoint %s.", len(result.loaded), format_name, path
    )
    if result.initialised:
        logging.warning(
            "The checkpoint %s has no values for %d variables, left initialised: %s",
            path,
            len(result.initialised),
            ", ".join(result.initialised),
        )
    if result.ignored:
        logging.info(
            "Ignored %d checkpoint variables (optimizer slots, step, heads the model lacks, tied "
            "copies): %s",
            len(result.ignored),
            ", ".join(result.ignored),
        )
    return result


def save_checkpoint(model, directory: str, format_name: str, global_step: int = 0) -> str:
    """Writes `model` into `directory` as "tf1", "hf" or "keras" (see each module's `save`);
    a TF1 checkpoint also holds `global_step`, as the original's do.

    Returns:
        What was written: the TF1 prefix, the HF directory or the Keras weights file.

    Raises:
        CheckpointError: an unknown format, a sharing mode the format cannot express, or (HF)
            a task head no HF class computes (SQuAD v2.0's).
    """
    if format_name == "hf":
        return hf.save(model, directory)
    if format_name == "keras":
        return keras_format.save(model, directory)
    if format_name == "tf1":
        return _tf1().save(model, directory, global_step=global_step)
    raise CheckpointError(f"Unknown checkpoint format {format_name!r}; use one of {FORMATS}.")
