"""The same numbers on another Keras backend, and close numbers under mixed bfloat16."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
from test_hf_parity import INPUT_KEYS, OUTPUTS

from albert.checkpoints import load_checkpoint, read_config
from albert.config import AlbertConfig
from albert.modeling import AlbertBackbone, AlbertClassifier, AlbertPretrainer

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "hf_grouped"

# Run in a fresh interpreter, since the backend is chosen once, at `import keras`.
FORWARD_SCRIPT = """
import json, sys
import keras
import numpy as np
from albert.checkpoints import load_checkpoint, read_config
from albert.config import AlbertConfig
from albert.modeling import AlbertBackbone, AlbertClassifier, AlbertPretrainer

fixture, output = sys.argv[1], sys.argv[2]
data = np.load(fixture + "/parity.npz")
model = AlbertPretrainer(read_config(fixture))
load_checkpoint(model, fixture)
inputs = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
outputs = model({k: data[k] for k in inputs})
np.savez(output, **{k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()})
print(json.dumps({"backend": keras.backend.backend(), "tensorflow": "tensorflow" in sys.modules}))
"""


def last_line_of_python(code, *args, **env):
    """Runs `code` with `args` in a fresh Python (the environment plus `env`); returns the last
    line it prints."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    result = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def forward_in_subprocess(backend, output):
    line = last_line_of_python(
        FORWARD_SCRIPT, FIXTURE, output, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3"
    )
    return json.loads(line), np.load(output)


def forward_here():
    data = np.load(FIXTURE / "parity.npz")
    model = AlbertPretrainer(read_config(str(FIXTURE)))
    load_checkpoint(model, str(FIXTURE))
    outputs = model({k: data[k] for k in INPUT_KEYS})
    return {
        k: keras.ops.convert_to_numpy(keras.ops.cast(v, "float32")) for k, v in outputs.items()
    }, data


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None,
    reason="Keras' numpy backend imports jax, which is not installed",
)
def test_numpy_backend_matches_tensorflow_and_hf(tmp_path):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("this process does not run the TensorFlow backend")
    info, numpy_outputs = forward_in_subprocess("numpy", tmp_path / "numpy.npz")
    assert info == {"backend": "numpy", "tensorflow": False}  # no TensorFlow import on the way
    tf_outputs, expected = forward_here()
    for ours, theirs in OUTPUTS.items():
        assert np.abs(numpy_outputs[ours] - expected[theirs]).max() <= 1e-4, ours
        assert np.abs(tf_outputs[ours] - expected[theirs]).max() <= 1e-4, ours
        assert np.abs(numpy_outputs[ours] - tf_outputs[ours]).max() <= 1e-5, ours


def test_mixed_bfloat16_runs_close_to_float32():
    data = np.load(FIXTURE / "parity.npz")
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = AlbertPretrainer(read_config(str(FIXTURE)))
    finally:
        keras.config.set_dtype_policy("float32")
    load_checkpoint(model, str(FIXTURE))
    assert {variable.dtype for variable in model.weights} == {"float32"}
    outputs = model({k: data[k] for k in INPUT_KEYS})
    assert keras.backend.standardize_dtype(outputs["mlm_logits"].dtype) == "float32"
    assert keras.backend.standardize_dtype(outputs["sop_logits"].dtype) == "float32"
    for ours, theirs in OUTPUTS.items():
        actual = keras.ops.convert_to_numpy(keras.ops.cast(outputs[ours], "float32"))
        expected = data[theirs]
        # bfloat16 keeps 8 bits of mantissa: allow 5% of the output's range.
        assert np.abs(actual - expected).max() <= 0.05 * np.abs(expected).max(), ours


LONG_SEQUENCE_SCRIPT = """
import numpy as np
from albert.config import AlbertConfig
from albert.modeling import AlbertBackbone

model = AlbertBackbone(AlbertConfig.from_json_file("albert_tiny"))  # 128 positions
try:
    model({"input_ids": np.ones((1, 129), "int32")})
except ValueError as error:
    print(type(error).__name__, "max_position_embeddings=128" in str(error))
"""


def test_too_long_sequence_is_one_value_error():
    """Longer than the position table: a ValueError naming the limit, not TensorFlow's
    InvalidArgumentError from the embedding sum."""
    model = AlbertBackbone(AlbertConfig.from_json_file("albert_tiny"))
    with pytest.raises(ValueError, match="Sequence length 129 exceeds max_position_embeddings=128"):
        model({"input_ids": np.ones((1, 129), "int32")})
    assert model({"input_ids": np.ones((1, 128), "int32")})["sequence_output"].shape[1] == 128


@pytest.mark.slow
def test_too_long_sequence_is_the_same_value_error_under_jax():
    """JAX's own error is a TypeError about broadcasting; ours is the same as TensorFlow's."""
    pytest.importorskip("jax")
    line = last_line_of_python(LONG_SEQUENCE_SCRIPT, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    assert line == "ValueError True"


def test_float32_logits_use_the_float32_weights_under_mixed_bfloat16():
    """The heads' logits are float32 from float32 weights: 1.0001 is not a bfloat16 value
    (it rounds to 1.0), so a head that read its weights, or the tied word embeddings it is
    passed, in the compute dtype would give 1.0 where float32 gives 1.0001."""
    config = AlbertConfig.from_json_file("albert_tiny")
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        pretrainer, classifier = AlbertPretrainer(config), AlbertClassifier(config, 2)
    finally:
        keras.config.set_dtype_policy("float32")
    hidden = config.hidden_size
    for head in (pretrainer.sentence_order_head, classifier.classifier):
        head.output_weights.assign(np.zeros((2, hidden), "float32"))
        head.output_bias.assign(np.array([1.0001, 0.0], "float32"))
        logits = keras.ops.convert_to_numpy(head(np.ones((1, hidden), "float32")))
        np.testing.assert_array_equal(logits, np.array([[1.0001, 0.0]], "float32"))
    mlm = pretrainer.masked_lm_head
    mlm.layer_norm.gamma.assign(np.zeros(config.embedding_size, "float32"))
    mlm.layer_norm.beta.assign(np.ones(config.embedding_size, "float32"))  # x = ones [E]
    mlm.output_bias.assign(np.full((config.vocab_size,), 1.0001, "float32"))
    embeddings = pretrainer.backbone.word_embeddings
    embeddings.assign(np.full(embeddings.shape, 1.0001 / config.embedding_size, "float32"))
    logits = mlm(np.zeros((1, 1, hidden), "float32"), None, embeddings)  # [1, 1, V]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(logits), 2.0002, rtol=1e-6)
