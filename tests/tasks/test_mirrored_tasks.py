"""SQuAD v1.1, SQuAD v2.0 and RACE under data parallelism: MirroredStrategy over 2 logical
CPUs (set up in a subprocess before TensorFlow starts) trains, evaluates and predicts as one
device does with the same global batches, last eval and predict batches padded; and tiny
sets (a dev set of 1 example, predict sets of 1 more than a multiple of the global batch) on
2 replicas are scored exactly."""

import json
import os
import subprocess
import sys
from pathlib import Path

import brief_qa_runs as brief
import numpy as np
import pytest
import tensorflow as tf
from test_race_task import write_race

HERE = Path(__file__).resolve().parent
TOLERANCE = 1e-5
# Biases added to every logit of a softmax (over positions: SQuAD's output_bias and the v2
# start_dense and end_dense_1 biases; over choices: RACE's output_bias): their gradient is 0
# but for rounding, which Adam scales up, so one device and two replicas move them apart by
# rounding alone. They are compared at 10x the tolerance; every other weight at it.
SOFTMAX_SHIFTS = ("output_bias", "start_dense/bias", "end_dense_1/bias")

_MIRRORED_SCRIPT = """
import json, sys
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import brief_qa_runs
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
results = [brief_qa_runs.run_spec(strategy, spec) for spec in json.loads(sys.argv[1])]
with open(sys.argv[2], "w") as f:
    json.dump(results, f)
"""


