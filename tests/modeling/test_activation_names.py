"""The config's `hidden_act` names and the functions they give: the original's and HF's
spellings of the same function give the same one."""

import keras
import numpy as np
import pytest

from albert.modeling.activations import activation, gelu_tanh

X = np.linspace(-4.0, 4.0, 33).astype("float32")


@pytest.mark.parametrize("name", ["gelu", "gelu_new"])  # gelu_new: HF's name for the original's
def test_gelu_names_give_the_tanh_approximation(name):
    assert activation(name) is gelu_tanh


def test_swish_is_silu():
    expected = X / (1.0 + np.exp(-X))
    np.testing.assert_allclose(np.asarray(activation("swish")(X)), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(activation("silu")(X)), expected, rtol=1e-5, atol=1e-6)


def test_gelu_exact_is_the_erf_form():
    exact = np.asarray(keras.activations.gelu(X, approximate=False))
    np.testing.assert_allclose(np.asarray(activation("gelu_exact")(X)), exact, rtol=1e-6)
    assert np.max(np.abs(np.asarray(gelu_tanh(X)) - exact)) > 1e-5  # not the same function
