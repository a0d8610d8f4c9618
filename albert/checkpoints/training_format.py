"""The training loop's own checkpoints (`model.ckpt-<step>`): their layout, detection and loading.

`albert.training` writes them (see `albert.training.checkpointing` for when, and for resume);
this module owns what they hold, so the loop, the fine-tuning engine, `load_checkpoint` and
the converter read them one way. A checkpoint is a TensorFlow object-based checkpoint whose
keys follow the Keras variable paths, so they do not depend on Python attribute names:

    model/<variable.path>/.ATTRIBUTES/VARIABLE_VALUE       e.g. model/encoder/
        group_0_inner_group_0_attention/query/kernel/.ATTRIBUTES/VARIABLE_VALUE
    optimizer/<optimizer variable path>/...                e.g. optimizer/lamb/
        embeddings_word_embeddings_m/...
    global_step/.ATTRIBUTES/VARIABLE_VALUE
    rng/dropout_seed_<i>/.ATTRIBUTES/VARIABLE_VALUE        the dropout layers' seed state

(Keras 3 layers kept in nested Python lists, like the encoder's groups, are invisible to
`tf.train.Checkpoint(model=model)`; keying by path avoids that trap.) The random state is
numbered in the order of `model.variables`, so a resumed run draws the masks an
uninterrupted one would. A run's directory holds `model.ckpt-<step>` files, the best weights
as `model.ckpt-best` (the original's name) and `albert_config.json`.
"""

from __future__ import annotations

import os

import tensorflow as tf

from albert import fileio
from albert.checkpoints.table import CheckpointError, LoadResult

FORMAT = "training"  # `LoadResult.format` of these checkpoints
CHECKPOINT_NAME = "model.ckpt"
BEST_PREFIX = "model.ckpt-best"
CONFIG_FILE = "albert_config.json"
MODEL_KEY = "model"
OPTIMIZER_KEY = "optimizer"
GLOBAL_STEP_KEY = "global_step"
RNG_KEY = "rng"
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def value_key(path: str, part: str = MODEL_KEY) -> str:
    """The checkpoint key of the variable at `path` under `part` (see the module doc)."""
    return f"{part}/{path}{_VALUE_SUFFIX}"


GLOBAL_STEP_VALUE_KEY = GLOBAL_STEP_KEY + _VALUE_SUFFIX


# --- Writing: the object graph -----------------------------------------------------------


def variable_tree(variables):
    """Nested trackables whose checkpoint keys are the variables' paths.

    Args:
        variables: Keras (or tf) variables with a `path` (or `name`) attribute.

    Returns:
        A `tf.train.Checkpoint` node whose children follow the "/"-separated paths.

    Raises:
        CheckpointError: two variables with the same path.
    """
    tree = {}
    for variable in variables:
        path = getattr(variable, "path", None) or variable.name.split(":")[0]
        node = tree
        *parents, leaf = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise CheckpointError(f"Variable path {path!r} clashes with another variable.")
        if leaf in node:
            raise CheckpointError(f"Two variables share the path {path!r}.")
        node[leaf] = variable  # Keras variables are trackable under the TensorFlow backend.
    return _to_trackable(tree)


def _to_trackable(tree):
    children = {k: _to_trackable(v) if isinstance(v, dict) else v for k, v in tree.items()}
    return tf.train.Checkpoint(**children)


