"""The original TF1 checkpoints (google-research/albert): name table, reader and writer.

Names are the original's (no `module/` prefix; TF-Hub modules add one, which is stripped,
also where a checkpoint fine-tuned on a module holds its task head outside it).
TF1 stores kernels as Keras does, [in, out], so nothing is transposed. Checkpoints written by
the original training code also hold optimizer slots and `global_step`; they are skipped.
A released tarball holds `model.ckpt-best.*` and no `checkpoint` state file.
"""

from __future__ import annotations

import os
import re

import numpy as np
import tensorflow as tf
from google.protobuf import text_format

from albert.checkpoints.table import (
    BACKBONE,
    CLASSIFIER,
    SQUAD_V1,
    SQUAD_V2,
    CheckpointError,
    LoadResult,
    NameTable,
    assign,
    bind,
    check_config,
    export_arrays,
    exportable_config,
    initialised_paths,
    model_parts,
    plan_load,
)
from albert.config import AlbertConfig

TF1_TABLE = NameTable(
    backbone={
        "bert/embeddings/word_embeddings": "embeddings.word_embeddings",  # [V, E]
        "bert/embeddings/position_embeddings": "embeddings.position_embeddings",  # [P, E]
        "bert/embeddings/token_type_embeddings": "embeddings.token_type_embeddings",  # [T, E]
        "bert/embeddings/LayerNorm/gamma": "embeddings.layer_norm.gamma",
        "bert/embeddings/LayerNorm/beta": "embeddings.layer_norm.beta",
        "bert/encoder/embedding_hidden_mapping_in/kernel": (
            "embeddings.embedding_hidden_mapping_in.kernel"  # [E, H]
        ),
        "bert/encoder/embedding_hidden_mapping_in/bias": (
            "embeddings.embedding_hidden_mapping_in.bias"
        ),
        "bert/pooler/dense/kernel": "pooler.kernel",  # [H, H]
        "bert/pooler/dense/bias": "pooler.bias",
    },
    block_prefix="bert/encoder/transformer/group_{group}/inner_group_{inner}/",
    attention={
        "attention_1/self/query/kernel": "query.kernel",  # [H, N*D]
        "attention_1/self/query/bias": "query.bias",
        "attention_1/self/key/kernel": "key.kernel",
        "attention_1/self/key/bias": "key.bias",
        "attention_1/self/value/kernel": "value.kernel",
        "attention_1/self/value/bias": "value.bias",
        "attention_1/output/dense/kernel": "output_dense.kernel",  # [N*D, H]
        "attention_1/output/dense/bias": "output_dense.bias",
        "LayerNorm/gamma": "layer_norm.gamma",
        "LayerNorm/beta": "layer_norm.beta",
    },
    ffn={
        "ffn_1/intermediate/dense/kernel": "intermediate.kernel",  # [H, I]
        "ffn_1/intermediate/dense/bias": "intermediate.bias",
        # The original nests the FFN output under `intermediate`.
        "ffn_1/intermediate/output/dense/kernel": "output_dense.kernel",  # [I, H]
        "ffn_1/intermediate/output/dense/bias": "output_dense.bias",
        "LayerNorm_1/gamma": "layer_norm.gamma",
        "LayerNorm_1/beta": "layer_norm.beta",
    },
    masked_lm={
        "cls/predictions/transform/dense/kernel": "dense.kernel",  # [H, E]
        "cls/predictions/transform/dense/bias": "dense.bias",
        "cls/predictions/transform/LayerNorm/gamma": "layer_norm.gamma",
        "cls/predictions/transform/LayerNorm/beta": "layer_norm.beta",
        "cls/predictions/output_bias": "output_bias",  # [V]
    },
    sentence_order={
        "cls/seq_relationship/output_weights": "output_weights",  # [2, H]
        "cls/seq_relationship/output_bias": "output_bias",
    },
    transposed=lambda name, path: False,
    # The original's fine-tuning heads (classifier_utils.py, race_utils.py, squad_utils.py).
    task_heads={
        # GLUE: [num_labels, H], [num_labels]; RACE: [1, H], [1] (one logit per choice).
        CLASSIFIER: {
            "output_weights": "output_weights",
            "output_bias": "output_bias",
        },
        SQUAD_V1: {
            "cls/squad/output_weights": "output_weights",  # [2, H]
            "cls/squad/output_bias": "output_bias",  # [2]
        },
        SQUAD_V2: {
            "start_logits/dense/kernel": "start_dense.kernel",  # [H, 1]
            "start_logits/dense/bias": "start_dense.bias",  # [1]
            "end_logits/dense_0/kernel": "end_dense_0.kernel",  # [2H, H] on [h_t; h_start]
            "end_logits/dense_0/bias": "end_dense_0.bias",  # [H]
            "end_logits/LayerNorm/gamma": "end_layer_norm.gamma",  # [H]
            "end_logits/LayerNorm/beta": "end_layer_norm.beta",  # [H]
            "end_logits/dense_1/kernel": "end_dense_1.kernel",  # [H, 1]
            "end_logits/dense_1/bias": "end_dense_1.bias",  # [1]
            "answer_class/dense_0/kernel": "answer_dense_0.kernel",  # [2H, H] on [h_p; h_CLS]
            "answer_class/dense_0/bias": "answer_dense_0.bias",  # [H]
            "answer_class/dense_1/kernel": "answer_dense_1.kernel",  # [H, 1], no bias
        },
    },
)

