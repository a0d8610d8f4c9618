"""The embedding tables are read in float32 under mixed precision (their gradients accumulate
in float32, as keras.layers.Embedding's), and token types are a select per type, the
original's one-hot product: the same values as a gather, without its scatter-add gradient."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import tiny_config

from albert.modeling.embeddings import AlbertEmbeddings


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
