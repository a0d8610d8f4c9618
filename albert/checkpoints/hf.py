"""HF transformers' AlbertForPreTraining format: `config.json` + `model.safetensors`.

Read and written with `safetensors.numpy`, so neither torch nor TensorFlow is needed and this
works under any Keras backend. torch `Linear` weights are stored [out, in], the transpose of a
Keras `Dense` kernel; embeddings, LayerNorm and the SOP weights [2, H] are stored as ours.
HF's `gelu` is the exact (erf) GELU, our `gelu_exact`; its `gelu_new` is our `gelu`.
A file without the pooler (HF's AlbertForMaskedLM and AlbertForQuestionAnswering save none)
loads with the pooler left at its initial values, as HF loads one, and a warning.

Three of HF's fine-tuning classes compute a head of ours (`albert.checkpoints.hf_heads`); their
head loads into that task model (the file's `architectures` says which class it is), so an HF
fine-tuned model predicts here as it does in HF (for a GLUE task, `order_classes` puts an
AlbertForSequenceClassification's classes, named in config.json's id2label, in the task's
order). Any other HF head, or one of another shape (3 labels for a 2-label classifier), is
left out with a warning: the task model's head starts from its initial values and a run
initialises from the encoder.
"""

from __future__ import annotations

import json
import os

import numpy as np
from absl import logging
from safetensors.numpy import save_file

from albert import fileio
from albert.checkpoints import hf_heads, hf_weights, remote
from albert.checkpoints.hf_heads import head_architecture
from albert.checkpoints.table import (
    BACKBONE,
    CLASSIFIER,
    MASKED_LM,
    SENTENCE_ORDER,
    SQUAD_V1,
    SQUAD_V2,
    TASK_HEAD,
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
    task_head,
)
from albert.config import AlbertConfig, ConfigError

HF_TABLE = NameTable(
    backbone={
        "albert.embeddings.word_embeddings.weight": "embeddings.word_embeddings",  # [V, E]
        "albert.embeddings.position_embeddings.weight": "embeddings.position_embeddings",
        "albert.embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings",
        "albert.embeddings.LayerNorm.weight": "embeddings.layer_norm.gamma",
        "albert.embeddings.LayerNorm.bias": "embeddings.layer_norm.beta",
        "albert.encoder.embedding_hidden_mapping_in.weight": (
            "embeddings.embedding_hidden_mapping_in.kernel"  # [H, E]
        ),
        "albert.encoder.embedding_hidden_mapping_in.bias": (
            "embeddings.embedding_hidden_mapping_in.bias"
        ),
        "albert.pooler.weight": "pooler.kernel",
        "albert.pooler.bias": "pooler.bias",
    },
    block_prefix="albert.encoder.albert_layer_groups.{group}.albert_layers.{inner}.",
    attention={
        "attention.query.weight": "query.kernel",  # [N*D, H]
        "attention.query.bias": "query.bias",
        "attention.key.weight": "key.kernel",
        "attention.key.bias": "key.bias",
        "attention.value.weight": "value.kernel",
        "attention.value.bias": "value.bias",
        "attention.dense.weight": "output_dense.kernel",
        "attention.dense.bias": "output_dense.bias",
        "attention.LayerNorm.weight": "layer_norm.gamma",
        "attention.LayerNorm.bias": "layer_norm.beta",
    },
    ffn={
        "ffn.weight": "intermediate.kernel",  # [I, H]
        "ffn.bias": "intermediate.bias",
        "ffn_output.weight": "output_dense.kernel",  # [H, I]
        "ffn_output.bias": "output_dense.bias",
        "full_layer_layer_norm.weight": "layer_norm.gamma",
        "full_layer_layer_norm.bias": "layer_norm.beta",
    },
    masked_lm={
        "predictions.dense.weight": "dense.kernel",  # [E, H]
        "predictions.dense.bias": "dense.bias",
        "predictions.LayerNorm.weight": "layer_norm.gamma",
        "predictions.LayerNorm.bias": "layer_norm.beta",
        "predictions.bias": "output_bias",  # [V]
    },
    sentence_order={
        "sop_classifier.classifier.weight": "output_weights",  # [2, H], as ours
        "sop_classifier.classifier.bias": "output_bias",
    },
    # Only Dense kernels come from torch Linear layers.
    transposed=lambda name, path: path.endswith(".kernel"),
    # HF's fine-tuning heads are torch Linear layers over [CLS]'s pooled output or every
    # position; their weight [out, H] is stored as our `output_weights`.
    task_heads={
        # AlbertForSequenceClassification [num_labels, H]; AlbertForMultipleChoice [1, H].
        CLASSIFIER: {"classifier.weight": "output_weights", "classifier.bias": "output_bias"},
        # AlbertForQuestionAnswering [2, H]: row 0 gives the start logits, row 1 the end.
        SQUAD_V1: {"qa_outputs.weight": "output_weights", "qa_outputs.bias": "output_bias"},
    },
)

