"""AdamWeightDecay and Lamb on plain tf.Variables (no Keras `path`): names match by `name`.

The original's optimizer matches its exclusion regexes against `variable.name`; Keras's own
optimizers accept a plain tf.Variable. Ours did not (`'ResourceVariable' object has no
attribute 'path'`).
"""

import numpy as np
import pytest
import tensorflow as tf

from albert.training.optimization import AdamWeightDecay, Lamb
from tests.helpers import original_optimizer_update


def _expected(w, g, lr, decay, adapt):
    """One step of the original's update from zero slots."""
    return original_optimizer_update(w, g, 0.0, 0.0, lr, decay, adapt)[0]


@pytest.mark.parametrize("optimizer_class, adapt", [(AdamWeightDecay, False), (Lamb, True)])
def test_plain_variables_step_as_the_original(optimizer_class, adapt):
    rng = np.random.default_rng(3)
    values = {
        "dense/kernel": rng.normal(size=(3, 5)).astype("float32"),
        "dense/bias": rng.normal(size=(5,)).astype("float32"),
        "LayerNorm/gamma": rng.normal(size=(5,)).astype("float32"),
    }
    variables = [tf.Variable(value, name=name) for name, value in values.items()]
    grads = [rng.normal(size=value.shape).astype("float32") for value in values.values()]
    optimizer = optimizer_class(learning_rate=0.1, weight_decay_rate=0.01)
    optimizer.apply(grads, variables)
    for (name, w), g, variable in zip(values.items(), grads, variables, strict=True):
        excluded = name != "dense/kernel"
        expected = _expected(w, g, 0.1, decay=not excluded, adapt=adapt and not excluded)
        np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-6)
    # The decayed kernel must differ from an undecayed step, or the test could not fail.
    undecayed = _expected(values["dense/kernel"], grads[0], 0.1, decay=False, adapt=False)
    assert np.max(np.abs(variables[0].numpy() - undecayed)) > 1e-4
