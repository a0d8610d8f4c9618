"""This project's own format: Keras `.weights.h5` files with `albert_config.json` beside them.

Unlike TF1 and HF names it holds every sharing mode (`shared_attention`, `shared_ffn`). A
directory holds `pretrainer.weights.h5` (an AlbertPretrainer's weights), `backbone.weights.h5`
(an AlbertBackbone's) or `model.weights.h5` (any other model's: a fine-tuned one). The Keras
loader matches weights by the model's structure and skips, with only a warning, blocks that the
model lacks, so the config beside the weights is required and must match the model: with the
same config and class, the structure, and so every weight, is the same.
"""

from __future__ import annotations

import os

from albert import fileio
from albert.checkpoints import remote
from albert.checkpoints.stored_model import stored_task_head
from albert.checkpoints.table import (
    BACKBONE,
    CLASSIFIER,
    SQUAD_V1,
    SQUAD_V2,
    CheckpointError,
    LoadResult,
    check_config,
    model_parts,
)
from albert.config import AlbertConfig
from albert.modeling import (
    AlbertBackbone,
    AlbertClassifier,
    AlbertPretrainer,
    AlbertQuestionAnswering,
)

CONFIG_FILE = "albert_config.json"
PRETRAINER_FILE = "pretrainer.weights.h5"
BACKBONE_FILE = "backbone.weights.h5"
MODEL_FILE = "model.weights.h5"  # any other model: a fine-tuned one
_SUFFIX = ".weights.h5"


def weights_path(path: str) -> str:
    """The weights file `path` names: itself, or the one file a directory holds."""
    if remote.is_remote(path) and not path.endswith(_SUFFIX):
        return _remote_weights_path(path)
    if path.endswith(_SUFFIX) or not os.path.isdir(path):
        return path
    # A run's output_dir holds the final weights it exported too; it names its newest
    # checkpoint (a TF `checkpoint` state file), as the README says. Those are the same
    # weights until a resumed run saves past them and is killed: the export is then stale.
    if os.path.isfile(os.path.join(path, "checkpoint")):
        return path  # no weights file: `is_keras` is False
    for name in (PRETRAINER_FILE, BACKBONE_FILE, MODEL_FILE):
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    return os.path.join(path, PRETRAINER_FILE)


def _remote_weights_path(path: str) -> str:
    """`weights_path` of a remote directory (gs://), asked by file names only: on ram:// and
    some object stores every path prefix "is" a directory. A path that holds none of them
    (a TF1 prefix, a run directory) gives a file that does not exist."""
    if remote.isfile(os.path.join(path, "checkpoint")):
        return path  # a run directory (see `weights_path`): `is_keras` is False
    for name in (PRETRAINER_FILE, BACKBONE_FILE, MODEL_FILE):
        if remote.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    return os.path.join(path, PRETRAINER_FILE)


def is_keras(path: str) -> bool:
    """Whether `path` is a `.weights.h5` file or a directory holding one that `save` writes
    (local, or remote: gs://)."""
    file = weights_path(path)
    return file.endswith(_SUFFIX) and remote.isfile(file)


def read_config(path: str) -> AlbertConfig | None:
    """The `albert_config.json` beside the weights, or None."""
    config_path = os.path.join(os.path.dirname(weights_path(path)), CONFIG_FILE)
    return AlbertConfig.from_json_file(config_path) if remote.isfile(config_path) else None


def load(model, path: str) -> LoadResult:
    """Loads Keras weights that `save` wrote.

    Pretrainer weights load into an AlbertPretrainer, or their backbone part into an
    AlbertBackbone or any model with `.backbone`; backbone weights load into a backbone, or
    into a pretrainer's backbone, leaving its heads initialised. Any other `.weights.h5`
    file loads into a model of the class that saved it.

    Args:
        model: the Keras model; its config must match `albert_config.json`.
        path: a directory that `save` wrote, or a `.weights.h5` file with
            `albert_config.json` beside it; local or remote (gs://).

    Returns:
        A `LoadResult`.

    Raises:
        CheckpointError: the files are missing, the config differs from the model's, or the
            weights were saved from another model class.
    """
    file = weights_path(path)
    if remote.is_remote(file):  # gs://: Keras and h5py read a local temporary copy
        folder, name = os.path.split(file)
        with remote.local_copies(folder, (name, CONFIG_FILE)) as local:
            return remote.renamed(load(model, os.path.join(local, name)), local, folder)
    if not os.path.isfile(file):
        raise CheckpointError(f"No Keras weights at {path} (expected the file {file}).")
    config = read_config(path)
    config_path = os.path.join(os.path.dirname(file), CONFIG_FILE)
    if config is None:
        raise CheckpointError(
            f"No {CONFIG_FILE} beside {file}; Keras weights are only checked against the config "
            "they were saved with, so keep that file with them."
        )
    backbone = model_parts(model)[BACKBONE]
    check_config(backbone.config, config, config_path)
    saved_by = {PRETRAINER_FILE: AlbertPretrainer, BACKBONE_FILE: AlbertBackbone}.get(
        os.path.basename(file)
    )
    if saved_by is None:
        _check_task_head(model, file)
    target, ignored = _load_into(model, backbone, file, saved_by)
    loaded = {id(v) for v in target.weights}
    return LoadResult(
        path=file,
        format="keras",
        loaded=[v.path for v in model.weights if id(v) in loaded],
        initialised=[v.path for v in model.weights if id(v) not in loaded],
        ignored=ignored,
    )


