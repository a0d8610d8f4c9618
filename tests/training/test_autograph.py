"""Autograph converts the host-call loops and the path to a task's hooks (a custom task may
branch on tensors), not the input, metric and update bookkeeping: each conversion costs
~40 ms at every process start, and converting all of it was a second of a tiny run's ~9 s.

The scripts run in fresh processes: autograph keeps converted functions for the life of a
process, so a test process that converted them earlier would hide them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
sys.path.insert(0, str(TESTS / "training"))
sys.path.insert(0, str(TESTS / "tasks"))

import synthetic_glue  # noqa: E402
import synthetic_pretraining  # noqa: E402

# Slow tier: two tiny runs of the scripts (~15 s on two cores).
pytestmark = pytest.mark.slow

# Runs a script as `python script.py ...` would, printing the name of every function autograph
# converts (converted ones are cached: each appears once per distinct function object).
_RECORDING_RUN = """
import runpy, sys
from tensorflow.python.autograph.impl import api
convert = api._convert_actual
def recording(entity, program_ctx):
    name = f"{getattr(entity, '__module__', '?')}.{getattr(entity, '__qualname__', entity)}"
    print("AUTOGRAPH", name, file=sys.stderr)
    return convert(entity, program_ctx)
api._convert_actual = recording
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

# Bookkeeping that branches on Python values only: traced as written.
AS_WRITTEN = {
    "albert.data.records.pretraining_dataset.<locals>.parse",
    "albert.data.records.parse_examples",
    "albert.data.records.check_record_values",
    "albert.data.records.check_token_ids",
    "albert.data.features.read_feature_records.<locals>.parse",
    "albert.tasks.engine.FineTuningTask._read.<locals>.reshape",
    "albert.tasks.engine.FineTuningTask.inference_dataset.<locals>.number",
    "albert.tasks.engine.FineTuningTask._predict_step.<locals>.step",
    "albert.training.inputs.DistributedInput.get_next",
    "albert.training.steps.MetricSums.add",
    "albert.training.steps.MetricSums.reset",
    "albert.training.steps.Trainer._apply_gradients",
}
# Converted: the loops, and each task's hooks (as any code under tf.function by default).
CONVERTED = {
    "albert.training.steps.Trainer._train_loop_fn",
    "albert.training.steps.Trainer._eval_loop_fn",
    "albert.training.predict.Predictor._loop_fn",
    "albert.tasks.pretraining.PretrainingTask.compute_loss",
    "albert.tasks.pretraining.PretrainingTask.loss_normalizers",
    "albert.tasks.engine.FineTuningTask.compute_loss",
}


def _start(script, flags):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    command = [sys.executable, "-c", _RECORDING_RUN, str(REPO / script), *flags]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _converted(process):
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    return {line.split()[1] for line in stderr.splitlines() if line.startswith("AUTOGRAPH ")}


def test_autograph_converts_the_loops_and_task_hooks_not_the_bookkeeping(tmp_path):
    data = synthetic_pretraining.write_records(tmp_path / "train.tfrecord", 40, seed=3)
    config = synthetic_pretraining.write_config(tmp_path / "config.json")
    pretraining = _start(
        "run_pretraining.py",
        [
            f"--albert_config_file={config}",
            f"--input_file={data}",
            f"--output_dir={tmp_path / 'pretraining'}",
            "--do_train",
            "--do_eval",
            "--train_batch_size=8",
            "--eval_batch_size=8",
            "--max_eval_steps=2",
            "--max_seq_length=32",
            "--max_predictions_per_seq=5",
            "--num_train_steps=4",
            "--num_warmup_steps=1",
            "--iterations_per_loop=2",
        ],
    )
    glue = synthetic_glue.write_sst2(tmp_path / "glue", num_train=32, num_dev=10, num_test=3)
    glue_config = synthetic_glue.write_config(tmp_path / "glue_config.json")
    flags = synthetic_glue.tiny_run_flags(glue, tmp_path / "sst2", glue_config, "sst-2")
    classifier = _start(
        "run_classifier.py",
        [
            *flags,
            f"--spm_model_file={synthetic_glue.SPM_MODEL}",
            "--train_step=4",
            "--save_checkpoints_steps=4",
            "--do_train",
            "--do_eval",
            "--do_predict",
        ],
    )
    converted = _converted(pretraining) | _converted(classifier)
    assert CONVERTED <= converted, sorted(CONVERTED - converted)  # the recording works
    assert not AS_WRITTEN & converted, sorted(AS_WRITTEN & converted)
