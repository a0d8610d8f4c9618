"""--do_eval alone under MultiWorkerMirroredStrategy (two local worker processes, TF_CONFIG on
loopback): every worker predicts with the same final weights, and the chief removes the
evaluated checkpoints the original's eval loop removes.

The chief evaluates every saved checkpoint and writes the best one as `model.ckpt-best`
after each; the other workers then load the final weights from that file. A worker that read
it before the chief had written it (here the chief's write is slowed down, as a large
checkpoint copied on GCS would be) loaded the previous best: its replicas predicted with
other weights than the chief's, and the prediction files mixed both.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import synthetic_glue as synthetic

from tests.helpers import free_ports, scalar_tags

# Slow tier: a fine-tuning run, then two worker processes evaluate together (~40 s).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

# Each worker: the chief takes 3 s to write model.ckpt-best, and every checkpoint evaluated
# beats the one before (its metric is its step), so the last one is the final weights.
_WORKER = """
import sys, time
from albert.training import checkpointing, loop, strategy

keep_best = loop.keep_best

def slow_keep_best(task, model, output_dir, metrics, path):
    time.sleep(3)
    step = float(checkpointing.checkpoint_step(path))
    keep_best(task, model, output_dir, {**metrics, task.best_metric: step}, path)

loop.keep_best = slow_keep_best
sys.argv = ["run_classifier.py", *sys.argv[1:]]
from albert.run_classifier import run
run()
"""


def _run_workers(commands, timeout):
    """Runs `commands[i]` as worker i of a local cluster to the end; returns the processes
    and their stderr."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(len(commands))]}
    workers = []
    for index, command in enumerate(commands):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
            TF_CPP_MIN_LOG_LEVEL="3",
            PYTHONPATH=str(REPO),
        )
        workers.append(
            subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        )
    try:
        return workers, [worker.communicate(timeout=timeout)[1] for worker in workers]
    finally:
        for worker in workers:
            worker.kill()


def test_every_worker_loads_the_best_checkpoint_the_chief_wrote(tmp_path):
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=64, num_dev=20, num_test=4)
    config = synthetic.write_config(tmp_path / "config.json")
    output_dir = tmp_path / "out"
    run_flags = [
        *synthetic.tiny_run_flags(data_dir, output_dir, config, "sst-2"),
        f"--spm_model_file={synthetic.SPM_MODEL}",
    ]
    # Checkpoints 2, 4 and 6, none evaluated.
    synthetic.run_classifier(
        *run_flags, "--train_step=6", "--save_checkpoints_steps=2", "--do_train", "--nodo_eval"
    )

    command = [sys.executable, "-c", _WORKER, *run_flags, "--strategy=multi_worker"]
    workers, logs = _run_workers([[*command, "--nodo_train", "--do_eval"]] * 2, timeout=300)
    loaded = []
    for worker, log in zip(workers, logs, strict=True):
        assert worker.returncode == 0, log[-3000:]
        loaded.append(re.findall(r"Final weights: (\S+) \(global step (\d+)\)", log))
    assert loaded[0] == [(str(output_dir / "model.ckpt-best"), "6")]
    assert loaded[1] == loaded[0]
    # The chief removed checkpoint 2 (evaluated, not the best, two newer), as the original,
    # while the other worker waited: it evaluated every checkpoint and read the final weights.
    assert sorted(p.name for p in output_dir.glob("model.ckpt-*.index")) == [
        "model.ckpt-4.index",
        "model.ckpt-6.index",
        "model.ckpt-best.index",
    ]
    # The eval scalars of checkpoints 2, 4 and 6 come from the chief alone: one event file.
    assert len(list((output_dir / "eval").glob("events.out.tfevents.*"))) == 1
    assert {"accuracy", "loss"} <= scalar_tags(output_dir / "eval")


def test_workers_that_see_different_checkpoints_stop(tmp_path):
    """Each worker reads its own --output_dir (a local disk on each machine, simulated by
    two folders): the chief finds checkpoints 2 and 4, worker 1 none. Both must stop at
    once, saying why, rather than the chief evaluating checkpoints while worker 1 waits for
    it elsewhere (the two would pair up collectives of different passes)."""
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=64, num_dev=20, num_test=4)
    config = synthetic.write_config(tmp_path / "config.json")
    flags = [f"--spm_model_file={synthetic.SPM_MODEL}", "--strategy=multi_worker"]
    synthetic.run_classifier(
        *synthetic.tiny_run_flags(data_dir, tmp_path / "out0", config, "sst-2"),
        "--train_step=4",
        "--save_checkpoints_steps=2",
        "--do_train",
        "--nodo_eval",
    )
    commands = [
        [
            sys.executable,
            "-m",
            "albert.run_classifier",
            *synthetic.tiny_run_flags(data_dir, tmp_path / f"out{index}", config, "sst-2"),
            *flags,
            "--nodo_train",
            "--do_eval",
        ]
        for index in range(2)
    ]
    workers, logs = _run_workers(commands, timeout=150)
    for index, (worker, log) in enumerate(zip(workers, logs, strict=True)):
        assert worker.returncode == 2, log[-3000:]
        assert (
            f"The workers do not share --output_dir={tmp_path / f'out{index}'}: worker 1 "
            "cannot read the file the chief (worker 0) wrote there"
        ) in log, log[-3000:]
    assert not (tmp_path / "out0" / "eval_results.txt").exists()
