"""What every checkpoint format shares: name tables bound to model attributes, and the checks.

A foreign format is described by a `NameTable`: for each of its variable names, the model
attribute that holds the value (a dotted path below the backbone, a block or a head) and
whether the stored array is the transpose of ours. `bind` walks the model's attributes
(`backbone.encoder.attention_blocks[owner][inner].query.kernel`, ...) and returns the table as
foreign name -> variable. `plan_load` checks a checkpoint against it (every name matched,
every shape right) before `assign` writes a single value, so a bad checkpoint never half-loads
and never leaves weights silently random.

This module imports no TensorFlow, so the HF format works under any Keras backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from albert.config import AlbertConfig
from albert.errors import AlbertError
from albert.modeling import (
    AlbertBackbone,
    AlbertClassifier,
    AlbertMaskedLMHead,
    AlbertQuestionAnswering,
    AlbertSentenceOrderHead,
)
from albert.progress import Progress

# Parts of a model a checkpoint may or may not hold. The backbone is always required; each
# head (pretraining or fine-tuning) is loaded when the checkpoint has it and left initialised
# otherwise.
BACKBONE, MASKED_LM, SENTENCE_ORDER = "backbone", "masked_lm", "sentence_order"
TASK_HEAD = "task_head"
HEAD_PARTS = (MASKED_LM, SENTENCE_ORDER, TASK_HEAD)
# The E->H projection, absent when E == H (as in the original).
MAPPING_PATH = "embeddings.embedding_hidden_mapping_in."
# Kinds of fine-tuning head (`task_head`), each with its own names in a format's table.
CLASSIFIER, SQUAD_V1, SQUAD_V2 = "classifier", "squad_v1", "squad_v2"

# Config keys that change the function a checkpoint computes; the others (dropout,
# initializer_range) may differ between a checkpoint and the model that loads it.
ARCHITECTURE_KEYS = (
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_hidden_groups",
    "num_attention_heads",
    "intermediate_size",
    "inner_group_num",
    "hidden_act",
    "max_position_embeddings",
    "type_vocab_size",
)

# The listing in an error message stops after this many names.
_MAX_LISTED = 12


class CheckpointError(AlbertError):
    """A checkpoint that does not exist, cannot be read, or does not fit the model or the run.

    The one checkpoint error of the project: foreign formats, the training loop's own
    checkpoints (`training_format`) and its resume (`albert.training.checkpointing`).
    """


@dataclasses.dataclass(frozen=True)
class NameTable:
    """One foreign format's variable names, each with a model attribute, and a transpose rule.

    Every dict maps a foreign name (or name suffix) to an attribute path: dotted attribute
    access below the object named in the field's description.

    Attributes:
        backbone: full names -> path below `AlbertBackbone` (embeddings, mapping, pooler).
        block_prefix: prefix of a block's names, with `{group}` and `{inner}` placeholders.
        attention: name suffixes -> path below `AlbertAttention`.
        ffn: name suffixes -> path below `AlbertFeedForward`.
        masked_lm: full names -> path below `AlbertMaskedLMHead`.
        sentence_order: full names -> path below `AlbertSentenceOrderHead`.
        transposed: (foreign name, attribute path) -> whether the stored array is the
            transpose of the Keras variable.
        task_heads: fine-tuning head kind (`CLASSIFIER`, `SQUAD_V1`, `SQUAD_V2`) -> full names
            -> path below the model's head layer (see `task_head`); empty when the format
            has no names for fine-tuned heads.
    """

    backbone: dict
    block_prefix: str
    attention: dict
    ffn: dict
    masked_lm: dict
    sentence_order: dict
    transposed: Callable[[str, str], bool]
    task_heads: dict = dataclasses.field(default_factory=dict)

    def head_names(self) -> set:
        names = set(self.masked_lm) | set(self.sentence_order)
        return names.union(*self.task_heads.values())


@dataclasses.dataclass(frozen=True)
class Binding:
    """A model variable and whether the foreign array is its transpose."""

    variable: object
    transposed: bool

    @property
    def foreign_shape(self) -> tuple:
        shape = tuple(self.variable.shape)
        return shape[::-1] if self.transposed else shape


@dataclasses.dataclass
class LoadResult:
    """What `load_checkpoint` did.

    Attributes:
        path: the checkpoint that was read (a TF1 prefix, a directory or a file).
        format: "tf1", "hf", "keras", or "training" (a `model.ckpt-N` of our training loop).
        loaded: checkpoint names whose values were assigned to the model.
        initialised: model variable paths left as initialised (heads the checkpoint lacks).
        ignored: checkpoint names skipped on purpose (optimizer slots, `global_step`, heads
            that a backbone has no place for, HF's tied decoder copies and buffers).
    """

    path: str
    format: str
    loaded: list = dataclasses.field(default_factory=list)
    initialised: list = dataclasses.field(default_factory=list)
    ignored: list = dataclasses.field(default_factory=list)


def model_parts(model) -> dict:
    """The backbone and pretraining heads of `model`: part name -> layer or None.

    Raises:
        CheckpointError: `model` is neither an ALBERT backbone nor holds one as `.backbone`.
    """
    if isinstance(model, AlbertBackbone):
        return {BACKBONE: model, MASKED_LM: None, SENTENCE_ORDER: None}
    backbone = getattr(model, "backbone", None)
    if not isinstance(backbone, AlbertBackbone):
        raise CheckpointError(
            "ALBERT checkpoints load into an AlbertBackbone, an AlbertPretrainer or a model with "
            f"an AlbertBackbone as `.backbone`. Received: {type(model).__name__}"
        )
    masked_lm = getattr(model, "masked_lm_head", None)
    sentence_order = getattr(model, "sentence_order_head", None)
    return {
        BACKBONE: backbone,
        MASKED_LM: masked_lm if isinstance(masked_lm, AlbertMaskedLMHead) else None,
        SENTENCE_ORDER: (
            sentence_order if isinstance(sentence_order, AlbertSentenceOrderHead) else None
        ),
    }


def task_head(model) -> tuple:
    """(kind, head layer) of a fine-tuning model, or (None, None).

    `AlbertClassifier` and `AlbertMultipleChoice` (one output per choice) hold a classifier
    head, `AlbertQuestionAnswering` a SQuAD v1.1 or v2.0 head.
    """
    if isinstance(model, AlbertClassifier):
        return CLASSIFIER, model.classifier
    if isinstance(model, AlbertQuestionAnswering):
        return (SQUAD_V2 if model.version_2_with_negative else SQUAD_V1), model.qa_head
    return None, None


def bind(table: NameTable, model, format_name: str) -> dict:
    """Resolves `table` against `model`'s attributes.

    Returns:
        part -> {foreign name -> Binding}; a head part is empty when the model lacks it.

    Raises:
        CheckpointError: the model shares attention and FFN differently (`shared_attention`,
            `shared_ffn`), which TF1 and HF names cannot express.
    """
    parts = model_parts(model)
    backbone = parts[BACKBONE]
    config = backbone.config
    if config.layer_sharing not in ("all_shared", "not_shared"):
        raise CheckpointError(
            f"layer_sharing={config.layer_sharing!r} cannot be written in {format_name} names, "
            "which share a whole (attention + FFN) group; use the keras format instead."
        )
    bound = {part: {} for part in (BACKBONE, *HEAD_PARTS)}
    for name, path in table.backbone.items():
        if (
            path.startswith(MAPPING_PATH)
            and backbone.embeddings.embedding_hidden_mapping_in is None
        ):
            continue  # E == H: no projection, as the original
        bound[BACKBONE][name] = _binding(table, name, backbone, path)
    encoder = backbone.encoder
    for suffixes, blocks in (
        (table.attention, encoder.attention_blocks),
        (table.ffn, encoder.ffn_blocks),
    ):
        # With all_shared the owner is the group; with not_shared it is the layer, written
        # as one group per layer (num_hidden_groups == num_hidden_layers).
        for owner, inner_blocks in enumerate(blocks):
            for inner, block in enumerate(inner_blocks):
                prefix = table.block_prefix.format(group=owner, inner=inner)
                for suffix, path in suffixes.items():
                    bound[BACKBONE][prefix + suffix] = _binding(table, prefix + suffix, block, path)
    for part, names in ((MASKED_LM, table.masked_lm), (SENTENCE_ORDER, table.sentence_order)):
        if parts[part] is not None:
            for name, path in names.items():
                bound[part][name] = _binding(table, name, parts[part], path)
    kind, head = task_head(model)
    for name, path in table.task_heads.get(kind, {}).items():
        bound[TASK_HEAD][name] = _binding(table, name, head, path)
    return bound


def _binding(table: NameTable, name: str, owner, dotted_path: str) -> Binding:
    variable = owner
    for attribute in dotted_path.split("."):
        variable = getattr(variable, attribute)
    return Binding(variable, table.transposed(name, dotted_path))


def plan_load(bound: dict, shapes: dict, head_names: set, source: str) -> tuple:
    """Decides which checkpoint names load where, or raises listing every problem.

    Args:
        bound: the output of `bind`.
        shapes: checkpoint name -> shape, already without names the format skips.
        head_names: every head name of the format, to ignore when the model has no heads.
        source: the checkpoint path, for messages.

    Returns:
        (assignments, ignored): {checkpoint name -> Binding} to load (a head the checkpoint
        lacks entirely is left out), and the head names ignored because the model has no
        place for them.

    Raises:
        CheckpointError: a required name is missing, a name is unexpected, or a shape differs.
    """
    assignments, missing = {}, []
    for part, names in bound.items():
        present = [name for name in names if name in shapes]
        if part in HEAD_PARTS and not present:
            continue
        missing += [name for name in names if name not in shapes]
        assignments.update({name: names[name] for name in present})
    known = set().union(*bound.values())
    ignored = sorted(n for n in shapes if n not in known and n in head_names)
    unexpected = sorted(n for n in shapes if n not in known and n not in head_names)
    wrong_shapes = [
        f"{name} {tuple(shapes[name])} (model needs {binding.foreign_shape})"
        for name, binding in sorted(assignments.items())
        if tuple(shapes[name]) != binding.foreign_shape
    ]
    problems = []
    if missing:
        problems.append(f"missing {_listing(sorted(missing))}")
    if unexpected:
        problems.append(f"unexpected {_listing(unexpected)}")
    if wrong_shapes:
        problems.append(f"wrong shape {_listing(wrong_shapes)}")
    if problems:
        raise CheckpointError(
            f"Checkpoint {source} does not fit the model ({'; '.join(problems)}); check that "
            "the config matches the checkpoint."
        )
    return assignments, ignored


def _listing(items: list) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    more = f" and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
    return f"{len(items)}: {shown}{more}"


def assign(assignments: dict, read) -> None:
    """Writes `read(name)` (transposed where the table says) into each bound variable.

    Every value is read before any is assigned, so a file that fails half-way (truncated,
    corrupted) leaves the model as it was.

    Raises:
        CheckpointError: a value cannot be read.
    """
    values = {}
    # Counted in parameters, not tensors: xxlarge's two FFN kernels are half its 0.9 GB, which
    # takes minutes from a slow disk or a bucket.
    sizes = {name: int(np.prod(b.variable.shape)) for name, b in assignments.items()}
    progress = Progress("Checkpoint: read", sum(sizes.values()), "parameters")
    for name in assignments:
        try:
            values[name] = np.asarray(read(name))
        except Exception as e:  # the readers' own errors: IndexError, OpError, OSError, ...
            raise CheckpointError(
                f"Cannot read {name!r} from the checkpoint: the file is corrupted or "
                f"truncated ({type(e).__name__}: {e})."
            ) from None
        progress.update(sizes[name])
    for name, binding in assignments.items():
        value = values[name].T if binding.transposed else values[name]
        binding.variable.assign(value.astype(binding.variable.dtype))


def export_arrays(bound: dict) -> dict:
    """Foreign name -> numpy array of every bound variable, in the foreign orientation."""
    arrays = {}
    for names in bound.values():
        for name, binding in names.items():
            value = np.asarray(binding.variable.numpy())
            arrays[name] = np.ascontiguousarray(value.T if binding.transposed else value)
    return arrays


def initialised_paths(model, covered) -> list:
    """Paths of the model's variables that are not among the `covered` variables."""
    loaded = {id(variable) for variable in covered}
    return [v.path for v in model.weights if id(v) not in loaded]


def check_config(model_config: AlbertConfig, checkpoint_config: AlbertConfig, source: str):
    """Raises CheckpointError naming each architecture key on which the configs differ."""
    ours, theirs = _architecture(model_config), _architecture(checkpoint_config)
    differences = [
        f"{k}={ours[k]!r} vs {theirs[k]!r}" for k in ARCHITECTURE_KEYS if ours[k] != theirs[k]
    ]
    if ours["layer_sharing"] != theirs["layer_sharing"]:
        differences.append(
            f"layer_sharing={ours['layer_sharing']!r} vs {theirs['layer_sharing']!r}"
        )
    if differences:
        raise CheckpointError(
            f"The model's config differs from the checkpoint's {source} "
            f"(model vs checkpoint: {', '.join(differences)}); build the model from that config."
        )


def _architecture(config: AlbertConfig) -> dict:
    values = {key: getattr(config, key) for key in ARCHITECTURE_KEYS}
    values["layer_sharing"] = config.layer_sharing
    # Two names for one function each: "gelu" is the tanh approximation, which HF names
    # "gelu_new"; "swish" is "silu".
    values["hidden_act"] = {"gelu_new": "gelu", "swish": "silu"}.get(
        values["hidden_act"], values["hidden_act"]
    )
    # One group per layer is the same model as no sharing at all.
    if config.layer_sharing == "not_shared" or _one_group_per_layer(config):
        values["num_hidden_groups"] = config.num_hidden_layers
        if config.layer_sharing == "all_shared":
            values["layer_sharing"] = "not_shared"
    return values


def exportable_config(config: AlbertConfig) -> AlbertConfig:
    """The config to write beside a TF1/HF checkpoint: not_shared becomes G = L groups.

    Raises:
        CheckpointError: not_shared with an L for which G = L is not one group per layer.
    """
    if config.layer_sharing == "not_shared":
        grouped = config.replace(
            layer_sharing="all_shared", num_hidden_groups=config.num_hidden_layers
        )
        if not _one_group_per_layer(grouped):
            raise CheckpointError(
                f"layer_sharing='not_shared' with num_hidden_layers={config.num_hidden_layers} "
                "cannot be written as one group per layer: the original's layer l uses group "
                f"int(l / L * G), which for G = L = {config.num_hidden_layers} gives two layers "
                "one group (floating point); use the keras format instead."
            )
        return grouped
    return config


def _one_group_per_layer(config: AlbertConfig) -> bool:
    """Whether layer l uses group l (not so for G = L = 22, 23, 26, ...: 15 / 22 * 22 < 15)."""
    return config.num_hidden_groups == config.num_hidden_layers and all(
        config.group_of_layer(layer) == layer for layer in range(config.num_hidden_layers)
    )
