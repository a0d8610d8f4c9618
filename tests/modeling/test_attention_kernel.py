"""The fused attention kernel (`keras.ops.dot_product_attention`) against the explicit one:
the same outputs and gradients (max abs diff), the `auto` choice and its overrides, and
attention dropout always on the explicit path."""

import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import tiny_config

from albert.modeling import attention_kernel
from albert.modeling.encoder import AlbertAttention

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def unset_kernel(monkeypatch):
    monkeypatch.delenv(attention_kernel.ATTENTION_VARIABLE, raising=False)
    yield
    attention_kernel.set_kernel(None)


def attention_and_grads(kernel, head_size, query_positions=None, seed=0):
    """One AlbertAttention's output and d sum(out * upstream) / d (x, kernels), float32."""
    attention_kernel.set_kernel(kernel)
    keras.utils.set_random_seed(seed)
    config = tiny_config(hidden_size=2 * head_size, num_attention_heads=2)
    layer = AlbertAttention(config)
    layer.build()
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(0, 1, (3, 7, 2 * head_size)).astype("float32"))
    lengths = np.array([7, 4, 1])  # padding keys at the end, one row with a single key
    bias = np.where(np.arange(7)[None, :] < lengths[:, None], 0.0, -10000.0)
    bias = tf.constant(bias[:, None, None, :].astype("float32"))
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x, bias, query_positions=query_positions)
    upstream = rng.normal(size=out.shape).astype("float32")
    variables = [x] + [v.value for v in layer.trainable_variables]
    grads = tape.gradient(out, variables, output_gradients=upstream)
    return out.numpy(), [g.numpy() for g in grads]


@pytest.mark.parametrize("head_size", [16, 12])  # 1/sqrt(D) folded into Q, and not
@pytest.mark.parametrize("positions", [None, [[0, 3], [1, 6], [2, 5]]])
def test_fused_matches_explicit(head_size, positions):
    positions = None if positions is None else tf.constant(positions, tf.int32)
    out, grads = attention_and_grads("explicit", head_size, positions)
    fused_out, fused_grads = attention_and_grads("fused", head_size, positions)
    assert out.shape == fused_out.shape
    assert np.max(np.abs(out - fused_out)) < 1e-5
    for g, fused_g in zip(grads, fused_grads, strict=True):
        assert np.max(np.abs(g - fused_g)) < 1e-4 * max(1.0, np.max(np.abs(g)))


# Only a dropout to apply sends training to the explicit path: fine-tuning with
# attention_probs_dropout_prob=0 (as ALBERT v2's configs) trains on the fused kernel, and
# inference, with nothing to drop, always runs fused.
@pytest.mark.parametrize("dropout, fused_in_training", [(0.5, False), (0.0, True)])
def test_only_attention_dropout_in_training_runs_explicit(monkeypatch, dropout, fused_in_training):
    attention_kernel.set_kernel("fused")
    config = tiny_config(
        hidden_size=32, num_attention_heads=2, attention_probs_dropout_prob=dropout
    )
    layer = AlbertAttention(config)
    layer.build()
    calls = []
    fused = layer._fused_context
    monkeypatch.setattr(layer, "_fused_context", lambda *a: calls.append("fused") or fused(*a))
    x, bias = np.ones((2, 5, 32), "float32"), np.zeros((2, 1, 1, 5), "float32")
    layer(x, bias, training=True)
    assert calls == (["fused"] if fused_in_training else [])
    calls.clear()
    layer(x, bias, training=False)
    assert calls == ["fused"]


def test_auto_is_explicit_under_tensorflow_and_the_overrides_win(monkeypatch):
    assert keras.backend.backend() == "tensorflow"
    assert not attention_kernel.fused()
    monkeypatch.setenv(attention_kernel.ATTENTION_VARIABLE, "fused")
    assert attention_kernel.fused()
    attention_kernel.set_kernel("explicit")  # the process's setting beats the environment
    assert not attention_kernel.fused()


def test_bad_choices_are_refused_in_one_line(monkeypatch):
    with pytest.raises(ValueError, match="one of"):
        attention_kernel.set_kernel("flash")
    monkeypatch.setenv(attention_kernel.ATTENTION_VARIABLE, "cudnn")
    with pytest.raises(ValueError, match="ALBERT_ATTENTION must be one of"):
        attention_kernel.fused()


def test_auto_is_fused_only_on_a_jax_gpu(monkeypatch):
    monkeypatch.setattr(attention_kernel.keras.backend, "backend", lambda: "jax")
    for platform, expected in (("gpu", True), ("cpu", False), ("tpu", False)):
        monkeypatch.setattr(attention_kernel, "_jax_platform", lambda p=platform: p)
        assert attention_kernel.fused() is expected, platform
    monkeypatch.setattr(attention_kernel, "_jax_platform", lambda: "gpu")
    assert attention_kernel.fused(512, 512) and attention_kernel.fused(20, 128)
    assert not attention_kernel.fused(5, 32)  # cuDNN trains a biased kernel on even lengths
    assert not attention_kernel.fused(32, 125)


@pytest.mark.slow  # a JAX process (~10 s)
def test_fused_matches_explicit_under_jax():
    """The whole pretraining model's loss and gradients under Keras' JAX backend (on the CPU
    its `dot_product_attention` is XLA's; on a GPU, cuDNN's: benchmarks/gpu_loss_check.py)."""
    pytest.importorskip("jax")
    code = """
import json, sys
import numpy as np
sys.path.insert(0, "benchmarks")
import jax, keras
import gpu_loss_check as g, jax_pretraining as jp
from albert.modeling import attention_kernel
config = g.tiny_config()
batch = dict(g.batches(config, 1)[0])
batch["input_mask"] = batch["input_mask"].copy()
batch["input_mask"][1, 20:] = 0  # padding keys
found = {}
for kernel in ("explicit", "fused"):
    attention_kernel.set_kernel(kernel)
    model, _ = g._model_and_optimizer(config, 10)
    loss_fn = jp.make_loss_fn(model)
    def loss(trainable):
        return loss_fn(trainable, [v.value for v in model.non_trainable_variables], batch)[0]
    value, grads = jax.jit(jax.value_and_grad(loss))([v.value for v in model.trainable_variables])
    found[kernel] = [float(value)] + [np.asarray(x).ravel().tolist() for x in grads]
print(json.dumps(found))
"""
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    explicit, fused = found["explicit"], found["fused"]
    assert abs(explicit[0] - fused[0]) < 1e-5
    for a, b in zip(explicit[1:], fused[1:], strict=True):
        a, b = np.array(a), np.array(b)
        assert np.max(np.abs(a - b)) < 1e-4 * max(1.0, np.max(np.abs(a)))
