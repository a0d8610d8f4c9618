"""Parameter counts of our model classes: HF's for the released configs, the paper's ablations.

Counts come from the built Keras models (`count_params()` over their weights). The models are
built inside a `keras.StatelessScope` that does not initialise variables, so even xxlarge
(223M parameters) costs no memory or time: shapes are all a count needs.
"""

import json
import pathlib

import keras
import pytest

from albert import configs
from albert.config import AlbertConfig
from albert.modeling import AlbertBackbone, AlbertPretrainer
from tests.helpers import tiny_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
HF_COUNTS = json.loads((ROOT / "tests" / "fixtures" / "hf_param_counts.json").read_text())["counts"]
RELEASED = sorted(HF_COUNTS)


def build_without_weights(model_class, config):
    """`model_class(config)` with every variable shaped but never initialised."""
    with keras.StatelessScope(initialize_variables=False):
        return model_class(config)


@pytest.fixture(autouse=True)
def forget_uninitialised_variables():
    yield
    # Keras keeps the uninitialised variables to initialise them on a later scope's exit.
    keras.utils.clear_session(free_memory=False)


def test_counts_cover_the_eight_released_configs():
    assert RELEASED == [
        f"albert_{size}_v{v}" for size in ("base", "large", "xlarge", "xxlarge") for v in (1, 2)
    ]


@pytest.mark.parametrize("name", RELEASED)
def test_pretrainer_has_exactly_hf_parameter_count(name):
    config = AlbertConfig.from_json_file(configs.path(name))
    assert build_without_weights(AlbertPretrainer, config).count_params() == HF_COUNTS[name]


def paper_count(embedding_size, layer_sharing):
    """The paper's count for ALBERT-base: embeddings + encoder, no pooler and no heads.

    This is the counting that matches all twelve numbers of Tables 3 and 4 within 1M (with
    the pooler or the heads, E=768 not-shared comes out over 109M against the paper's 108M).
    As the original, the model has no `embedding_hidden_mapping_in` at E = H = 768.
    """
    base = AlbertConfig.from_json_file(configs.path("albert_base_v2"))
    config = base.replace(embedding_size=embedding_size, layer_sharing=layer_sharing)
    backbone = build_without_weights(AlbertBackbone, config)
    return backbone.embeddings.count_params() + backbone.encoder.count_params()


# (E, layer_sharing) -> parameters in millions, from the paper's Tables 3 and 4.
PAPER_ABLATIONS = {
    (64, "not_shared"): 87,
    (128, "not_shared"): 89,
    (256, "not_shared"): 93,
    (768, "not_shared"): 108,
    (64, "all_shared"): 10,
    (128, "all_shared"): 12,
    (256, "all_shared"): 16,
    (768, "all_shared"): 31,
    (768, "shared_attention"): 83,
    (768, "shared_ffn"): 57,
    (128, "shared_attention"): 64,
    (128, "shared_ffn"): 38,
}


@pytest.mark.parametrize("embedding_size, layer_sharing", sorted(PAPER_ABLATIONS))
def test_paper_ablation_counts_within_one_million(embedding_size, layer_sharing):
    count = paper_count(embedding_size, layer_sharing)
    assert abs(count - PAPER_ABLATIONS[embedding_size, layer_sharing] * 1e6) <= 1e6, count


def _tiny(**changes):
    """The tiny config with one group of one block (any depth divides), 12 layers, 2 types."""
    overrides = dict(
        num_hidden_layers=12, num_hidden_groups=1, inner_group_num=1, type_vocab_size=2
    )
    return tiny_config(**{**overrides, **changes})


def test_all_shared_count_does_not_depend_on_depth():
    counts = {
        layers: build_without_weights(
            AlbertPretrainer, _tiny(num_hidden_layers=layers)
        ).count_params()
        for layers in (1, 3, 12)
    }
    assert len(set(counts.values())) == 1, counts


def test_not_shared_count_grows_by_one_block_per_layer():
    one, twelve = (
        build_without_weights(
            AlbertPretrainer, _tiny(num_hidden_layers=layers, layer_sharing="not_shared")
        ).count_params()
        for layers in (1, 12)
    )
    hidden, intermediate = 18, 37
    attention = 4 * (hidden * hidden + hidden) + 2 * hidden  # Q, K, V, output; LayerNorm
    ffn = 2 * hidden * intermediate + intermediate + hidden + 2 * hidden
    block = attention + ffn
    assert twelve - one == 11 * block


@pytest.mark.parametrize("embedding_size", [10, 18])
def test_embedding_projection_only_when_embedding_size_differs(embedding_size):
    """The original creates `embedding_hidden_mapping_in` [E, H] + [H] only when E != H."""
    config = _tiny().replace(embedding_size=embedding_size)  # H = 18
    embeddings = build_without_weights(AlbertBackbone, config).embeddings
    E, H = embedding_size, 18
    tables = (99 + 16 + config.type_vocab_size) * E + 2 * E  # word, position, type; LayerNorm
    projection = E * H + H if E != H else 0
    assert embeddings.count_params() == tables + projection
    assert (embeddings.embedding_hidden_mapping_in is None) == (E == H)