def rng_variables(model):
    """The model's random state: the variables that are not weights (seed generators')."""
    weights = {id(w) for w in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def rng_tree(model):
    """The `rng` node: the model's random state as `dropout_seed_<i>`."""
    return tf.train.Checkpoint(
        **{f"dropout_seed_{i}": v for i, v in enumerate(rng_variables(model))}
    )


# --- Reading -----------------------------------------------------------------------------


def checkpoint_prefix(path):
    """A checkpoint prefix: `path` itself, or the latest checkpoint of the directory `path`.

    A prefix is recognised by its `.index` file, never by asking whether `path` is a
    directory: on ram:// and some object stores every path prefix "is" a directory.
    """
    if tf.io.gfile.exists(path + ".index"):
        return path
    return tf.train.latest_checkpoint(path) or path


def checkpoint_reader(path):
    """A reader of the checkpoint `path` names (a prefix, or a run's directory).

    `tf.train.load_checkpoint` and `tf.train.list_variables` ask `isdir` first, which on
    ram:// is true for the prefix itself; the reader here is given the prefix directly.
    """
    return tf.compat.v1.train.NewCheckpointReader(checkpoint_prefix(path))


def stored_shapes(path):
    """{checkpoint key: shape} of the checkpoint `path` names."""
    return checkpoint_reader(path).get_variable_to_shape_map()


def is_training_checkpoint(path):
    """Whether `path` (a prefix, or a run's directory) is a checkpoint of this training code."""
    try:
        names = list(stored_shapes(path))
    except (tf.errors.OpError, ValueError):
        return False
    return GLOBAL_STEP_VALUE_KEY in names and any(n.startswith(MODEL_KEY + "/") for n in names)


def global_step(path):
    """The global step stored in the training checkpoint `path`, or None for any other path."""
    if not is_training_checkpoint(path):
        return None
    return int(checkpoint_reader(path).get_tensor(GLOBAL_STEP_VALUE_KEY))


def _misfit(weight, stored):
    """Why `stored` cannot fill `weight` ("missing", "stored with shape ..."), or None."""
    key = value_key(weight.path)
    if key not in stored:
        return "missing"
    if list(stored[key]) != list(weight.shape):
        return f"stored with shape {stored[key]}"
    return None


def load(model, path, optional_weights=()) -> LoadResult:
    """Loads the model weights of a training checkpoint (the step, optimizer and random state
    stay behind).

    Args:
        model: any Keras model; its weights are matched by `path`.
        path: a checkpoint prefix (`.../model.ckpt-300`) or a run's directory (its newest).
        optional_weights: weights of `model` (e.g. a fine-tuning head) loaded only when the
            checkpoint holds every one of them with the same shape, else left initialised.

    Returns:
        A `LoadResult` with format "training".

    Raises:
        CheckpointError: a weight not in `optional_weights` is missing from the checkpoint or
            stored with another shape (nothing is assigned then).
    """
    prefix = checkpoint_prefix(path)
    stored = stored_shapes(prefix)
    optional = {id(w) for w in optional_weights}
    required = [w for w in model.weights if id(w) not in optional]
    for weight in required:
        found = _misfit(weight, stored)
        if found:
            raise CheckpointError(
                f"{prefix} does not fit this model: {weight.path} {tuple(weight.shape)} is "
                f"{found}; check that albert_config_file matches the run that wrote it."
            )
    extra = [w for w in model.weights if id(w) in optional]
    initialised = []
    if any(_misfit(weight, stored) for weight in extra):
        initialised = [w.path for w in extra]
        extra = []
    weights = required + extra
    tf.train.Checkpoint(**{MODEL_KEY: variable_tree(weights)}).restore(prefix).expect_partial()
    return LoadResult(
        path=prefix,
        format=FORMAT,
        loaded=[w.path for w in weights],
        initialised=initialised,
    )


def restore_model_weights(model, path):
    """Loads every model weight of a training checkpoint (e.g. `model.ckpt-300`).

    Raises:
        CheckpointError: a model weight missing from the checkpoint or of another shape.
    """
    load(model, path)


def write_config(config, output_dir):
    """Writes `config` as the run's `albert_config.json`, which `albert.checkpoints.read_config`
    and the converter read back beside its checkpoints."""
    config.to_json_file(os.path.join(output_dir, CONFIG_FILE))


# --- Copying -----------------------------------------------------------------------------


def copy_checkpoint(source_prefix, target_prefix):
    """Copies the files of the checkpoint `source_prefix` to `target_prefix`.

    Each file is copied to a temporary name and renamed. The old index goes first and the new
    one comes last (the index is what makes a prefix restorable), so a copy cut short leaves
    no restorable mix of old and new files under `target_prefix`.
    """
    files = tf.io.gfile.glob(source_prefix + ".*")
    fileio.remove_quietly(target_prefix + ".index")
    for path in sorted(files, key=lambda p: p.endswith(".index")):
        with fileio.atomic_path(target_prefix + path[len(source_prefix) :]) as temporary:
            tf.io.gfile.copy(path, temporary, overwrite=True)
