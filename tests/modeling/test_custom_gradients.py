"""The hand-written derivatives of the encoder's hot ops against automatic differentiation of
the textbook forms, and the cast-once weights against casting at every use (max abs diff)."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import tiny_config

from albert.modeling import encoder as encoder_module
from albert.modeling.activations import gelu_tanh
from albert.modeling.encoder import AlbertAttention, AlbertEncoder
from albert.modeling.layer_norm import layer_norm_op
from albert.modeling.shared_weights import CastOnce, TallKernel, cast_once_kernel


def value_and_grads(fn, inputs, upstream):
    """fn(*inputs) and d sum(fn * upstream) / d inputs, all float32 numpy."""
    inputs = [tf.convert_to_tensor(x) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = fn(*inputs)
    grads = tape.gradient(y, inputs, output_gradients=tf.cast(upstream, y.dtype))
    as_numpy = lambda t: tf.cast(t, tf.float32).numpy()  # noqa: E731
    return as_numpy(y), [as_numpy(g) for g in grads]


def textbook_gelu(x):
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))


def test_gelu_matches_the_textbook_form_and_its_autodiff():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 3, 4000), [-30.0, -8.0, -1e-3, 0.0, 1e-3, 8.0, 30.0]])
    x = x.astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    y, (dx,) = value_and_grads(gelu_tanh, [x], upstream)
    y_ref, (dx_ref,) = value_and_grads(textbook_gelu, [x], upstream)
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(dx))
    assert np.max(np.abs(y - y_ref)) < 5e-6
    assert np.max(np.abs(dx - dx_ref)) < 2e-5
    # Keras' own approximate GELU is the same function.
    keras_y = keras.activations.gelu(x, approximate=True)
    assert np.max(np.abs(y - keras.ops.convert_to_numpy(keras_y))) < 5e-6


def test_gelu_in_bfloat16_is_as_close_as_the_textbook_form_in_bfloat16():
    rng = np.random.default_rng(1)
    x16 = tf.cast(rng.normal(0, 2, 4096), tf.bfloat16)
    x = tf.cast(x16, tf.float32)  # the same inputs, exactly, in float32
    upstream = rng.normal(size=x.shape).astype("float32")
    y_ref, (dx_ref,) = value_and_grads(textbook_gelu, [x], upstream)
    y, (dx,) = value_and_grads(gelu_tanh, [x16], upstream)
    y_textbook, (dx_textbook,) = value_and_grads(textbook_gelu, [x16], upstream)
    error = lambda a, b: np.max(np.abs(a - b) / (np.abs(b) + 1e-2))  # noqa: E731
    assert error(y, y_ref) < 0.03  # a few bfloat16 roundings
    assert error(y, y_ref) <= 1.5 * error(y_textbook, y_ref)
    assert error(dx, dx_ref) <= 1.5 * error(dx_textbook, dx_ref)


def test_gelu_of_bfloat16_is_the_float32_value_rounded_once():
    # Computed in float32 inside (faster on TensorFlow's CPU kernels, and closer): the same
    # bits as the float32 GELU of the same inputs, cast to bfloat16 at the end.
    x16 = tf.cast(np.random.default_rng(2).normal(0, 3, 8192), tf.bfloat16)
    y16 = gelu_tanh(x16)
    assert y16.dtype == tf.bfloat16
    expected = tf.cast(gelu_tanh(tf.cast(x16, tf.float32)), tf.bfloat16)
    np.testing.assert_array_equal(
        tf.bitcast(y16, tf.uint16).numpy(), tf.bitcast(expected, tf.uint16).numpy()
    )
    _, (dx,) = value_and_grads(gelu_tanh, [x16], np.ones(8192, "float32"))
    assert np.all(np.isfinite(dx))


def keras_layer_norm(x, gamma, beta):
    return keras.ops.layer_normalization(x, gamma, beta, -1, 1e-12)


@pytest.mark.parametrize("offset", [0.0, 30.0])
def test_layer_norm_matches_keras_and_its_autodiff(offset):
    rng = np.random.default_rng(2)
    x = (rng.normal(0, 2, (12, 18)) + offset).astype("float32")
    gamma = rng.normal(1, 0.3, 18).astype("float32")
    beta = rng.normal(0, 0.3, 18).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    ours = lambda x, g, b: layer_norm_op(x, g, b, "float32")  # noqa: E731
    y, grads = value_and_grads(ours, [x, gamma, beta], upstream)
    y_ref, grads_ref = value_and_grads(keras_layer_norm, [x, gamma, beta], upstream)
    assert np.max(np.abs(y - y_ref)) < 1e-5
    for name, g, g_ref in zip(("x", "gamma", "beta"), grads, grads_ref, strict=True):
        assert np.max(np.abs(g - g_ref)) < 1e-4 * max(1.0, np.max(np.abs(g_ref))), name


def test_layer_norm_keeps_the_input_dtype_for_its_gradient_and_returns_the_asked_dtype():
    rng = np.random.default_rng(3)
    x = tf.cast(rng.normal(0, 2, (8, 18)), tf.bfloat16)
    gamma, beta = tf.ones(18), tf.zeros(18)
    with tf.GradientTape() as tape:
        tape.watch([x, gamma, beta])
        y = layer_norm_op(x, gamma, beta, "bfloat16")
    dx, dgamma, dbeta = tape.gradient(y, [x, gamma, beta], output_gradients=tf.ones_like(y))
    assert (y.dtype, dx.dtype, dgamma.dtype, dbeta.dtype) == (
        tf.bfloat16,
        tf.bfloat16,
        tf.float32,
        tf.float32,
    )


def shared_kernel_gradient(uses, per_use):
    """d/dW of sum_l (x_l @ W_l) * u_l for L uses of one float32 kernel, in bfloat16."""
    rng = np.random.default_rng(4)
    kernel = tf.Variable(rng.normal(0, 1, (16, 24)).astype("float32"))
    xs = [tf.cast(rng.normal(0, 1, (32, 16)), tf.bfloat16) for _ in range(uses)]
    us = [tf.cast(rng.normal(0, 1, (32, 24)), tf.bfloat16) for _ in range(uses)]
    with tf.GradientTape() as tape:
        once = CastOnce([kernel], "bfloat16")
        total = 0.0
        for x, u in zip(xs, us, strict=True):
            w = per_use(kernel, once)
            total += tf.reduce_sum(tf.cast(tf.matmul(x, w) * u, tf.float32))
    return tape.gradient(total, kernel).numpy()


def test_cast_once_gradients_add_up_in_float32_as_a_cast_at_every_use_does():
    at_every_use = shared_kernel_gradient(12, lambda k, once: tf.cast(k, tf.bfloat16))
    cast_once = shared_kernel_gradient(12, lambda k, once: once.use())
    # One bfloat16 tensor reused: its 12 gradients are summed in bfloat16 first.
    bf16_sum = shared_kernel_gradient(12, lambda k, once: once.packed)
    assert np.max(np.abs(cast_once - at_every_use)) < 1e-5
    assert (
        np.max(np.abs(bf16_sum - at_every_use))
        > 100 * np.max(np.abs(cast_once - at_every_use)) + 1e-3
    )


def test_packed_kernels_and_scales_route_each_gradient_to_its_variable():
    rng = np.random.default_rng(5)
    a, b = (tf.Variable(rng.normal(0, 1, (4, 3)).astype("float32")) for _ in range(2))
    upstream = rng.normal(0, 1, (4, 6)).astype("float32")
    with tf.GradientTape() as tape:
        packed = CastOnce([a, b], "float32", scales=(0.25, 1.0)).use()
    da, db = tape.gradient(packed, [a, b], output_gradients=upstream)
    np.testing.assert_array_equal(packed.numpy(), np.concatenate([a.numpy() * 0.25, b], -1))
    np.testing.assert_array_equal(da.numpy(), upstream[:, :3] * 0.25)
    np.testing.assert_array_equal(db.numpy(), upstream[:, 3:])


def tall_kernel_step(uses, make):
    """y_l = x_l @ W for L uses of one float32 kernel [I, O], I > O: the ys and d/dW, dx_l of
    sum_l y_l * u_l."""
    rng = np.random.default_rng(9)
    kernel = tf.Variable(rng.normal(0, 1, (24, 16)).astype("float32"))
    xs = [tf.constant(rng.normal(0, 1, (32, 24)).astype("float32")) for _ in range(uses)]
    us = [tf.constant(rng.normal(0, 1, (32, 16)).astype("float32")) for _ in range(uses)]
    with tf.GradientTape() as tape:
        tape.watch(xs)
        shared = make(kernel)
        ys = [shared(x) for x in xs]
        total = sum(tf.reduce_sum(y * u) for y, u in zip(ys, us, strict=True))
    grads = tape.gradient(total, [kernel, *xs])
    return [y.numpy() for y in ys], [g.numpy() for g in grads]


def test_tall_kernel_has_the_cast_once_product_and_the_autodiff_gradients():
    ys, grads = tall_kernel_step(12, lambda k: TallKernel(k).matmul)
    ys_ref, grads_ref = tall_kernel_step(12, lambda k: lambda x: tf.matmul(x, k))
    ys_once, _ = tall_kernel_step(12, lambda k: CastOnce([k], "float32").matmul)
    for y, y_once in zip(ys, ys_once, strict=True):
        np.testing.assert_array_equal(y, y_once)  # the forward product is the same op
    for g, g_ref in zip(grads, grads_ref, strict=True):
        assert np.max(np.abs(g - g_ref)) < 1e-4 * np.max(np.abs(g_ref))


def test_cast_once_kernel_is_tall_only_for_a_tall_kernel_in_float32_training():
    tall, wide = (keras.Variable(np.zeros(shape, "float32")) for shape in ((6, 4), (4, 6)))
    assert isinstance(cast_once_kernel(tall, "float32", training=True), TallKernel)
    for variable, dtype, training in (
        (tall, "float32", False),  # inference reads no transposed copy
        (tall, "bfloat16", True),  # bfloat16 matmuls on a CPU are oneDNN's, not measured
        (wide, "float32", True),  # [H, 4H]: x^T dy is the faster form already
    ):
        assert isinstance(cast_once_kernel(variable, dtype, training), CastOnce)


def test_xla_forms_each_layer_s_ffn_output_gradient_as_o_by_i():
    """The compiled gradient of the encoder: no product has the tall kernel's [I, H] shape;
    each layer's is [H, I], and one transpose gives the variable's."""
    config = tiny_config(num_hidden_layers=3, num_hidden_groups=1)
    keras.utils.set_random_seed(0)
    encoder = AlbertEncoder(config)
    encoder.build()
    x = tf.random.normal((2, 5, config.hidden_size))
    bias = tf.zeros((2, 1, 1, 5))

    @tf.function(jit_compile=True)
    def gradients(x):
        with tf.GradientTape() as tape:
            y = encoder(x, bias, training=True)
        return tape.gradient(y, encoder.trainable_weights)

    hlo = gradients.experimental_get_compiler_ir(x)(stage="optimized_hlo")
    h, i = config.hidden_size, config.intermediate_size
    dots = [line for line in hlo.splitlines() if " dot(" in line]
    assert dots and not [d for d in dots if f"f32[{i},{h}]" in d.split("dot(")[0]]
    assert len([d for d in dots if f"f32[{h},{i}]" in d.split("dot(")[0]]) >= 3


def test_query_scale_is_folded_only_where_that_is_exact():
    assert encoder_module._scale_folds(1 / math.sqrt(64))  # every released ALBERT
    assert encoder_module._scale_folds(1 / math.sqrt(16))
    assert not encoder_module._scale_folds(1 / math.sqrt(6))  # the tests' tiny heads


def run_attention(monkeypatch, folds, dtype_policy):
    monkeypatch.setattr(encoder_module, "_scale_folds", lambda scale: folds)
    keras.mixed_precision.set_dtype_policy(dtype_policy)
    try:
        keras.utils.set_random_seed(0)
        config = tiny_config(hidden_size=32, num_attention_heads=2)
        layer = AlbertAttention(config)
        layer.build()
        x = np.random.default_rng(6).normal(0, 1, (2, 5, 32)).astype("float32")
        bias = np.zeros((2, 1, 1, 5), "float32")
        return keras.ops.convert_to_numpy(keras.ops.cast(layer(x, bias), "float32"))
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


@pytest.mark.parametrize("dtype_policy", ["float32", "mixed_bfloat16"])
def test_folding_a_power_of_two_scale_gives_the_same_bits(monkeypatch, dtype_policy):
    folded = run_attention(monkeypatch, True, dtype_policy)  # head size 16: 1/4
    unfolded = run_attention(monkeypatch, False, dtype_policy)
    np.testing.assert_array_equal(folded, unfolded)


def test_encoder_with_cast_once_weights_equals_blocks_called_alone():
    """The encoder's cast-once path against each block casting its own weights."""
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(0)
        config = tiny_config()
        encoder = AlbertEncoder(config)
        encoder.build()
        x = np.random.default_rng(7).normal(0, 1, (2, 5, config.hidden_size))
        x = tf.cast(x, tf.bfloat16)
        bias = tf.zeros((2, 1, 1, 5))
        upstream = tf.cast(np.random.default_rng(8).normal(0, 1, (2, 5, 18)), tf.bfloat16)
        with tf.GradientTape(persistent=True) as tape:
            together = encoder(x, bias)
            alone = x
            for layer in range(config.num_hidden_layers):
                group = config.group_of_layer(layer)
                for i in range(config.inner_group_num):
                    alone = encoder.attention_blocks[group][i](alone, bias)
                    alone = encoder.ffn_blocks[group][i](alone)
        np.testing.assert_array_equal(together.numpy(), alone.numpy())
        weights = encoder.trainable_weights
        for g1, g2 in zip(
            tape.gradient(together, weights, output_gradients=upstream),
            tape.gradient(alone, weights, output_gradients=upstream),
            strict=True,
        ):
            assert np.max(np.abs(g1.numpy() - g2.numpy())) <= 1e-5 * np.max(np.abs(g2.numpy()))
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


def test_block_weights_are_read_in_float32_inside_a_mixed_precision_model():
    """Keras autocasts a variable read inside a mixed layer's call; the blocks' variables
    are made not to be, so that `CastOnce` holds the float32 values its gradients go to."""
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        config = tiny_config()
        encoder = AlbertEncoder(config)
        encoder.build()
        seen = {}

        class Probe(keras.layers.Layer):
            def call(self, x):
                for block in (encoder.attention_blocks[0][0], encoder.ffn_blocks[0][0]):
                    for name, weights in block.shared_weights().items():
                        seen[name] = [
                            keras.backend.standardize_dtype(s.dtype) for s in weights.sources
                        ]
                    seen["gamma"] = [str(keras.ops.convert_to_tensor(block.layer_norm.gamma).dtype)]
                return x

        Probe()(np.zeros((1, 2), "float32"))
        assert seen and all(dtypes == ["float32"] * len(dtypes) for dtypes in seen.values())
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
