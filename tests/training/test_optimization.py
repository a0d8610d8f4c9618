"""LAMB / AdamW against a numpy transcription of the original's update, and the schedule."""

import keras
import numpy as np
import pytest

from albert.modeling import AlbertPretrainer
from albert.training.optimization import (
    AdamWeightDecay,
    Lamb,
    OptimizerError,
    WarmupPolynomialDecay,
    create_optimizer,
)
from tests.helpers import original_optimizer_update, tiny_config


class _Block(keras.layers.Layer):
    """Weights with the paths the exclusion rules look at."""

    def __init__(self):
        super().__init__(name="encoder")
        self.query = keras.layers.Dense(5, name="query")
        self.layer_norm = keras.layers.LayerNormalization(name="LayerNorm")

    def build(self, input_shape=None):
        self.query.build((None, 3))
        self.layer_norm.build((None, 5))
        # Starts at zero, so ||w|| = 0 and the trust ratio must fall back to 1.
        self.zero_kernel = self.add_weight(shape=(2, 3), initializer="zeros", name="zero_kernel")
        self.built = True


@pytest.mark.parametrize("optimizer_class", [AdamWeightDecay, Lamb])
def test_update_matches_numpy_transcription(optimizer_class):
    block = _Block()
    block.build()
    variables = block.trainable_variables
    paths = [v.path for v in variables]
    assert paths == [
        "encoder/zero_kernel",
        "encoder/query/kernel",
        "encoder/query/bias",
        "encoder/LayerNorm/gamma",
        "encoder/LayerNorm/beta",
    ]
    rng = np.random.default_rng(0)
    for v in variables[1:]:  # uneven, non-trivial starting values
        v.assign(rng.normal(size=v.shape).astype("float32"))
    excluded = [False, False, True, True, True]
    lr = 0.1
    optimizer = optimizer_class(learning_rate=lr)
    state = [(v.numpy().astype("float64"), 0.0, 0.0) for v in variables]
    for step in range(4):
        grads = [rng.normal(size=v.shape).astype("float32") for v in variables]
        if step == 0:
            grads[0] = np.zeros_like(grads[0])  # ||u|| = 0 with ||w|| = 0: ratio 1, no NaN
        optimizer.apply(grads, variables)
        adapt = optimizer_class is Lamb
        state = [
            original_optimizer_update(w, g, m, v, lr, decay=not ex, adapt=adapt and not ex)
            for (w, m, v), g, ex in zip(state, grads, excluded, strict=True)
        ]
        for variable, (expected, _, _) in zip(variables, state, strict=True):
            got = variable.numpy()
            assert np.all(np.isfinite(got))
            assert np.max(np.abs(got - expected)) < 2e-6, (variable.path, step)


def test_lamb_and_adamw_differ_and_exclusions_matter():
    """Guards the test above against a transcription that cannot tell the rules apart."""
    results = {}
    for name, cls, exclude in (
        ("lamb", Lamb, ("LayerNorm", "layer_norm", "bias")),
        ("adamw", AdamWeightDecay, ("LayerNorm", "layer_norm", "bias")),
        ("lamb_no_exclusions", Lamb, ()),
    ):
        keras.utils.set_random_seed(1)
        block = _Block()
        block.build()
        optimizer = cls(learning_rate=0.1, exclude_from_weight_decay=exclude)
        grads = [np.full(v.shape, 0.5, "float32") for v in block.trainable_variables]
        optimizer.apply(grads, block.trainable_variables)
        results[name] = [v.numpy() for v in block.trainable_variables]
    kernel, gamma = 1, 3
    assert np.max(np.abs(results["lamb"][kernel] - results["adamw"][kernel])) > 1e-4
    assert np.max(np.abs(results["lamb"][gamma] - results["lamb_no_exclusions"][gamma])) > 1e-4


def test_exclusions_on_the_albert_variables():
    config = tiny_config(
        embedding_size=16,
        hidden_size=24,
        num_hidden_layers=2,
        num_hidden_groups=1,
        inner_group_num=1,
        num_attention_heads=2,
        intermediate_size=40,
        max_position_embeddings=512,
        type_vocab_size=2,
    )
    model = AlbertPretrainer(config)
    optimizer = Lamb(learning_rate=0.1)
    optimizer.build(model.trainable_variables)
    decayed = {
        v.path
        for v, use in zip(model.trainable_variables, optimizer._use_weight_decay, strict=True)
        if use
    }
    adapted = {
        v.path
        for v, use in zip(model.trainable_variables, optimizer._use_layer_adaptation, strict=True)
        if use
    }
    assert decayed == adapted
    for path in (
        "embeddings/word_embeddings",
        "pooler/kernel",
        "encoder/group_0_inner_group_0_attention/query/kernel",
        "sentence_order_head/output_weights",
        "masked_lm_head/transform_dense/kernel",
    ):
        assert path in decayed
    for path in (
        "embeddings/LayerNorm/gamma",
        "masked_lm_head/output_bias",
        "encoder/group_0_inner_group_0_attention/query/bias",
        "encoder/group_0_inner_group_0_ffn/LayerNorm_1/beta",
        "masked_lm_head/transform_LayerNorm/gamma",
    ):
        assert path not in decayed
    # Every variable is either a kernel-like weight or an excluded one.
    assert len(decayed) == sum(
        1 for v in model.trainable_variables if not any(k in v.path for k in ("LayerNorm", "bias"))
    )