def on_two_replicas(specs, tmp_path):
    """`brief_qa_runs.run_spec` of each spec under MirroredStrategy on 2 logical CPUs."""
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join([str(HERE.parents[1]), str(HERE)]),
    )
    results = tmp_path / "mirrored.json"
    run = subprocess.run(
        [sys.executable, "-c", _MIRRORED_SCRIPT, json.dumps(specs), str(results)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(results.read_text())


def on_one_device(specs):
    strategy = tf.distribute.get_strategy()
    return [json.loads(json.dumps(brief.run_spec(strategy, spec))) for spec in specs]


def assert_same_run(expected, actual):
    """Metrics, prediction files, raw predictions, training summaries (loss, gradient norm)
    and final weights within TOLERANCE (what SOFTMAX_SHIFTS moves, at 10x)."""
    assert set(expected["train"]) >= {"loss", "gradient_norm"}
    for part in ("metrics", "files", "train"):
        assert brief.max_abs_diff(expected[part], actual[part], part) < TOLERANCE, part
    predictions = (expected["predictions"], actual["predictions"])
    assert brief.max_abs_diff(_unshifted(predictions[0]), _unshifted(predictions[1])) < TOLERANCE
    assert brief.max_abs_diff(*predictions) < 10 * TOLERANCE
    weights = (expected["weights"], actual["weights"], "weights")
    assert brief.max_abs_diff(*weights, skip=SOFTMAX_SHIFTS) < TOLERANCE
    assert brief.max_abs_diff(*weights) < 10 * TOLERANCE


def _unshifted(predictions):
    """The predictions with the logits SOFTMAX_SHIFTS moves less their mean over the last
    axis (positions, choices): what the softmax sees."""
    shifted = ("start_logits", "end_logits", "logits")
    return {
        name: np.asarray(values) - np.mean(values, axis=-1, keepdims=True)
        if name in shifted
        else values
        for name, values in predictions.items()
    }


def squad_spec(tmp_path, kind, num_contexts, seed, **changes):
    v2 = kind == "v2"
    train = brief.write_squad(tmp_path / f"train-{kind}.json", 12, 0, v2)
    predict = brief.write_squad(tmp_path / f"dev-{kind}-{seed}.json", num_contexts, seed, v2)
    return {"kind": kind, "train": train, "predict": predict, **changes}


def _with_output_dirs(specs, directory):
    return [{**spec, "output_dir": str(directory / str(i))} for i, spec in enumerate(specs)]


def compare(specs, tmp_path):
    """(one device's results, two replicas') of the runs of `specs`."""
    mirrored = on_two_replicas(_with_output_dirs(specs, tmp_path / "mirrored"), tmp_path)
    return on_one_device(_with_output_dirs(specs, tmp_path / "default")), mirrored


def _windows(spec):
    """(examples, questions per context, features) of a spec's predict file."""
    task = brief.squad_task(None, spec["predict"], spec["kind"] == "v2")
    data = task.squad_features("predict")
    contexts = json.loads(Path(spec["predict"]).read_text())["data"][0]["paragraphs"]
    return data.examples, [len(c["qas"]) for c in contexts], data.features


@pytest.mark.slow  # trains twice (one device, and two replicas in a subprocess): ~30 s
@pytest.mark.parametrize("kind, num_contexts, seed", [("v1", 6, 1), ("v2", 5, 2)])
def test_squad_on_two_replicas_gives_the_one_device_result(tmp_path, kind, num_contexts, seed):
    spec = squad_spec(tmp_path, kind, num_contexts, seed)
    examples, questions, features = _windows(spec)
    # Several questions a context, contexts over several windows, a padded last batch.
    assert max(questions) > 1 and len(features) > len(examples)
    assert len(features) % 6 and len(features) % 4  # eval batches of 6, predict of 4
    if kind == "v2":
        assert 0 < sum(e.is_impossible for e in examples) < len(examples)
    [expected], [actual] = compare([spec], tmp_path)
    assert_same_run(expected, actual)
    assert len(expected["predictions"]["unique_ids"]) == len(features)
    assert len(expected["files"]["predictions.json"]) == len(examples)
    if kind == "v2":
        assert "null_odds.json" in actual["files"]
        assert (
            abs(expected["metrics"]["best_f1_thresh"] - actual["metrics"]["best_f1_thresh"])
            < TOLERANCE
        )


@pytest.mark.slow  # trains twice (one device, and two replicas in a subprocess): ~25 s
def test_race_on_two_replicas_gives_the_one_device_result(tmp_path):
    data_dir = write_race(tmp_path / "race", {"train": 20, "dev": 7, "test": 5}, seed=0)
    spec = {"kind": "race", "data_dir": data_dir}  # dev 14 in batches of 6, test 10 of 4
    [expected], [actual] = compare([spec], tmp_path)
    assert_same_run(expected, actual)
    assert expected["metrics"]["num_examples"] == 14
    assert np.shape(actual["predictions"]["logits"]) == (10, 4)
    assert len(actual["files"]["predictions.json"]) == 10


@pytest.mark.slow  # trains 2 brief runs twice, 2 failing starts: ~45 s
def test_tiny_sets_on_two_replicas(tmp_path):
    """A dev set of 1 example (fewer than the replicas) and predict sets of 1 more than a
    multiple of the global batch are scored exactly: no padding row is counted or written.
    An eval or predict batch the replicas do not divide, given explicitly, is a one-line
    error naming the flag."""
    data_dir = write_race(tmp_path / "race", {"train": 20, "dev": 1, "test": 9}, seed=1)
    middle = {"middle_only": True}
    specs = [
        {**squad_spec(tmp_path, "v2", 1, 4), "steps": 3},  # 1 question, in 5 windows
        {"kind": "race", "data_dir": data_dir, "steps": 3, "task": middle},  # dev 1, test 9
    ]
    errors = [
        {**specs[1], "task": {**middle, "eval_batch_size": 5}, "error": True},
        {**specs[1], "task": {**middle, "predict_batch_size": 5}, "error": True},
    ]
    mirrored = on_two_replicas(_with_output_dirs(specs + errors, tmp_path / "mirrored"), tmp_path)
    expected = on_one_device(_with_output_dirs(specs, tmp_path / "default"))
    for one, two in zip(expected, mirrored[:2], strict=True):
        assert_same_run(one, two)
    examples, _, features = _windows(specs[0])
    assert len(examples) == 1 and len(features) == 5  # predict batches of 4
    squad, race = mirrored[:2]
    assert squad["metrics"]["total"] == 1 and len(squad["files"]["null_odds.json"]) == 1
    assert len(squad["predictions"]["unique_ids"]) == 5
    assert race["metrics"]["num_examples"] == 1
    assert len(race["files"]["predictions.json"]) == 9
    assert np.shape(race["predictions"]["logits"]) == (9, 4)
    flags = ("--eval_batch_size=5 must", "--predict_batch_size=5 must")
    for error, flag in zip(mirrored[2:], flags, strict=True):
        message = error["error"]
        assert message.startswith("InputError") and flag in message and "\n" not in message
