"""`--gradient_accumulation_steps`: each replica's batch split into micro-batches whose
gradients are summed gives the update of the whole batch (dropout 0), under the default
strategy with and without XLA; a count that does not divide the replica batch is refused.
(MirroredStrategy with accumulation: tests/training/test_mirrored.py.)"""

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synthetic_pretraining as synthetic  # noqa: E402

from albert.config import AlbertConfig  # noqa: E402
from albert.tasks.pretraining import PretrainingTask  # noqa: E402
from albert.training import loop  # noqa: E402
from albert.training.inputs import InputError  # noqa: E402
from albert.training.optimization import create_optimizer  # noqa: E402


def _options(output_dir, micro_batches, jit_compile=False, batch=6):
    return loop.RunOptions(
        output_dir=str(output_dir),
        num_train_steps=3,
        train_batch_size=batch,
        save_checkpoints_steps=3,
        iterations_per_loop=3,
        seed=7,
        jit_compile=jit_compile,
        gradient_accumulation_steps=micro_batches,
    )


def _optimizer_fn(global_step):
    return create_optimizer(
        "lamb", 0.05, 3, num_warmup_steps=1, global_step=global_step, aggregate_gradients=False
    )


def _train(tmp_path, name, micro_batches, jit_compile=False):
    data = tmp_path / "train.tfrecord"
    if not data.exists():
        synthetic.write_records(data, 64, seed=3)
    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    task = PretrainingTask(
        config, str(data), 6, 6, synthetic.MAX_SEQ_LENGTH, synthetic.MAX_PREDICTIONS
    )
    out = tmp_path / name
    loop.run(
        task, tf.distribute.get_strategy(), _options(out, micro_batches, jit_compile), _optimizer_fn
    )
    reader = tf.train.load_checkpoint(str(out / "model.ckpt-3"))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("model/")]
    return {n: reader.get_tensor(n) for n in names}


@pytest.mark.slow  # 6 tiny training runs (~45 s)
@pytest.mark.parametrize("jit_compile", [False, True])
def test_micro_batches_give_the_whole_batch_update(tmp_path, jit_compile):
    whole = _train(tmp_path, "whole", 1, jit_compile)
    for micro_batches in (2, 3):
        split = _train(tmp_path, f"split{micro_batches}", micro_batches, jit_compile)
        assert split.keys() == whole.keys() and len(whole) > 20
        for name in whole:
            assert np.max(np.abs(split[name] - whole[name])) < 2e-5, (micro_batches, name)
        # The summed micro-batch losses are the whole batch's (the log and TensorBoard).
        assert abs(_loss(tmp_path / f"split{micro_batches}") - _loss(tmp_path / "whole")) < 1e-5


