"""One run per --output_dir: a live holder stops a second run with one sentence naming it; a
lock left by a dead process on this host is taken over with a warning."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from absl import logging as absl_logging
from test_resume_damaged_checkpoint import tiny_pretraining_run

from albert.training.run_lock import LOCK_FILE, OutputDirLockedError, output_dir_lock

REPO = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
from albert.training.run_lock import output_dir_lock
with output_dir_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes stdin
"""


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _snapshot(directory):
    return {p: p.read_bytes() for p in Path(directory).rglob("*") if p.is_file()}


@pytest.mark.slow
def test_a_second_run_on_a_held_output_dir_stops_naming_the_first(tmp_path):
    output_dir = tmp_path / "run"
    tiny_pretraining_run(tmp_path, output_dir, num_train_steps=4)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(output_dir)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        before = _snapshot(output_dir)
        with pytest.raises(OutputDirLockedError) as error:
            tiny_pretraining_run(tmp_path, output_dir, num_train_steps=8)
        message = str(error.value)
        assert message.startswith(
            f"--output_dir={output_dir} is in use by another run (host {socket.gethostname()}, "
            f"pid {holder.pid}, started "
        )
        assert message.endswith(
            f"); wait for it to finish, use another --output_dir, or delete "
            f"{output_dir / LOCK_FILE} if that run is dead."
        )
        assert "\n" not in message
        assert _snapshot(output_dir) == before  # nothing trained, nothing written
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert not (output_dir / LOCK_FILE).exists()  # the holder released it
    tiny_pretraining_run(tmp_path, output_dir, num_train_steps=8)  # now it runs
    assert (output_dir / "model.ckpt-8.index").exists()


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path, caplog):
    lock = tmp_path / LOCK_FILE
    pid = _dead_pid()
    lock.write_text(f"host = {socket.gethostname()}\npid = {pid}\nstarted = yesterday\n")
    absl_logging.get_absl_logger().propagate = True
    with caplog.at_level("WARNING"), output_dir_lock(str(tmp_path)):
        assert f"pid = {os.getpid()}\n" in lock.read_text()
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"Taking over the stale lock {lock} of a dead run (host {socket.gethostname()}, "
        f"pid {pid}, started yesterday)."
    ]
    assert not lock.exists()


def test_a_lock_from_another_host_is_refused(tmp_path):
    lock = tmp_path / LOCK_FILE
    text = "host = other-host\npid = 1\nstarted = 2026-11-26T00:00:00+00:00\n"
    lock.write_text(text)
    with pytest.raises(OutputDirLockedError, match=r"\(host other-host, pid 1, started 2026-"):
        with output_dir_lock(str(tmp_path)):
            pass
    assert lock.read_text() == text


def test_the_lock_is_reentrant_within_a_process(tmp_path):
    with output_dir_lock(str(tmp_path)):
        with output_dir_lock(str(tmp_path)):
            pass
        assert (tmp_path / LOCK_FILE).exists()
    assert not (tmp_path / LOCK_FILE).exists()


def _ram_lock(name, text):
    """(output_dir, its lock file) on ram://, the lock file holding `text`."""
    import tensorflow as tf

    output_dir = f"ram://lock_test/{name}"
    tf.io.gfile.makedirs(output_dir)
    with tf.io.gfile.GFile(f"{output_dir}/{LOCK_FILE}", "w") as f:
        f.write(text)
    return output_dir, f"{output_dir}/{LOCK_FILE}"


def test_on_a_non_local_filesystem_the_lock_is_best_effort(tmp_path):
    import tensorflow as tf

    alive = f"host = {socket.gethostname()}\npid = {os.getppid()}\nstarted = now\n"
    output_dir, lock = _ram_lock("run", alive)
    with pytest.raises(OutputDirLockedError, match=f"pid {os.getppid()}, started now"):
        with output_dir_lock(output_dir):
            pass
    with tf.io.gfile.GFile(lock, "w") as f:
        f.write(alive.replace(str(os.getppid()), str(_dead_pid())))
    with output_dir_lock(output_dir):
        with tf.io.gfile.GFile(lock) as f:
            assert f"pid = {os.getpid()}\n" in f.read()
    assert not tf.io.gfile.exists(lock)


def test_on_a_non_local_filesystem_another_containers_lock_is_refused():
    # A container sharing this host's name (host networking) numbers its processes apart:
    # its running holder's pid may be free here, so it cannot be checked from here.
    import tensorflow as tf

    holder = f"host = {socket.gethostname()}\npid = {_dead_pid()}\npid_namespace = pidns1\n"
    output_dir, lock = _ram_lock("container", holder)
    with pytest.raises(OutputDirLockedError, match="in another container, so not checked"):
        with output_dir_lock(output_dir):
            pass
    with tf.io.gfile.GFile(lock) as f:
        assert f.read() == holder


def test_a_worker_that_does_not_own_the_directory_takes_no_lock(tmp_path):
    # A non-chief worker of a multi-worker run: the chief holds the lock for the run.
    lock = tmp_path / LOCK_FILE
    text = "host = other-host\npid = 1\nstarted = 2026-11-26T00:00:00+00:00\n"
    lock.write_text(text)
    with output_dir_lock(str(tmp_path), enabled=False):
        assert lock.read_text() == text
    assert lock.read_text() == text