CONFIG_FILE = "albert_config.json"
DEFAULT_PREFIX = "model.ckpt"
GLOBAL_STEP = "global_step"
_MODULE_PREFIX = "module/"
_SLOT_SUFFIXES = ("/adam_m", "/adam_v", "/lamb_m", "/lamb_v")
_DATA_SUFFIX = re.compile(r"\.data-\d+-of-\d+$")


def resolve_prefix(path: str) -> str:
    """The checkpoint prefix that `path` names.

    Args:
        path: a prefix (`.../model.ckpt-best`), one of its `.index` / `.data-*` files, or a
            directory with a `checkpoint` state file or with a single checkpoint's files.

    Returns:
        The prefix, such that `prefix + ".index"` exists.

    Raises:
        CheckpointError: nothing, or more than one checkpoint, is found there.
    """
    # A prefix first: on ram:// and some object stores `isdir` is true for any path prefix.
    if tf.io.gfile.exists(path + ".index"):
        return path
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        prefixes = sorted(
            p[: -len(".index")] for p in tf.io.gfile.glob(os.path.join(path, "*.index"))
        )
        if len(prefixes) == 1:
            return prefixes[0]
        if not prefixes:
            raise CheckpointError(
                f"No checkpoint found in directory {path}: no TF1 `checkpoint` or *.index file, "
                "no HF config.json + model.safetensors (or its shards' index), no Keras *.weights.h5."
            )
        best = os.path.join(path, "model.ckpt-best")
        if best in prefixes:
            return best
        names = ", ".join(os.path.basename(p) for p in prefixes)
        raise CheckpointError(
            f"Directory {path} holds several checkpoints ({names}); pass one prefix instead."
        )
    prefix = _DATA_SUFFIX.sub("", path[: -len(".index")] if path.endswith(".index") else path)
    if not tf.io.gfile.exists(prefix + ".index"):
        raise CheckpointError(f"No TF1 checkpoint at {path} (expected the file {prefix}.index).")
    return prefix


def read_config(path: str) -> AlbertConfig | None:
    """The `albert_config.json` beside the checkpoint at `path`, or None."""
    config_path = os.path.join(os.path.dirname(resolve_prefix(path)), CONFIG_FILE)
    return AlbertConfig.from_json_file(config_path) if tf.io.gfile.exists(config_path) else None


def load(model, path: str) -> LoadResult:
    """Loads a TF1 checkpoint into an AlbertBackbone, an AlbertPretrainer or a fine-tuning model.

    A fine-tuning model also takes its head from a checkpoint fine-tuned by the original
    (its names are in `TF1_TABLE.task_heads`), and leaves it initialised when the checkpoint
    has none (a pretrained one).

    Args:
        model: the Keras model; its config must match the checkpoint's.
        path: anything `resolve_prefix` accepts (a checkpoint of this project's training
            loop is another format: `albert.checkpoints.training_format`).

    Returns:
        A `LoadResult`.

    Raises:
        CheckpointError: no checkpoint, a config beside it that differs from the model's, or
            any missing, unexpected or mis-shaped variable (nothing is assigned then).
    """
    prefix = resolve_prefix(path)
    checkpoint_config = read_config(prefix)
    backbone = model_parts(model)[BACKBONE]
    if checkpoint_config is not None:
        check_config(
            backbone.config, checkpoint_config, os.path.join(os.path.dirname(prefix), CONFIG_FILE)
        )
    try:
        # Not tf.train.load_checkpoint: it asks isdir first, true for any prefix on ram://.
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
        stored_shapes = reader.get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(f"Cannot read TF1 checkpoint {prefix}: {e}") from None
    shapes, stored_name, ignored = _model_names(stored_shapes)
    bound = bind(TF1_TABLE, model, "TF1")
    assignments, ignored_heads = plan_load(bound, shapes, TF1_TABLE.head_names(), prefix)
    assign(assignments, lambda name: reader.get_tensor(stored_name[name]))
    covered = [binding.variable for binding in assignments.values()]
    return LoadResult(
        path=prefix,
        format="tf1",
        loaded=sorted(assignments),
        initialised=initialised_paths(model, covered),
        ignored=sorted(ignored + ignored_heads),
    )