def _load_into(model, backbone, file: str, saved_by) -> tuple:
    """Loads `file` into the part of `model` it fits; returns (that part, ignored names)."""
    if saved_by is AlbertBackbone:
        _load_weights(backbone, file)
        return backbone, []
    if saved_by is None or isinstance(model, AlbertPretrainer):
        _load_weights(model, file)
        return model, []
    # Pretrainer weights into a backbone: load them whole, keep the backbone part.
    pretrainer = AlbertPretrainer(backbone.config)
    _load_weights(pretrainer, file)
    backbone.set_weights(pretrainer.backbone.get_weights())
    heads = pretrainer.masked_lm_head.weights + pretrainer.sentence_order_head.weights
    return backbone, [v.path for v in heads]


def _check_task_head(model, file: str) -> None:
    """Raises CheckpointError when `file` holds another task head than `model` has (MNLI's
    three labels into RTE's two): Keras would only say the head 'received 0 variables'."""
    stored, wanted = stored_task_head(file, "keras"), _task_head(model)
    if stored != wanted:
        raise CheckpointError(
            f"{file} holds {_head_name(*stored)}, and this {type(model).__name__} has "
            f"{_head_name(*wanted)}; load it into a model with the same head."
        )


def _task_head(model) -> tuple:
    """(kind, num_labels) of `model`'s head, as `stored_task_head` names a stored one."""
    if isinstance(model, AlbertClassifier):  # AlbertMultipleChoice too: one label
        return CLASSIFIER, model.num_labels
    if isinstance(model, AlbertQuestionAnswering):
        return (SQUAD_V2 if model.version_2_with_negative else SQUAD_V1), None
    return None, None


def _head_name(kind, num_labels) -> str:
    names = {SQUAD_V1: "the SQuAD 1.1 span head", SQUAD_V2: "the SQuAD 2.0 head"}
    if kind == CLASSIFIER:
        return f"a classifier head of {num_labels} label{'s' if num_labels != 1 else ''}"
    return names.get(kind, "no task head")


def _load_weights(model, file: str) -> None:
    try:
        model.load_weights(file)
    except ValueError as e:
        first_line = str(e).strip().splitlines()[0]
        raise CheckpointError(
            f"{file} was not saved from a {type(model).__name__} ({first_line}); load it into "
            "the class that saved it."
        ) from None
    except OSError as e:  # truncated (a copy cut off) or not HDF5: one line, not h5py's
        raise CheckpointError(f"Cannot read the Keras weights {file}: {e}") from None


def save(model, directory: str) -> str:
    """Writes the model's weights and `albert_config.json` into `directory`.

    Args:
        model: an AlbertPretrainer (written as `pretrainer.weights.h5`) or an AlbertBackbone
            (`backbone.weights.h5`); another model is written as `model.weights.h5`.
        directory: created if needed. A remote one (gs://) receives the files written
            locally first, then copied up, each under a temporary name renamed when complete.

    Returns:
        The weights file's path.
    """
    name = _file_name(model)
    if remote.is_remote(directory):  # Keras writes local files: `os.makedirs` would make a
        # local folder named `gs:`. The weights go first, as below.
        with remote.written_locally(directory, (name, CONFIG_FILE)) as local:
            save(model, local)
            _remove_remote(directory, {PRETRAINER_FILE, BACKBONE_FILE} - {name})
        return os.path.join(directory, name)
    os.makedirs(directory, exist_ok=True)
    for stale in {PRETRAINER_FILE, BACKBONE_FILE} - {name}:
        if os.path.isfile(os.path.join(directory, stale)):
            os.remove(os.path.join(directory, stale))
    file = os.path.join(directory, name)
    with fileio.local_atomic_path(file, _SUFFIX) as temporary:  # Keras wants the suffix
        model.save_weights(temporary)
    model_parts(model)[BACKBONE].config.to_json_file(os.path.join(directory, CONFIG_FILE))
    return file


def _file_name(model) -> str:
    """The weights file `save` writes `model` into."""
    if isinstance(model, AlbertPretrainer):
        return PRETRAINER_FILE
    if isinstance(model, AlbertBackbone):
        return BACKBONE_FILE
    return MODEL_FILE


def _remove_remote(directory: str, names) -> None:
    """Deletes the files `names` of the remote `directory` that exist (stale weights of
    another class, which `weights_path` would pick first)."""
    import tensorflow as tf  # only for remote paths such as gs://

    for name in names:
        if remote.isfile(os.path.join(directory, name)):
            tf.io.gfile.remove(os.path.join(directory, name))