def _reference_schedule(step, init, total, warmup, start, power):
    """The original's learning rate: optimization.py, create_optimizer (polynomial decay to 0,
    linear warmup counted from start_warmup_step)."""
    decayed = init * (1.0 - min(step, total) / total) ** power
    if warmup and step - start < warmup:
        return init * (step - start) / warmup
    return decayed


@pytest.mark.parametrize(
    "warmup,start,power", [(10, 0, 1.0), (7, 3, 2.0), (0, 0, 0.5), (25, 30, 1.0)]
)
def test_schedule_matches_formula(warmup, start, power):
    schedule = WarmupPolynomialDecay(0.00176, 100, warmup, start, power)
    for step in (0, 1, 3, 6, 7, 9, 10, 11, 29, 30, 54, 55, 99, 100, 130):
        expected = _reference_schedule(step, 0.00176, 100, warmup, start, power)
        assert abs(float(schedule(step)) - expected) < 1e-9, step


def test_schedule_known_values():
    schedule = WarmupPolynomialDecay(1e-3, 100, warmup_steps=10)
    assert [round(float(schedule(s)), 9) for s in (0, 5, 10, 50, 100, 150)] == [
        0.0,
        5e-4,
        9e-4,
        5e-4,
        0.0,
        0.0,
    ]


def _original_graph_schedule(step, init, total, warmup, start, power):
    """The original's learning rate as its TensorFlow ops compute it in float32
    (optimization.py, create_optimizer: tf.train.polynomial_decay, then the warmup lines)."""
    import tensorflow as tf

    global_step = tf.constant(step, tf.int64)  # [S] steps
    rate = tf.compat.v1.train.polynomial_decay(
        tf.constant(init, tf.float32), global_step, total, end_learning_rate=0.0, power=power
    )
    rate = rate() if callable(rate) else rate
    if warmup:
        steps_int = tf.cast(global_step, tf.int32) - tf.constant(start, tf.int32)
        warmup_int = tf.constant(warmup, tf.int32)
        percent_done = tf.cast(steps_int, tf.float32) / tf.cast(warmup_int, tf.float32)
        is_warmup = tf.cast(steps_int < warmup_int, tf.float32)
        rate = (1.0 - is_warmup) * rate + is_warmup * (init * percent_done)
    return rate.numpy()