def stored_shapes(path: str) -> dict:
    """Name -> shape of the TF1 checkpoint at `path`, as `load` matches them (no optimizer
    slots, no `global_step`, no TF-Hub `module/` prefix).

    Raises:
        CheckpointError: no checkpoint, or one that cannot be read.
    """
    prefix = resolve_prefix(path)
    try:
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise CheckpointError(f"Cannot read TF1 checkpoint {prefix}: {e}") from None
    return _model_names(reader.get_variable_to_shape_map())[0]


def stored_global_step(path: str) -> int | None:
    """The `global_step` of the TF1 checkpoint at `path`, or None where it has none (or
    `path` is no TF1 checkpoint)."""
    try:
        reader = tf.compat.v1.train.NewCheckpointReader(resolve_prefix(path))
        return int(reader.get_tensor(GLOBAL_STEP)) if reader.has_tensor(GLOBAL_STEP) else None
    except (CheckpointError, tf.errors.OpError, ValueError):
        return None


def _model_names(stored_shapes: dict) -> tuple:
    """Drops optimizer slots and `global_step`, strips TF-Hub's `module/` prefix.

    Returns:
        (shapes, stored_name, ignored): name -> shape without the prefix, name -> the name as
        stored, and the stored names skipped.
    """
    ignored = sorted(
        n for n in stored_shapes if n.endswith(_SLOT_SUFFIXES) or n.split("/")[-1] == GLOBAL_STEP
    )
    kept = [n for n in stored_shapes if n not in set(ignored)]
    # A module's own variables all carry the prefix; a checkpoint fine-tuned on a module
    # (the original's --albert_hub_module_handle) holds its task head (`output_weights`, ...)
    # outside it. A stripped name that is also stored unprefixed keeps its prefix (unexpected).
    stored_name = {}
    for n in kept:
        stripped = n[len(_MODULE_PREFIX) :] if n.startswith(_MODULE_PREFIX) else n
        stored_name[n if stripped in stored_shapes else stripped] = n
    shapes = {name: tuple(stored_shapes[stored]) for name, stored in stored_name.items()}
    return shapes, stored_name, ignored


def save(model, directory: str, prefix_name: str = DEFAULT_PREFIX, global_step: int = 0) -> str:
    """Writes `model` as a TF1 checkpoint with the original names, plus `albert_config.json`.

    Like the original's checkpoints it holds `global_step` (int64): the original's Estimator
    restores every global variable, that one included, to evaluate or predict from it.

    Args:
        model: an AlbertBackbone, an AlbertPretrainer or a fine-tuning model (its head under
            the original's names: `output_weights`/`output_bias` for a classifier or RACE,
            `cls/squad/...` for SQuAD v1.1, `start_logits/...`, `end_logits/...`,
            `answer_class/...` for v2.0); a backbone writes no heads.
        directory: created if needed; receives `<prefix_name>.index`, `.data-00000-of-00001`,
            a `checkpoint` state file and `albert_config.json`.
        prefix_name: the checkpoint's file prefix inside `directory`.
        global_step: the step the weights were trained to (0 when not known).

    Returns:
        The checkpoint prefix.

    Raises:
        CheckpointError: the model's layer sharing cannot be written in TF1 names (nothing is
            written then).
    """
    config = exportable_config(model_parts(model)[BACKBONE].config)  # raises before writing
    arrays = export_arrays(bind(TF1_TABLE, model, "TF1"))
    arrays[GLOBAL_STEP] = np.asarray(global_step, dtype=np.int64)
    tf.io.gfile.makedirs(directory)
    prefix = os.path.join(directory, prefix_name)
    names = sorted(arrays)
    tf.raw_ops.SaveV2(
        prefix=prefix,
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[arrays[name] for name in names],
    )
    _write_state_file(directory, prefix_name)
    config.to_json_file(os.path.join(directory, CONFIG_FILE))
    return prefix


def _write_state_file(directory: str, prefix_name: str) -> None:
    """The `checkpoint` file through which `tf.train.latest_checkpoint(directory)` finds it."""
    # The bare name, as in the original's files, keeps the directory movable. The function
    # rewrites relative names as relative to its `save_dir` ("../model.ckpt" for "out", or
    # for any gs:// path, which is never absolute): "." leaves the name as it is.
    state = tf.compat.v1.train.generate_checkpoint_state_proto(
        ".", prefix_name, all_model_checkpoint_paths=[prefix_name]
    )
    from albert import fileio

    fileio.write_text(os.path.join(directory, "checkpoint"), text_format.MessageToString(state))