CONFIG_FILE = "config.json"
_BASE_PREFIX = "albert."
_MAPPING_WEIGHT = "albert.encoder.embedding_hidden_mapping_in.weight"  # [H, E]
_MAPPING_BIAS = "albert.encoder.embedding_hidden_mapping_in.bias"
WEIGHTS_FILE = hf_weights.WEIGHTS_FILE  # what `save` writes; `load` reads shards too

# The decoder is tied to the input embeddings and its bias to `predictions.bias`; some files
# carry the copies. name -> the name it must equal.
_TIED = {
    "predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
    "predictions.decoder.bias": "predictions.bias",
}
# Buffers (not parameters) that older files carry: name -> the value it must hold.
_BUFFERS = {
    "albert.embeddings.position_ids": lambda shape: np.arange(shape[-1]).reshape(shape),
    "albert.embeddings.token_type_ids": lambda shape: np.zeros(shape),
}

# HF `hidden_act` -> ours, for the activations that mean the same function.
_ACTIVATION_FROM_HF = {
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "gelu": "gelu_exact",
    "relu": "relu",
    "tanh": "tanh",
    "silu": "silu",
    "swish": "silu",
    "linear": "linear",
}
_ACTIVATION_TO_HF = {
    "gelu": "gelu_new",
    "gelu_new": "gelu_new",
    "gelu_exact": "gelu",
    "relu": "relu",
    "tanh": "tanh",
    "silu": "silu",
    "swish": "silu",
    "linear": "linear",
}
# The ALBERT keys HF's config shares with `albert_config.json`; HF's defaults for absent ones.
_HF_DEFAULTS = {
    "vocab_size": 30000,
    "embedding_size": 128,
    "hidden_size": 4096,
    "num_hidden_layers": 12,
    "num_hidden_groups": 1,
    "num_attention_heads": 64,
    "intermediate_size": 16384,
    "inner_group_num": 1,
    "hidden_act": "gelu_new",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}
_LAYER_NORM_EPSILON = 1e-12


def is_hf(path: str) -> bool:
    """Whether `path` is a directory holding `config.json` and `model.safetensors` or a
    sharded save's index (local, or remote: gs://)."""
    return remote.isfile(os.path.join(path, CONFIG_FILE)) and hf_weights.present(path)