@pytest.mark.parametrize(
    "init,total,warmup,start,power",
    [(0.00176, 125000, 3125, 0, 1.0), (3e-5, 10000, 1000, 0, 1.0), (2e-5, 800, 200, 7, 0.5)],
)
def test_schedule_is_bit_exact_with_the_original_ops(init, total, warmup, start, power):
    # The pretraining default and two fine-tuning rows: every warmup step, and the decay.
    import tensorflow as tf

    schedule = WarmupPolynomialDecay(init, total, warmup, start, power)
    steps = [*range(warmup + start + 3), total // 2, total - 1, total, total + 3]
    ours = schedule(tf.constant(steps, tf.int64)).numpy()  # elementwise over the steps
    original = _original_graph_schedule(steps, init, total, warmup, start, power)
    assert ours.shape == original.shape == (len(steps),)
    np.testing.assert_array_equal(ours, original)


def test_create_optimizer_follows_the_global_step():
    step = keras.Variable(0, dtype="int64", trainable=False)
    optimizer, schedule = create_optimizer(
        "adamw", 1e-3, 100, num_warmup_steps=10, global_step=step
    )
    assert isinstance(optimizer, AdamWeightDecay) and not isinstance(optimizer, Lamb)
    step.assign(50)
    assert abs(float(optimizer.learning_rate) - 5e-4) < 1e-9
    lamb, _ = create_optimizer("lamb", 1e-3, 100)
    assert isinstance(lamb, Lamb)


def test_bad_settings_are_one_sentence_errors():
    with pytest.raises(OptimizerError, match="optimizer"):
        create_optimizer("sgd", 1e-3, 100)
    with pytest.raises(OptimizerError, match="num_train_steps"):
        create_optimizer("lamb", 1e-3, 0)


def test_steps_before_start_warmup_step_are_warned(caplog):
    # As the original, the warmup is negative before --start_warmup_step: gradient ascent.
    from albert.training import loop

    schedule = WarmupPolynomialDecay(1e-3, 100, warmup_steps=10, start_warmup_step=5)
    assert float(schedule(0)) < 0 and float(schedule(5)) == 0
    loop._warn_negative_rates(schedule, 0, 100)
    assert "Steps 0 to 4 run at negative learning rates" in caplog.text
    caplog.clear()
    loop._warn_negative_rates(schedule, 5, 100)  # resumed at the start: as meant
    loop._warn_negative_rates(WarmupPolynomialDecay(1e-3, 100, 0, 5), 0, 100)  # no warmup
    assert "negative" not in caplog.text


@pytest.mark.slow  # ~5 s each on an idle 2-core machine (fit, save, load)
@pytest.mark.parametrize("optimizer_class", [Lamb, AdamWeightDecay])
def test_keras_fit_and_save_with_the_original_optimizers(tmp_path, optimizer_class):
    """`model.fit` hands the embedding's gradient over as IndexedSlices (TensorFlow), and a
    compiled model's `.keras` file names its optimizer and schedule: both must work."""
    from albert.modeling import AlbertClassifier

    model = AlbertClassifier(tiny_config(), num_labels=2)
    schedule = WarmupPolynomialDecay(1e-3, decay_steps=10, warmup_steps=2)
    model.compile(
        optimizer=optimizer_class(schedule),
        loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
    )
    rng = np.random.default_rng(0)
    x = {
        "input_ids": rng.integers(1, 30, (8, 12)).astype("int32"),
        "input_mask": np.ones((8, 12), "int32"),
        "segment_ids": np.zeros((8, 12), "int32"),
    }
    words = model.backbone.word_embeddings.numpy().copy()
    model.fit(x, {"logits": rng.integers(0, 2, (8,))}, epochs=3, verbose=0)  # step 0: rate 0
    assert not np.array_equal(model.backbone.word_embeddings.numpy(), words)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert type(loaded.optimizer) is optimizer_class
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    np.testing.assert_array_equal(
        loaded.predict(x, verbose=0)["logits"], model.predict(x, verbose=0)["logits"]
    )


@pytest.mark.parametrize("shape", [(3000, 128), (37, 5), (16,), (17,), (1,)])
def test_staged_norms_are_float32_accurate_and_leave_xla_no_window_reduction(shape):
    import tensorflow as tf

    from albert.training.optimization import squared_norm, xla_norms

    x = np.random.default_rng(2).normal(0, 3, shape).astype("float32")
    exact = np.sum(np.square(x.astype("float64")))

    def staged(x):
        with xla_norms():
            return squared_norm(x)

    compiled = tf.function(staged, jit_compile=True)
    for value in (staged(x), compiled(x)):
        assert abs(float(value) - exact) <= 1e-6 * exact
    hlo = compiled.experimental_get_compiler_ir(x)(stage="optimized_hlo")
    assert "reduce-window" not in hlo
    plain = squared_norm(x)  # outside `xla_norms`: one sum
    assert abs(float(plain) - exact) <= 1e-6 * exact


def test_lamb_matches_the_transcription_with_staged_norms_too():
    from albert.training.optimization import norms_staged, xla_norms

    assert not norms_staged()
    with xla_norms():
        assert norms_staged()
        test_update_matches_numpy_transcription(Lamb)
    assert not norms_staged()


def test_staged_norm_of_a_transpose_sums_its_source_and_reads_nothing_transposed():
    """The FFN output kernel's gradient is a transpose (TallKernel): its staged norm sums the
    tensor it was made from, so the compiled reduction reads no transposed copy."""
    import tensorflow as tf

    from albert.training.optimization import squared_norm, untransposed, xla_norms

    source = np.random.default_rng(3).normal(0, 2, (48, 96)).astype("float32")
    exact = np.sum(np.square(source.astype("float64")))

    def staged(s):
        with xla_norms():
            return squared_norm(tf.transpose(tf.transpose(tf.transpose(s))))

    compiled = tf.function(staged, jit_compile=True)
    assert abs(float(compiled(source)) - exact) <= 1e-6 * exact
    hlo = compiled.experimental_get_compiler_ir(source)(stage="optimized_hlo")
    assert "transpose(" not in hlo and "copy(" not in hlo, hlo
    # A transpose that anything else reads keeps its own layout; only its norm reads the
    # source. Eager tensors and variables have no producer and pass unchanged.
    eager = tf.constant(source)
    variable = tf.Variable(source)
    assert untransposed(eager) is eager and untransposed(variable) is variable

    @tf.function
    def producers(s):
        assert untransposed(tf.transpose(s)) is s
        doubled = tf.transpose(s) * 2.0
        assert untransposed(doubled) is doubled
        return doubled

    producers(source)
