"""Dropout is active in training only: at inference a model with dropout rates computes what
the same weights compute with rates of 0, in every block that has a dropout. Also the
Dropout layer's arguments, and what the backbone computes when inputs leave out the mask
or the segments."""

import numpy as np
import pytest
from helpers import tiny_config

from albert.modeling.backbone import AlbertBackbone


def _inputs():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 99, (2, 9)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    return {"input_ids": ids, "input_mask": mask, "segment_ids": (np.arange(9) > 4)[None] * mask}


def _pair(**rates):
    dropping = AlbertBackbone(tiny_config(**rates))
    plain = AlbertBackbone(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    plain.set_weights(dropping.get_weights())
    return dropping, plain


@pytest.mark.parametrize(
    "rates",
    [
        {"hidden_dropout_prob": 0.5, "attention_probs_dropout_prob": 0.0},
        {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.5},
    ],
)
def test_inference_drops_nothing_and_training_drops(rates):
    dropping, plain = _pair(**rates)
    inputs = _inputs()
    expected = plain(inputs, training=False)["sequence_output"].numpy()
    served = dropping(inputs, training=False)["sequence_output"].numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)
    trained = dropping(inputs, training=True)["sequence_output"].numpy()
    assert np.max(np.abs(trained - expected)) > 1e-2


@pytest.mark.parametrize("rate", [1.0, -0.1])
def test_a_rate_outside_zero_to_one_is_refused(rate):
    # A rate of 1 would drop every unit (and scale by 1 / 0): the config is wrong.
    from albert.modeling.dropout import Dropout

    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        Dropout(rate)
    assert Dropout(0.0).seed_generator is None and Dropout(0.99).rate == 0.99


def test_a_dropout_layer_keeps_its_rate_and_seed_through_its_config():
    from albert.modeling.dropout import Dropout

    layer = Dropout(0.25, seed=1234)
    restored = Dropout.from_config(layer.get_config())
    assert (restored.rate, restored.seed) == (0.25, 1234)


def test_inputs_without_a_mask_or_segments_are_all_real_tokens_of_segment_0():
    # A default of zeros would mask every key: softmax is shift-invariant, so only the
    # float32 rounding of scores near -10000 tells, and it does.
    model = AlbertBackbone(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    ids = _inputs()["input_ids"]
    explicit = model({"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": 0 * ids})
    default = model({"input_ids": ids})
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(
            default[name].numpy(), explicit[name].numpy(), rtol=0, atol=1e-6, err_msg=name
        )
