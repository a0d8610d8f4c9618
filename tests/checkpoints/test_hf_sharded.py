"""HF directories saved in shards (`save_pretrained(max_shard_size=...)`: an index
`model.safetensors.index.json` and `model-0000i-of-0000n.safetensors`) load as the single
`model.safetensors` does, locally and from remote folders (ram:// for gs://); an index that does
not fit its shards is one clear error, and so is a directory of torch's pickled weights alone.
The shards are cut here from the committed fixtures, as transformers cuts them (no torch
needed); test_hf_pretraining_live.py loads one that transformers itself wrote."""

import json
import os
import re
import shutil

import numpy as np
import pytest
from checkpoint_testing import HF_FIXTURE, copy_up, randomize
from safetensors.numpy import load_file, save_file

from albert.checkpoints import (
    CheckpointError,
    detect_format,
    hf_weights,
    load_checkpoint,
    read_config,
)
from albert.checkpoints.stored_model import stored_task_head
from albert.checkpoints.table import CLASSIFIER
from albert.modeling import AlbertClassifier, AlbertPretrainer
from tests.helpers import tiny_config

FIXTURES = os.path.dirname(HF_FIXTURE)


def shard(source, directory, shards=3):
    """Copies the HF directory `source` into `directory` with its weights in `shards` files and
    an index, as transformers writes them (no model.safetensors). Returns the index's map."""
    os.makedirs(directory)
    shutil.copy(os.path.join(source, "config.json"), directory)
    tensors = load_file(os.path.join(source, "model.safetensors"))
    names = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        file_name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: tensors[name] for name in names[i::shards]}
        save_file(part, os.path.join(directory, file_name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file_name))
    write_index(directory, weight_map)
    return weight_map


def write_index(directory, weight_map):
    with open(os.path.join(directory, hf_weights.INDEX_FILE), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)


def loaded_weights(path):
    model = AlbertPretrainer(read_config(path))
    randomize(model, seed=7)  # every weight the load leaves alone keeps a value that differs
    load_checkpoint(model, path)
    return [v.numpy() for v in model.weights]


def test_a_sharded_directory_loads_every_weight_as_the_single_file(tmp_path):
    sharded = str(tmp_path / "sharded")
    shard(HF_FIXTURE, sharded)
    assert detect_format(sharded) == "hf"
    assert hf_weights.files(sharded)[0] == hf_weights.INDEX_FILE
    for ours, single in zip(loaded_weights(sharded), loaded_weights(HF_FIXTURE), strict=True):
        np.testing.assert_array_equal(ours, single)


def test_a_remote_sharded_directory_loads_as_the_local_one(tmp_path):
    sharded = str(tmp_path / "sharded")
    shard(HF_FIXTURE, sharded)
    remote = copy_up(sharded, f"ram://{tmp_path.name}-sharded/hf")
    assert detect_format(remote) == "hf"
    for ours, local in zip(loaded_weights(remote), loaded_weights(sharded), strict=True):
        np.testing.assert_array_equal(ours, local)


def test_a_sharded_classifier_keeps_its_head(tmp_path):
    source = os.path.join(FIXTURES, "hf_sequence_classification")
    sharded = str(tmp_path / "sharded")
    shard(source, sharded)
    head = stored_task_head(sharded, "hf")
    assert head == stored_task_head(source, "hf") and head[0] == CLASSIFIER
    ours = AlbertClassifier(read_config(sharded), num_labels=head[1])
    single = AlbertClassifier(read_config(source), num_labels=head[1])
    load_checkpoint(ours, sharded)
    load_checkpoint(single, source)
    for a, b in zip(ours.weights, single.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_the_single_file_wins_where_both_are_there(tmp_path):
    """As transformers' loader: model.safetensors first, the index only without it."""
    directory = str(tmp_path / "both")
    weight_map = shard(HF_FIXTURE, directory)
    shutil.copy(os.path.join(HF_FIXTURE, "model.safetensors"), directory)
    write_index(directory, dict.fromkeys(weight_map, "model-00009-of-00009.safetensors"))
    assert hf_weights.files(directory) == ("model.safetensors",)
    loaded_weights(directory)  # the index, naming a shard that is not there, is not read


def _missing_shard(directory, weight_map):
    os.remove(os.path.join(directory, weight_map[min(weight_map)]))


def _misplaced_tensor(directory, weight_map):
    name = min(weight_map)
    other = next(s for s in sorted(set(weight_map.values())) if s != weight_map[name])
    write_index(directory, {**weight_map, name: other})


def _a_path_for_a_shard(directory, weight_map):
    write_index(directory, {**weight_map, min(weight_map): "../model.safetensors"})


def _not_json(directory, weight_map):
    with open(os.path.join(directory, hf_weights.INDEX_FILE), "w") as f:
        f.write("{weight_map:")


def _no_weight_map(directory, weight_map):
    with open(os.path.join(directory, hf_weights.INDEX_FILE), "w") as f:
        json.dump({"metadata": {}}, f)


@pytest.mark.parametrize(
    "damage, message",
    [
        (_missing_shard, "names the shard model-0000[1-3]-of-00003.safetensors, which is not in"),
        (_misplaced_tensor, "places albert.embeddings.LayerNorm.bias in model-0000"),
        (_a_path_for_a_shard, "names the shard '../model.safetensors': not a file name"),
        (_not_json, "is not a JSON object; is it a safetensors index"),
        (_no_weight_map, "has no weight_map of tensor names to shard files"),
    ],
)
def test_an_index_that_does_not_fit_its_shards_is_one_clear_error(tmp_path, damage, message):
    directory = str(tmp_path / "sharded")
    damage(directory, shard(HF_FIXTURE, directory))
    model = AlbertPretrainer(read_config(directory))
    before = [v.numpy() for v in model.weights]
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(model, directory)
    for a, b in zip(model.weights, before, strict=True):  # nothing was assigned
        np.testing.assert_array_equal(a.numpy(), b)


@pytest.mark.parametrize("torch_file", ["pytorch_model.bin", "pytorch_model.bin.index.json"])
@pytest.mark.parametrize("where", ["local", "remote"])
def test_torch_pickled_weights_alone_name_the_conversion(tmp_path, torch_file, where):
    """An older HF directory (torch's pickle, one file or sharded, no safetensors) is one
    error naming its file and transformers' one-line conversion, not 'no checkpoint found'."""
    directory = tmp_path / "old"
    directory.mkdir()
    shutil.copy(os.path.join(HF_FIXTURE, "config.json"), directory)
    (directory / torch_file).write_bytes(b"PK\x03\x04")  # read by nothing here
    path = str(directory)
    if where == "remote":
        path = copy_up(path, f"ram://{tmp_path.name}-{where}/old")
    with pytest.raises(CheckpointError, match=f"only as {re.escape(torch_file)} .*save_pretrained"):
        detect_format(path)
    with pytest.raises(CheckpointError, match=f"only as {re.escape(torch_file)}"):
        load_checkpoint(AlbertPretrainer(tiny_config()), path)