def read_config(directory: str) -> AlbertConfig:
    """Converts an HF ALBERT `config.json` into an `AlbertConfig`.

    Raises:
        CheckpointError: the file is missing, not an ALBERT config, or describes a model this
            project does not compute (another activation, LayerNorm epsilon or position type).
    """
    path = os.path.join(directory, CONFIG_FILE)
    values = read_values(directory)
    if values.get("model_type", "albert") != "albert":
        raise CheckpointError(f"{path} is a {values['model_type']!r} config, not an ALBERT one.")
    keys = {key: values.get(key, default) for key, default in _HF_DEFAULTS.items()}
    if keys["hidden_act"] not in _ACTIVATION_FROM_HF:
        raise CheckpointError(
            f"{path} has hidden_act={keys['hidden_act']!r}, which ALBERT here does not compute; "
            f"use one of {', '.join(_ACTIVATION_FROM_HF)}."
        )
    keys["hidden_act"] = _ACTIVATION_FROM_HF[keys["hidden_act"]]
    if values.get("layer_norm_eps", _LAYER_NORM_EPSILON) != _LAYER_NORM_EPSILON:
        raise CheckpointError(
            f"{path} has layer_norm_eps={values['layer_norm_eps']}; ALBERT uses 1e-12."
        )
    if values.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(
            f"{path} uses {values['position_embedding_type']} positions; ALBERT uses absolute ones."
        )
    try:
        return AlbertConfig.from_dict(keys)
    except ConfigError as e:
        raise CheckpointError(f"{path}: {e}") from None


def read_values(directory: str) -> dict:
    """The keys of an HF `config.json`, as stored.

    Raises:
        CheckpointError: the file is missing or not valid JSON.
    """
    if remote.is_remote(directory):  # gs://: read from a local copy, as a local file
        with remote.local_copies(directory, (CONFIG_FILE,)) as local:
            return read_values(local)
    path = os.path.join(directory, CONFIG_FILE)
    if not os.path.isfile(path):
        raise CheckpointError(f"No {CONFIG_FILE} in {directory}; is this an HF model directory?")
    try:
        with open(path, encoding="utf-8-sig") as f:  # a byte-order mark is not an error
            return json.load(f)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}).") from None
    except UnicodeDecodeError:  # UTF-16 (PowerShell's `>`) or binary: one line, as a JSON error
        raise CheckpointError(
            f"{path} is not a UTF-8 JSON file; is it an HF config.json?"
        ) from None


def order_classes(model, directory: str, labels) -> None:
    """Puts the classes of an AlbertForSequenceClassification file's head, loaded into the
    AlbertClassifier `model`, in the order of a task's `labels`.

    HF models name their classes in config.json's `id2label`, often in another order than
    the task's (MNLI's contradiction, neutral, entailment for our contradiction, entailment,
    neutral); row i of `classifier.weight` is class `id2label[i]`. Names are compared without
    case. The same names in another order: the head's rows [C, H] and biases [C] are
    permuted into the task's order (logged). HF's unnamed LABEL_0, LABEL_1, ... or other
    names (not_equivalent for "0"): the file's order is assumed to be the task's, with a
    warning. The classes' names are not matched further (no synonyms).

    Args:
        model: an AlbertClassifier whose head was just loaded from `directory`.
        directory: the HF directory.
        labels: the task's class names in class-id order (() for regression: nothing to do).
    """
    hf_heads.reorder(model, read_values(directory), labels, os.path.join(directory, CONFIG_FILE))