def _loss(directory):
    """The `loss` scalar of the run's one host call (step 3)."""
    for path in sorted(directory.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == "loss":
                    return float(tf.make_ndarray(value.tensor))
    raise AssertionError(f"no loss summary in {directory}")


def test_a_count_that_does_not_divide_the_replica_batch_is_refused(tmp_path):
    with pytest.raises(
        InputError,
        match=r"^--gradient_accumulation_steps=4 must be a positive "
        r"divisor of each replica's batch \(--train_batch_size=6 over 1 replica",
    ):
        loop.batch_sizes(_options(tmp_path, 4), 1)
    with pytest.raises(InputError, match="over 2 replica"):
        loop.batch_sizes(_options(tmp_path, 2, batch=6), 2)  # 3 per replica
    assert loop.batch_sizes(_options(tmp_path, 3, batch=6), 2) == {"train_batch_size": 6}
    # 6 % -1 == 0, and 6 % 0 is a ZeroDivisionError: neither is a count of micro-batches.
    for micro_batches in (0, -1):
        with pytest.raises(InputError, match=f"^--gradient_accumulation_steps={micro_batches} "):
            loop.batch_sizes(_options(tmp_path, micro_batches), 1)


UNITS = 10  # mask bits per row; codes and their squares stay exact in float32


def _probe_step(micro_batches, batch=4):
    """One training step of a probe task; returns the loop's sums and the dropout state."""
    import keras

    from albert.modeling.dropout import Dropout
    from albert.training.inputs import DistributedInput
    from albert.training.steps import Trainer
    from albert.training.task import TrainingTask

    bits = tf.constant([2.0**j for j in range(UNITS)])

    class Probe(TrainingTask):
        """Ones through Dropout(0.5) and a Dense; counts its calls and rows, and sums the
        dropout mask of each call's first row (and its square)."""

        metric_names = ("calls", "rows", "rows_squared", "code", "code_squared")

        def create_model(self):
            inputs = keras.Input((UNITS,))
            dropped = Dropout(0.5, name="dropout")(inputs)
            return keras.Model(inputs, [dropped, keras.layers.Dense(1)(dropped)])

        def loss_normalizers(self, features):
            return {"examples": tf.cast(tf.shape(features)[0], tf.float32)}

        def compute_loss(self, model, features, normalizers, training):
            dropped, outputs = model(features, training=training)
            rows = tf.cast(tf.shape(features)[0], tf.float32)
            code = tf.reduce_sum(tf.cast(dropped[0] > 0, tf.float32) * bits)
            sums = {"calls": 1.0, "rows": rows, "rows_squared": rows * rows}
            sums.update(code=code, code_squared=code * code)
            return tf.reduce_sum(outputs) / normalizers["examples"], sums

    keras.utils.set_random_seed(3)
    strategy = tf.distribute.get_strategy()
    task = Probe()
    model = task.create_model()
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    optimizer = keras.optimizers.SGD(0.0)
    optimizer.build(model.trainable_variables)
    trainer = Trainer(
        strategy, task, model, optimizer, global_step, None, accumulation_steps=micro_batches
    )
    data = DistributedInput(
        strategy, lambda context: tf.data.Dataset.from_tensors(tf.ones([batch, UNITS])).repeat()
    )
    sums = trainer.train(data, 1)
    return sums, model.get_layer("dropout").seed_generator.state.numpy().tolist()


def test_each_micro_batch_is_its_own_forward_pass_with_its_own_dropout_masks():
    whole, whole_state = _probe_step(1)
    assert (whole["calls"], whole["rows"], whole["rows_squared"]) == (1, 4, 16)
    split, split_state = _probe_step(4)
    # Four passes of one row each: activations for a quarter of the batch at a time.
    assert (split["calls"], split["rows"], split["rows_squared"]) == (4, 4, 4)
    assert split["examples"] == whole["examples"] == 4
    # Not one mask repeated four times (equal codes would give sum**2 == 4 * sum of squares),
    # and the seed state advanced once per pass.
    assert split["code"] ** 2 < 4 * split["code_squared"]
    assert split_state[1] - whole_state[1] == 3


@pytest.mark.parametrize("jit_compile", [False, True])
def test_norms_are_staged_in_the_compiled_step_only(monkeypatch, jit_compile):
    """`xla_norms` is on while the one-device step that XLA compiles is traced, off without
    XLA (TensorFlow's own reductions need no staging)."""
    import keras

    from albert.training import optimization
    from albert.training.inputs import DistributedInput
    from albert.training.steps import Trainer
    from albert.training.task import TrainingTask

    seen = []
    staged_global_norm = optimization.global_norm
    monkeypatch.setattr(
        optimization, "global_norm", lambda ts: seen.append(True) or staged_global_norm(ts)
    )

    class Linear(TrainingTask):
        metric_names = ("rows",)

        def create_model(self):
            inputs = keras.Input((3,))
            return keras.Model(inputs, keras.layers.Dense(1)(inputs))

        def loss_normalizers(self, features):
            return {"examples": tf.cast(tf.shape(features)[0], tf.float32)}

        def compute_loss(self, model, features, normalizers, training):
            rows = tf.cast(tf.shape(features)[0], tf.float32)
            return tf.reduce_sum(model(features, training=training)), {"rows": rows}

    strategy = tf.distribute.get_strategy()
    task = Linear()
    model = task.create_model()
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    trainer = Trainer(strategy, task, model, optimizer, global_step, jit_compile=jit_compile)
    data = DistributedInput(
        strategy, lambda context: tf.data.Dataset.from_tensors(tf.ones([2, 3])).repeat()
    )
    sums = trainer.train(data, 2)
    assert bool(seen) == jit_compile and not optimization.norms_staged()
    assert np.isclose(sums["gradient_norm"], 2 * np.sqrt(2.0**2 * 3 + 2.0**2))  # dW = 2, db = 2
