"""Which parameter set each layer runs under every `layer_sharing` mode (the paper's Table 4).

A shared model must compute exactly what an unshared model computes when every layer of the
unshared one holds a copy of the set the shared model gives that layer: attention shared
(one set for all layers) with a set of FFN weights per layer, or the reverse.
"""

import numpy as np
import pytest

from albert.modeling import AlbertBackbone
from tests.helpers import tiny_config

NUM_LAYERS = 3
# layer_sharing -> (attention owner, FFN owner) of each layer, with one group.
OWNERS = {
    "all_shared": ([0, 0, 0], [0, 0, 0]),
    "shared_attention": ([0, 0, 0], [0, 1, 2]),
    "shared_ffn": ([0, 1, 2], [0, 0, 0]),
}


def _copy(source, target):
    for s, t in zip(source.weights, target.weights, strict=True):
        t.assign(s)


@pytest.mark.parametrize("layer_sharing", sorted(OWNERS))
def test_shared_model_equals_unshared_model_holding_copies_of_its_sets(layer_sharing):
    config = tiny_config(
        num_hidden_layers=NUM_LAYERS, num_hidden_groups=1, inner_group_num=2, type_vocab_size=2
    )
    shared = AlbertBackbone(config.replace(layer_sharing=layer_sharing))
    unshared = AlbertBackbone(config.replace(layer_sharing="not_shared"))
    _copy(shared.embeddings, unshared.embeddings)
    _copy(shared.pooler, unshared.pooler)
    attention_owner, ffn_owner = OWNERS[layer_sharing]
    for layer in range(NUM_LAYERS):
        for inner in range(config.inner_group_num):
            _copy(
                shared.encoder.attention_blocks[attention_owner[layer]][inner],
                unshared.encoder.attention_blocks[layer][inner],
            )
            _copy(
                shared.encoder.ffn_blocks[ffn_owner[layer]][inner],
                unshared.encoder.ffn_blocks[layer][inner],
            )
    rng = np.random.default_rng(0)
    inputs = {
        "input_ids": rng.integers(0, config.vocab_size, [3, 7]).astype("int32"),
        "input_mask": np.array([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4], "int32"),
        "segment_ids": np.array([[0] * 4 + [1] * 3] * 3, "int32"),
    }
    expected = unshared(inputs)["sequence_output"]
    got = shared(inputs)["sequence_output"]
    assert np.max(np.abs(np.asarray(got) - np.asarray(expected))) < 1e-5
    # The copies matter: a model with its own random sets computes something else.
    other = AlbertBackbone(config.replace(layer_sharing=layer_sharing))
    _copy(shared.embeddings, other.embeddings)
    assert np.max(np.abs(np.asarray(other(inputs)["sequence_output"]) - np.asarray(got))) > 1e-3