def config_to_hf(config: AlbertConfig, architecture: str) -> dict:
    """The HF `config.json` for `config` (not_shared is written as one group per layer)."""
    config = exportable_config(config)
    values = {key: getattr(config, key) for key in _HF_DEFAULTS}
    values["hidden_act"] = _ACTIVATION_TO_HF[config.hidden_act]
    values.update(
        architectures=[architecture],
        model_type="albert",
        layer_norm_eps=_LAYER_NORM_EPSILON,
        position_embedding_type="absolute",
        classifier_dropout_prob=0.1,
        # The SentencePiece ids of <pad>, [CLS] and [SEP] in the released vocabulary.
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    return values


def load(model, directory: str) -> LoadResult:
    """Loads an HF ALBERT directory into an AlbertBackbone, AlbertPretrainer or fine-tuning model.

    A task model also takes its head from a file of the HF class that computes it
    (`head_architecture`) when the shapes fit, and leaves it initialised otherwise.

    Args:
        model: the Keras model; its config must match `config.json`.
        directory: holds `config.json` and `model.safetensors` (or the shards of
            `model.safetensors.index.json`); local or remote (gs://, read from a local
            temporary copy: safetensors reads local files only).

    Returns:
        A `LoadResult`.

    Raises:
        CheckpointError: missing files, a config that differs from the model's, or any
            missing, unexpected or mis-shaped tensor outside the task head (nothing is
            assigned then).
    """
    if remote.is_remote(directory):
        names = (CONFIG_FILE, *hf_weights.files(directory))
        with remote.local_copies(directory, names) as local:
            return remote.renamed(load(model, local), local, directory)
    checkpoint_config = read_config(directory)
    check_group_mapping(checkpoint_config, os.path.join(directory, CONFIG_FILE))
    check_config(
        model_parts(model)[BACKBONE].config, checkpoint_config, os.path.join(directory, CONFIG_FILE)
    )
    weights_path = hf_weights.path(directory)  # model.safetensors, or a sharded save's index
    with hf_weights.open_weights(directory) as f:
        stored_name = _model_names(f.keys())
        shapes = {
            name: tuple(f.get_slice(stored).get_shape()) for name, stored in stored_name.items()
        }

        def read(name):
            return f.get_tensor(stored_name[name])

        ignored = _tolerated(shapes, read, weights_path)
        if model_parts(model)[BACKBONE].embeddings.embedding_hidden_mapping_in is None:
            ignored += _identity_mapping(shapes, read, weights_path)
        shapes = {name: shape for name, shape in shapes.items() if name not in ignored}
        bound = bind(HF_TABLE, model, "HF")
        if not any(name in shapes for name in _POOLER):
            logging.warning(
                "%s holds no pooler (HF saves none for AlbertForMaskedLM and "
                "AlbertForQuestionAnswering): it starts from its initial values, as in HF.",
                weights_path,
            )
            bound[BACKBONE] = {k: v for k, v in bound[BACKBONE].items() if k not in _POOLER}
        architectures = read_values(directory).get("architectures") or []
        if not hf_heads.fitting_head(model, bound[TASK_HEAD], shapes, architectures, weights_path):
            bound[TASK_HEAD] = {}  # its names are then ignored, as a backbone's are
        assignments, ignored_heads = plan_load(
            bound, shapes, HF_TABLE.head_names() | set(_TIED), weights_path
        )
        task_heads = [name for name in ignored_heads if name in _TASK_HEADS]
        # A head of this model's class but of another shape was warned about above.
        if task_heads and hf_heads.head_architecture(model) not in architectures:
            squad_v2 = task_head(model)[0] == SQUAD_V2
            logging.warning(
                "%s: HF's task head (%s) is not read into an %s (the file is an %s%s); "
                "the encoder is.",
                weights_path,
                ", ".join(task_heads),
                type(model).__name__,
                " or ".join(architectures) or "HF model of no named class",
                "; no HF class computes SQuAD 2.0's head" if squad_v2 else "",
            )
        assign(assignments, read)
    return LoadResult(
        path=directory,
        format="hf",
        loaded=sorted(assignments),
        initialised=initialised_paths(model, [b.variable for b in assignments.values()]),
        ignored=sorted(ignored + ignored_heads),
    )


def check_group_mapping(config: AlbertConfig, source: str) -> None:
    """Raises CheckpointError where HF runs a layer with another group than the original.

    The original's layer l uses group int(l / L * G), HF's int(l / (L / G)); in floating point
    they differ for a few (L, G), e.g. (18, 14), (22, 22), (27, 21), so such a model computes
    another function in HF than here.
    """
    layers, groups = config.num_hidden_layers, config.num_hidden_groups
    for layer in range(layers):
        hf_group = int(layer / (layers / groups))
        if hf_group != config.group_of_layer(layer):
            raise CheckpointError(
                f"{source}: with num_hidden_layers={layers} and num_hidden_groups={groups}, HF "
                f"runs layer {layer} with group {hf_group} and the original with group "
                f"{config.group_of_layer(layer)}, so the model cannot be exchanged with HF; "
                "use the tf1 or keras format."
            )


def check_hf_runs(config: AlbertConfig, source: str) -> None:
    """Raises CheckpointError where HF's model cannot run `config` (checked on export only).

    HF's AlbertTransformer hands each group's inner layers int(L / G) entries of its per-layer
    head mask, so with inner_group_num > int(L / G) (e.g. L = 6, G = 3, inner_group_num = 3)
    every forward pass of HF's model (transformers 4.57) raises IndexError, though it loads.
    """
    layers, groups = config.num_hidden_layers, config.num_hidden_groups
    if config.inner_group_num > layers // groups:
        raise CheckpointError(
            f"{source}: with num_hidden_layers={layers}, num_hidden_groups={groups} and "
            f"inner_group_num={config.inner_group_num}, HF's model loads but cannot run (it "
            f"indexes {layers // groups} head-mask entries per group, not "
            f"{config.inner_group_num}); use the tf1 or keras format."
        )


_POOLER = ("albert.pooler.weight", "albert.pooler.bias")
# HF's fine-tuning heads' names (AlbertForTokenClassification's too, which holds `classifier`).
_TASK_HEADS = set().union(*HF_TABLE.task_heads.values())


def _model_names(stored_names) -> dict:
    """name as in AlbertForPreTraining -> name as stored.

    HF's AlbertModel (no heads) saves its names without the `albert.` prefix.
    """
    stored_names = list(stored_names)
    bare = not any(n.startswith(_BASE_PREFIX) for n in stored_names) and any(
        n.startswith("embeddings.") for n in stored_names
    )
    return {(_BASE_PREFIX + n if bare else n): n for n in stored_names}


def _tolerated(shapes: dict, read, source: str) -> list:
    """Names that carry no information of their own: tied copies and buffers, once checked.

    Raises:
        CheckpointError: a tied copy differs from what it is tied to, or a buffer is unusual.
    """
    tolerated = []
    for name, original in _TIED.items():
        if name in shapes:
            if original in shapes and not np.array_equal(read(name), read(original)):
                raise CheckpointError(
                    f"{source}: {name} differs from {original}; ALBERT ties them, so an untied "
                    "decoder cannot be loaded."
                )
            tolerated.append(name)
    for name, expected in _BUFFERS.items():
        if name in shapes:
            if not np.array_equal(read(name), expected(shapes[name])):
                raise CheckpointError(f"{source}: the buffer {name} holds unexpected values.")
            tolerated.append(name)
    return tolerated


def _identity_mapping(shapes: dict, read, source: str) -> list:
    """With E == H the model has no E->H projection (as the original); HF always has one.

    Returns:
        The mapping's names, to skip: HF's projection must then be the identity (as written
        by `save`), which is the same function.

    Raises:
        CheckpointError: the projection is not the identity (a model trained with one).
    """
    names = [_MAPPING_WEIGHT, _MAPPING_BIAS]
    if not all(name in shapes for name in names):
        return []
    weight, bias = read(_MAPPING_WEIGHT), read(_MAPPING_BIAS)
    if not (np.array_equal(weight, np.eye(*weight.shape)) and not np.any(bias)):
        raise CheckpointError(
            f"{source}: embedding_size == hidden_size but embedding_hidden_mapping_in is not the "
            "identity; the original ALBERT (and this model) has no such projection when E == H."
        )
    return names


def save(model, directory: str, labels=None, problem_type=None) -> str:
    """Writes `model` as an HF directory that its HF class's `from_pretrained` reads.

    Args:
        model: an AlbertPretrainer (written as AlbertForPreTraining), an AlbertBackbone
            (written as AlbertModel), a backbone with its MLM head alone
            (`albert.convert_checkpoint.LoadedParts`, written as AlbertForMaskedLM), or a
            task model with a head HF has a class for (`head_architecture`: an
            AlbertClassifier as AlbertForSequenceClassification, an AlbertMultipleChoice as
            AlbertForMultipleChoice, a SQuAD v1.1 AlbertQuestionAnswering as
            AlbertForQuestionAnswering, which holds no pooler).
        directory: created if needed; receives `config.json` and `model.safetensors`. A
            remote one (gs://) receives them written locally first, then copied up, each
            under a temporary name renamed when complete.
        labels: an AlbertClassifier's label names in class-id order (config.json's
            `id2label`); None or () for HF's LABEL_0, LABEL_1, ...
        problem_type: an AlbertClassifier's HF `problem_type`; None for "regression" with
            one label, else "single_label_classification" (our softmax cross-entropy).

    Returns:
        `directory`.

    Raises:
        CheckpointError: the model's layer sharing cannot be written in HF names, or its
            task head has no HF class (SQuAD v2.0's), or `labels` is not one per class.
    """
    if remote.is_remote(directory):  # safetensors writes local files: `os.makedirs` would
        # make a local folder named `gs:`. The weights go first, as below.
        with remote.written_locally(directory, (WEIGHTS_FILE, CONFIG_FILE)) as local:
            save(model, local, labels, problem_type)
        return directory
    task_architecture = head_architecture(model)
    if task_head(model)[0] is not None and task_architecture is None:
        raise CheckpointError(
            f"This {type(model).__name__}'s SQuAD 2.0 head (the original's XLNet-style start, "
            "end and answer-class layers) has no HF class; save it as tf1 (the original's "
            "names) or keras, or save its .backbone alone."
        )
    bound = bind(HF_TABLE, model, "HF")
    config = model_parts(model)[BACKBONE].config
    task_keys = hf_heads.task_config(model, task_architecture, labels, problem_type)  # may raise
    # Raises, before anything is written, for a sharing HF names or HF's model cannot hold.
    check_group_mapping(exportable_config(config), directory)
    check_hf_runs(exportable_config(config), directory)
    masked_lm_only = bound[MASKED_LM] and not bound[SENTENCE_ORDER] and not task_architecture
    if task_architecture == "AlbertForQuestionAnswering" or (
        masked_lm_only and not getattr(model, "pooler_loaded", True)
    ):
        # HF builds both with add_pooling_layer=False (the span and MLM heads never read the
        # pooler); an AlbertForMaskedLM input held none, so ours has only initial values.
        bound[BACKBONE] = {k: v for k, v in bound[BACKBONE].items() if k not in _POOLER}
    os.makedirs(directory, exist_ok=True)
    # Each file is written under a temporary name and renamed whole (`local_atomic_path`:
    # no TensorFlow). HF's loader checks the file says it holds torch tensors.
    weights = os.path.join(directory, WEIGHTS_FILE)
    arrays = export_arrays(bound)
    if model_parts(model)[BACKBONE].embeddings.embedding_hidden_mapping_in is None:
        # E == H: HF always builds the projection; the identity is the original's function.
        arrays[_MAPPING_WEIGHT] = np.eye(config.hidden_size, dtype="float32")
        arrays[_MAPPING_BIAS] = np.zeros(config.hidden_size, dtype="float32")
    with fileio.local_atomic_path(weights) as temporary:
        save_file(arrays, temporary, metadata={"format": "pt"})
    if task_architecture:
        architecture = task_architecture
    elif bound[SENTENCE_ORDER]:
        architecture = "AlbertForPreTraining"
    else:
        architecture = "AlbertForMaskedLM" if bound[MASKED_LM] else "AlbertModel"
    config_path = os.path.join(directory, CONFIG_FILE)
    with (
        fileio.local_atomic_path(config_path) as temporary,
        open(temporary, "w", encoding="utf-8") as f,
    ):
        json.dump({**config_to_hf(config, architecture), **task_keys}, f, indent=2, sort_keys=True)
        f.write("\n")
    return directory
