"""The embedding tables are read in float32 under mixed precision (their gradients accumulate
in float32, as keras.layers.Embedding's), and token types are a select per type, the
original's one-hot product: the same values as a gather, without its scatter-add gradient."""

import ast
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import tiny_config

from albert.modeling.embeddings import AlbertEmbeddings

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def policy():
    yield keras.mixed_precision.set_dtype_policy
    keras.mixed_precision.set_dtype_policy("float32")


def table_gradients(policy_name, ids, segments, upstream):
    """The gradients of sum(out * upstream) for the three tables, float32 numpy."""
    keras.mixed_precision.set_dtype_policy(policy_name)
    keras.utils.set_random_seed(0)
    layer = AlbertEmbeddings(tiny_config(embedding_size=18))  # E == H: no projection
    layer.build()
    tables = [layer.word_embeddings, layer.token_type_embeddings, layer.position_embeddings]
    with tf.GradientTape() as tape:
        out = layer(ids, segments)
    grads = tape.gradient(out, [t.value for t in tables], output_gradients=upstream)
    return out, [tf.convert_to_tensor(g).numpy() for g in grads]


def test_frequent_tokens_keep_their_small_updates_in_bfloat16(policy):
    rng = np.random.default_rng(0)
    ids = np.zeros((4, 16), "int32")  # one token everywhere: every update lands on one row
    ids[:, 0] = 2
    segments = (np.arange(16) >= 8).astype("int32")[None].repeat(4, 0)
    # bfloat16-representable upstream gradients, so both policies start from the same values.
    upstream = tf.cast(tf.cast(rng.normal(0, 1e-3, (4, 16, 18)), tf.bfloat16), tf.float32)
    out16, grads16 = table_gradients("mixed_bfloat16", ids, segments, upstream)
    assert out16.dtype == "bfloat16"
    _, grads32 = table_gradients("float32", ids, segments, upstream)
    for name, g16, g32 in zip(("word", "type", "position"), grads16, grads32, strict=True):
        assert np.max(np.abs(g16 - g32)) <= 1e-6 * max(1.0, np.max(np.abs(g32))), name


def test_token_types_are_the_gathered_rows(policy):
    layer = AlbertEmbeddings(tiny_config())  # type_vocab_size 3
    layer.build()
    segments = np.array([[0, 1, 2, 2, 1, 0]], "int32")
    gathered = np.take(layer.token_type_embeddings.numpy(), segments, axis=0)
    selected = keras.ops.convert_to_numpy(layer._token_types(segments))
    assert np.array_equal(selected, gathered)
    # As the original's one-hot product: an id outside the table reads zeros.
    outside = keras.ops.convert_to_numpy(layer._token_types(np.array([[3]], "int32")))
    assert np.array_equal(outside, np.zeros((1, 1, 10), "float32"))


@pytest.mark.slow  # a JAX process (~10 s)
def test_the_jax_step_scatters_only_into_float32_word_embeddings():
    """Under mixed_bfloat16, the compiled JAX pretraining step's only scatter into a table is
    the word embeddings', in float32; none lands on the token-type table (one was 69 of 99 ms
    of an ALBERT-base step on an H100)."""
    pytest.importorskip("jax")
    code = """
import re, sys
sys.path.insert(0, "benchmarks")
import keras
keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
import gpu_loss_check as g, jax_pretraining as jp
config = g.tiny_config()
model, optimizer = g._model_and_optimizer(config, 10)
step = jp.make_train_step(model, optimizer)
text = step.lower(jp.initial_state(model, optimizer), g.batches(config, 1)[0]).as_text()
print(sorted(set(re.findall(r"stablehlo.scatter.*?-> tensor<([^>]*)>", text, re.S))))
"""
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    # The word table [1000, 32] in float32; the masked positions' gather [16, 32, 64] (the
    # encoder's activations, bfloat16) is the only other scatter.
    assert results == ["1000x32xf32", "16x32x64xbf16"]
