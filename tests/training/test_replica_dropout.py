"""Under MirroredStrategy over 2 logical CPUs each replica draws its own dropout mask, through
the real training step (`Trainer`), while the seed state stays one mirrored value.

Runs in a subprocess: logical devices must be configured before TensorFlow initialises.
(With dropout 0 the mirrored run equals the one-device run: tests/training/test_mirrored.py.)
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Slow tier: trains two replicas in a subprocess (~8 s).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
UNITS = 20  # mask bits per replica, packed into one float32 (exact below 2**24)


def _run(output):
    import keras
    import tensorflow as tf

    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
    from albert.modeling.dropout import Dropout
    from albert.training.inputs import DistributedInput
    from albert.training.steps import Trainer
    from albert.training.task import TrainingTask

    bits = tf.constant([2.0**j for j in range(UNITS)])  # [UNITS]

    class MaskTask(TrainingTask):
        """Ones through Dropout(0.5) and a Dense; reports each replica's mask as a number."""

        metric_names = ("mask_0", "mask_1")

        def create_model(self):
            inputs = keras.Input((UNITS,))
            dropped = Dropout(0.5, name="dropout")(inputs)
            outputs = keras.layers.Dense(1, use_bias=False)(dropped)
            return keras.Model(inputs, [dropped, outputs])

        def loss_normalizers(self, features):
            return {"examples": tf.cast(tf.shape(features)[0], tf.float32)}

        def compute_loss(self, model, features, normalizers, training):
            dropped, outputs = model(features, training=training)  # [1, UNITS], [1, 1]
            code = tf.reduce_sum(tf.cast(dropped[0] > 0, tf.float32) * bits)
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            sums = {f"mask_{r}": code if replica == r else tf.constant(0.0) for r in (0, 1)}
            return tf.reduce_sum(outputs) / normalizers["examples"], sums

    keras.utils.set_random_seed(3)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    task = MaskTask()
    with strategy.scope():
        model = task.create_model()
        global_step = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        optimizer = keras.optimizers.SGD(0.0)
        optimizer.build(model.trainable_variables)
    trainer = Trainer(strategy, task, model, optimizer, global_step, clip_norm=None)
    data = DistributedInput(
        strategy, lambda context: tf.data.Dataset.from_tensors(tf.ones([1, UNITS])).repeat()
    )
    codes = []
    for _ in range(3):
        sums = trainer.train(data, 1)
        codes.append([int(sums["mask_0"]), int(sums["mask_1"])])
    state = model.get_layer("dropout").seed_generator.state._value  # the tf.Variable
    replica_states = [v.numpy().tolist() for v in strategy.experimental_local_results(state)]
    Path(output).write_text(json.dumps({"codes": codes, "states": replica_states}))


def test_replicas_draw_different_dropout_masks(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    output = tmp_path / "masks.json"
    process = subprocess.run(
        [sys.executable, __file__, str(output)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    result = json.loads(output.read_text())
    for code_0, code_1 in result["codes"]:
        # Both replicas dropped some units and kept others, and not the same ones.
        assert 0 < code_0 < 2**UNITS - 1 and 0 < code_1 < 2**UNITS - 1
        assert code_0 != code_1
    # A new mask every step.
    assert len({tuple(codes) for codes in result["codes"]}) == 3
    # The seed state itself stays one value on both replicas (what a checkpoint saves),
    # advanced once per step.
    first, second = result["states"]
    assert first == second and first[1] == 3


if __name__ == "__main__":
    _run(sys.argv[1])
