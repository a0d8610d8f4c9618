"""MultiWorkerMirroredStrategy: two local worker processes (TF_CONFIG on 127.0.0.1) complete a
short run (the chief-killed test's reference run); only the chief writes checkpoints and
summaries to output_dir; killed workers resume bit-identical to an uninterrupted two-worker
run."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import synthetic_pretraining as synthetic
import tensorflow as tf

from albert.training.checkpointing import FAULT_POINT_ENV, read_key_values
from tests.helpers import free_ports

# Slow tier: two worker processes train together (~25 s a run).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _command(tmp_path, output_dir, **config_changes):
    data = synthetic.write_records(tmp_path / "train.tfrecord", 120, seed=9)
    config = synthetic.write_config(tmp_path / "config.json", **config_changes)
    return [
        sys.executable,
        str(REPO / "run_pretraining.py"),
        "--strategy=multi_worker",
        f"--albert_config_file={config}",
        f"--input_file={data}",
        f"--output_dir={output_dir}",
        "--do_train",
        "--do_eval",
        "--train_batch_size=8",
        "--eval_batch_size=8",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--num_train_steps=6",
        "--num_warmup_steps=2",
        "--learning_rate=0.01",
        "--save_checkpoints_steps=3",
        "--iterations_per_loop=3",
        "--max_eval_steps=2",
    ]


def _start_workers(command, fault_points=(None, None)):
    """Starts one process per worker on loopback ports; `fault_points[i]` sets worker i's
    ALBERT_FAULT_POINT. `command` is every worker's, or a list of one per worker."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = []
    for index, fault_point in enumerate(fault_points):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps(tf_config),
            TF_CPP_MIN_LOG_LEVEL="3",
            PYTHONPATH=str(REPO),
        )
        env.pop(FAULT_POINT_ENV, None)
        if fault_point:
            env[FAULT_POINT_ENV] = fault_point
        own = command[index] if isinstance(command[0], list) else command
        workers.append(
            subprocess.Popen(
                own, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        )
    return workers


def _finish(workers):
    """Waits for every worker; returns their logs."""
    try:
        return [worker.communicate(timeout=240)[1] for worker in workers]
    finally:
        for worker in workers:
            worker.kill()


def _assert_a_complete_run(output_dir, logs):
    """Both workers logged their strategy (the caller checks their steps); output_dir holds
    one copy of each file, the chief's, and each worker's input positions."""
    for log in logs:
        assert "Strategy multi_worker with 2 replica(s)" in log
    assert Path(tf.train.latest_checkpoint(str(output_dir))).name == "model.ckpt-6"
    reader = tf.train.load_checkpoint(str(output_dir / "model.ckpt-6"))
    assert reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 6
    assert len(list(output_dir.glob("events.out.tfevents.*"))) == 1
    assert len(list((output_dir / "eval").glob("events.out.tfevents.*"))) == 1
    assert (output_dir / "eval_results.txt").exists()
    assert (output_dir / "model.ckpt-best.index").exists()
    states = sorted(p.name for p in (output_dir / "input_state").iterdir())
    assert states == ["worker_0", "worker_1"]


def test_workers_whose_eval_data_ends_at_different_steps_stop_together(tmp_path):
    """Worker 0's eval file holds 5 batches of its share (20 records), worker 1's one (4):
    asked for 10 steps, both stop after step 5, the first global batch of padding alone
    (a worker that stopped alone would hang its peer in a collective), and the metrics are
    those of one device over the 24 records."""
    output_dir = tmp_path / "out"
    files = [
        synthetic.write_records(tmp_path / f"eval-{i}.tfrecord", count, seed=i)
        for i, count in enumerate((20, 4))
    ]
    command = _command(tmp_path, output_dir)
    command = [f for f in command if not f.startswith(("--max_eval_steps", "--num_train"))]
    command += [
        "--max_eval_steps=10",
        "--num_train_steps=3",
        f"--eval_input_file={','.join(files)}",
    ]
    workers = _start_workers(command)
    logs = _finish(workers)
    for worker, log in zip(workers, logs, strict=True):
        assert worker.returncode == 0, log[-3000:]
        assert "eval at step 3 over 5 batches" in log, log[-3000:]
    distributed = read_key_values(str(output_dir / "eval_results.txt"))

    # The same checkpoint evaluated on one device (3 batches of 8).
    one_device = tmp_path / "one_device"
    shutil.copytree(output_dir, one_device)
    (one_device / "eval_results.txt").unlink()
    one = [f for f in command if not f.startswith(("--strategy", "--output_dir", "--do_train"))]
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    run = subprocess.run(
        [*one, f"--output_dir={one_device}"], env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0 and "over 3 batches" in run.stderr, run.stderr[-3000:]
    expected = read_key_values(str(one_device / "eval_results.txt"))
    assert expected.keys() == distributed.keys() and expected["global_step"] == "3"
    for name, value in expected.items():
        assert abs(float(distributed[name]) - float(value)) < 1e-4, name


def test_a_worker_killed_before_saving_its_input_position(tmp_path):
    """Worker 1 dies after step 6, before writing its input state: the chief must not commit
    model.ckpt-6 (it would resume worker 1 on a reshuffled pass, unlike an uninterrupted
    run). The rerun resumes both positions from step 3 and keeps worker 1's input state of
    every checkpoint the chief keeps (its own list restarted empty)."""
    output_dir = tmp_path / "out"
    command = _command(tmp_path, output_dir)
    workers = _start_workers(command, fault_points=(None, "train_step:6"))
    workers[1].wait(timeout=240)
    time.sleep(5)  # the chief, unguarded, commits model.ckpt-6 within milliseconds
    workers[0].kill()
    _finish(workers)
    assert Path(tf.train.latest_checkpoint(str(output_dir))).name == "model.ckpt-3"

    workers = _start_workers(command)
    logs = _finish(workers)
    for worker, log in zip(workers, logs, strict=True):
        assert worker.returncode == 0, log[-3000:]
        assert "reshuffling the data" not in log
        assert "step 6/6" in log
    for worker in ("worker_0", "worker_1"):
        states = sorted(p.name for p in (output_dir / "input_state" / worker).glob("*.index"))
        assert states == ["ckpt-3.index", "ckpt-6.index"], worker


def test_workers_that_do_not_share_output_dir_stop_before_training(tmp_path):
    """Each worker reads its own --output_dir (a local disk on each machine, simulated by
    two folders). On a fresh run both see step 0, so only the chief's check file tells them
    apart: both must stop before the first step, saying why, rather than train together
    while worker 1 restores, on a rerun, nothing the chief saved (check_same_step would
    catch only that rerun, after a whole run's work)."""
    commands = [_command(tmp_path, tmp_path / f"out{index}") for index in range(2)]
    workers = _start_workers(commands)
    logs = _finish(workers)
    for index, (worker, log) in enumerate(zip(workers, logs, strict=True)):
        assert worker.returncode == 2, log[-3000:]
        assert (
            f"The workers do not share --output_dir={tmp_path / f'out{index}'}: worker 1 "
            "cannot read the file the chief (worker 0) wrote there"
        ) in log, log[-3000:]
        assert "step 1/" not in log
    assert tf.train.latest_checkpoint(str(tmp_path / "out0")) is None
    assert not (tmp_path / "out0" / ".albert_workers_check").exists()


def _values(prefix):
    """Every variable of a training checkpoint: weights, optimizer slots, step, rng state."""
    reader = tf.train.load_checkpoint(str(prefix))
    keys = [k for k in reader.get_variable_to_shape_map() if not k.startswith("_CHECKPOINTABLE")]
    return {k: reader.get_tensor(k) for k in keys if "save_counter" not in k}


def test_the_chief_killed_twice_resumes_bit_identical(tmp_path):
    """With dropout on, the chief is SIGKILLed after step 4 (nothing saved since step 3),
    then on the rerun while writing checkpoint 6 (every worker's input state of step 6
    written, the checkpoint not committed); its peer is killed too, as a launcher would. A
    last rerun of both ends with every variable of an uninterrupted two-worker run's
    model.ckpt-6 (weights, optimizer slots, global step, dropout random state) bit-identical.
    The reference runs alongside, and is checked as a complete two-worker run: only the
    chief writes to output_dir."""
    command = _command(tmp_path, tmp_path / "reference", hidden_dropout_prob=0.1)
    command = [f for f in command if not f.startswith("--iterations_per_loop")]
    command.append("--iterations_per_loop=1")
    reference = _start_workers(command)
    killed = [f for f in command if not f.startswith("--output_dir")]
    killed.append(f"--output_dir={tmp_path / 'killed'}")
    for fault_point in ("train_step:4", "checkpoint_write:6"):
        workers = _start_workers(killed, fault_points=(fault_point, None))
        try:
            log = workers[0].communicate(timeout=240)[1]
        finally:
            for worker in workers:  # the peer fails or waits on the dead chief's collective
                worker.kill()
            workers[1].communicate()
        assert workers[0].returncode == -9, log[-3000:]
        assert f"ALBERT_FAULT_POINT={fault_point}: killing this process" in log
    workers = _start_workers(killed) + reference
    logs = _finish(workers)
    for worker, log in zip(workers, logs, strict=True):
        assert worker.returncode == 0 and "step 6/6" in log, log[-3000:]
        assert "reshuffling the data" not in log
    assert "Resumed from" in logs[0] and "model.ckpt-3 at global step 3" in logs[0]
    _assert_a_complete_run(tmp_path / "reference", logs[2:])

    expected = _values(tmp_path / "reference" / "model.ckpt-6")
    got = _values(tmp_path / "killed" / "model.ckpt-6")
    assert expected.keys() == got.keys()
    assert any(k.startswith("rng/") for k in got) and any(k.startswith("optimizer/") for k in got)
    for key in expected:
        assert np.array_equal(expected[key], got[key]), key


def test_a_worker_waiting_for_one_that_never_started_says_so(tmp_path):
    """Only worker 0 of two starts (worker 1 failed at start-up, say): TensorFlow waits for it
    inside MultiWorkerMirroredStrategy(), and says so only in its hidden C++ INFO log. The
    waiting worker must say what it waits for and what to do."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    env = dict(
        os.environ,
        TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}),
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=str(REPO),
    )
    log = tmp_path / "worker_0.log"
    with open(log, "w") as stderr:
        worker = subprocess.Popen(
            _command(tmp_path, tmp_path / "out"), env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        deadline = time.time() + 120
        while "Waiting for the 2 tasks" not in log.read_text() and time.time() < deadline:
            assert worker.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        time.sleep(3)  # it keeps waiting
        assert worker.poll() is None
    finally:
        worker.kill()
        worker.wait()
    assert (
        "Waiting for the 2 tasks of TF_CONFIG to join the cluster (this is worker 0); if one of "
        "them failed to start, stop the others and start every worker again."
    ) in log.read_text()
