"""What a writer killed midway leaves under its temporary name is removed by the next write
of the same file, once that writer's process has ended; a running writer's file, another
host's and a name without a writer are left alone."""

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from albert import fileio
from albert.data import features as feature_lib

REPO = Path(__file__).resolve().parents[2]
SHARED_GLUE = REPO.parent / "shared" / "data" / "glue"
SPM_MODEL = str(REPO / "tests" / "fixtures" / "tokenizer" / "tiny.model")
# Writes the file named by argv[1] until it reads a line: prints its temporary name first.
_WRITER = textwrap.dedent("""
    import sys
    from albert import fileio
    with fileio.atomic_path(sys.argv[1]) as temporary:
        with open(temporary, "wb") as f:
            f.write(b"the writer's ")
            print(temporary, flush=True)
            sys.stdin.readline()
            f.write(b"whole file")
""")


def _dead_pid():
    """The pid of a process of this host that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _leftover(path, pid, host=None):
    """A temporary of `path` as a writer `pid` on `host` (this one by default) names it."""
    host = fileio._host() if host is None else host
    leftover = path.parent / f".{path.name}{fileio.TEMPORARY_MARK}{'ab' * 16}.{pid}.{host}"
    leftover.write_bytes(b"half a file")
    return leftover


def _kill_midway(call, path):
    """Runs `call(path)` in a Python process that ends during the write (os._exit inside
    the block), as a kill would; returns what it left in the folder."""
    script = textwrap.dedent(f"""
        import os
        from albert import fileio
        with fileio.{call}({str(path)!r}) as temporary:
            if "directory" in {call!r}:
                os.makedirs(temporary)
                temporary = os.path.join(temporary, "saved_model.pb")
            with open(temporary, "wb") as f:
                f.write(b"half")
            os._exit(9)
    """)
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    return sorted(path.parent.glob(f".{path.name}{fileio.TEMPORARY_MARK}*"))


def test_a_killed_writers_file_is_removed_by_the_next_write(tmp_path, absl_caplog):
    path = tmp_path / "eval_results.txt"
    path.write_text("old\n")
    [leftover] = _kill_midway("atomic_path", path)
    assert path.read_text() == "old\n"
    fileio.write_text(str(path), "new\n")
    assert path.read_text() == "new\n" and not leftover.exists()
    assert f"Removing {leftover}, left by a write killed midway." in absl_caplog.text
    assert list(tmp_path.iterdir()) == [path]


def test_a_killed_writers_folder_is_removed_by_the_next_export(tmp_path):
    path = tmp_path / "export"
    [leftover] = _kill_midway("atomic_directory", path)
    assert leftover.is_dir()
    with fileio.atomic_directory(str(path)) as temporary:
        Path(temporary).mkdir()
    assert not leftover.exists() and list(tmp_path.iterdir()) == [path]


def test_files_of_running_writers_other_hosts_and_unnamed_writers_stay(tmp_path):
    path = tmp_path / "train.tfrecord"
    running = _leftover(path, pid=os.getpid())
    elsewhere = _leftover(path, pid=_dead_pid(), host="another-host.example")
    unnamed = path.parent / f".{path.name}{fileio.TEMPORARY_MARK}{'cd' * 16}"
    unnamed.write_bytes(b"written before names carried a writer")
    dead = _leftover(path, pid=_dead_pid())
    assert fileio.dead_writers_temporaries(str(path)) == [str(dead)]
    fileio.write_text(str(path), "whole")
    assert running.exists() and elsewhere.exists() and unnamed.exists()
    assert not dead.exists()


def test_a_killed_feature_cache_write_is_cleaned_when_the_cache_is_made(tmp_path):
    path = tmp_path / "features" / "mrpc_train.tfrecord"
    path.parent.mkdir()
    dead = _leftover(path, pid=_dead_pid())
    features = [{"input_ids": [i, 1], "label_ids": i % 2} for i in range(4)]
    cached = feature_lib.load_or_create_features(str(path), lambda: features)
    assert cached.num_examples == 4 and not dead.exists()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".json"]


@pytest.mark.parametrize("pid, alive", [("1", True), ("not-a-pid", True), ("", True)])
def test_a_pid_that_cannot_be_checked_counts_as_running(pid, alive):
    assert fileio.process_is_alive(pid) is alive
    assert fileio.process_is_alive(_dead_pid()) is False


def _can_unshare_pids():
    command = ["unshare", "--pid", "--fork", "--mount-proc", "true"]
    with contextlib.suppress(OSError):
        return subprocess.run(command, capture_output=True).returncode == 0
    return False


@pytest.mark.skipif(not _can_unshare_pids(), reason="no `unshare --pid` (needs root on Linux)")
def test_a_running_writer_of_another_pid_namespace_keeps_its_file(tmp_path):
    # Containers sharing the host's name (host networking) number processes apart: from a
    # new pid namespace, this host's running writer has a pid that no process there has.
    path = tmp_path / "features" / "train.tfrecord"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    temporary = Path(writer.stdout.readline().strip())
    cleaner = f"from albert import fileio; fileio.write_text({str(path)!r}, 'other')"
    command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", cleaner]
    try:
        subprocess.run(command, check=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
        kept = temporary.exists()
    finally:
        writer.communicate("go\n", timeout=60)
    assert kept and writer.returncode == 0
    assert path.read_bytes() == b"the writer's whole file"


def test_a_name_too_long_to_carry_its_writer_is_still_written(tmp_path):
    # 215 bytes: its temporary fits in 255 bytes only without the writer's pid and host.
    path = tmp_path / ("p" * 206 + ".tfrecord")
    fileio.write_text(str(path), "whole")
    assert path.read_text() == "whole" and list(tmp_path.iterdir()) == [path]
    writer = f".{os.getpid()}.{fileio._host()}"
    assert fileio.temporary_path(str(tmp_path / "short")).endswith(writer)


def test_a_folder_moved_aside_by_a_killed_swap_stays_until_a_new_one_is_in_place(tmp_path):
    path = tmp_path / "export"
    with fileio.atomic_directory(str(path)) as temporary:
        Path(temporary).mkdir()
        (Path(temporary) / "saved_model.pb").write_text("v1")
    # Killed between its two renames: v1 moved aside, v2 not yet at `path`.
    script = textwrap.dedent(f"""
        import os
        import tensorflow as tf
        from albert import fileio
        rename = tf.io.gfile.rename
        renames = []
        def rename_then_die(source, target, overwrite=False):
            if renames:
                os._exit(9)
            renames.append(source)
            rename(source, target, overwrite)
        tf.io.gfile.rename = rename_then_die
        with fileio.atomic_directory({str(path)!r}) as temporary:
            os.makedirs(temporary)
            with open(os.path.join(temporary, "saved_model.pb"), "w") as f:
                f.write("v2")
    """)
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    assert not path.exists()
    with pytest.raises(RuntimeError), fileio.atomic_directory(str(path)) as temporary:
        raise RuntimeError("the next export fails")
    saved = sorted(p.read_text() for p in tmp_path.glob(".export.tmp-*/saved_model.pb"))
    assert saved == ["v1", "v2"]
    with fileio.atomic_directory(str(path)) as temporary:
        Path(temporary).mkdir()
        (Path(temporary) / "saved_model.pb").write_text("v3")
    assert list(tmp_path.iterdir()) == [path] and (path / "saved_model.pb").read_text() == "v3"


def test_off_posix_no_process_is_signalled_and_every_writer_counts_as_running(monkeypatch):
    # On Windows os.kill(pid, 0) is TerminateProcess: it would end the writer, or whatever
    # process now has a dead writer's pid, instead of checking it.
    dead, signalled = _dead_pid(), []
    monkeypatch.setattr(os, "kill", lambda *args: signalled.append(args))
    monkeypatch.setattr(os, "name", "nt")
    alive = fileio.process_is_alive(dead)
    monkeypatch.undo()  # before pytest reports: it reads os.name
    assert alive is True and signalled == []


# Caches MRPC's training features in argv[1], SIGKILLed by the kernel after 2 records.
_KILLED_CACHE = textwrap.dedent(f"""
    import os, signal, sys
    import tensorflow as tf
    from albert import fileio
    from albert.data import glue
    from albert.tokenization import FullTokenizer

    class KilledWriter(tf.io.TFRecordWriter):
        def __init__(self, path):
            super().__init__(path)
            self.path, self.records = path, 0

        def write(self, record):
            super().write(record)
            self.records += 1
            if fileio.is_temporary(self.path) and self.records == 2:
                self.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    tf.io.TFRecordWriter = KilledWriter
    tokenizer = FullTokenizer(spm_model_file={SPM_MODEL!r})
    glue.load_features("mrpc", {str(SHARED_GLUE)!r}, "train", tokenizer, 32, sys.argv[1])
""")


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_GLUE.is_dir(), reason="shared GLUE sample absent")
def test_a_feature_cache_killed_by_sigkill_is_cleaned_and_rebuilt_whole(tmp_path):
    from albert.data import glue
    from albert.tokenization import FullTokenizer

    def cache(directory):
        tokenizer = FullTokenizer(spm_model_file=SPM_MODEL)
        cached = glue.load_features("mrpc", str(SHARED_GLUE), "train", tokenizer, 32, directory)
        return cached, [{k: v.numpy().tolist() for k, v in f.items()} for f in cached.dataset]

    env = dict(os.environ, PYTHONPATH=str(REPO))
    killed = subprocess.run([sys.executable, "-c", _KILLED_CACHE, str(tmp_path)], env=env)
    assert killed.returncode == -9
    [leftover] = [p for p in tmp_path.iterdir()]
    assert fileio.is_temporary(leftover.name) and leftover.stat().st_size > 0
    cached, features = cache(str(tmp_path))
    assert not cached.from_cache and not leftover.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        Path(cached.path).name,
        Path(cached.path).name + ".json",
    ]
    assert features == cache(str(tmp_path / "uninterrupted"))[1] and len(features) == 6


def test_a_name_of_many_bytes_but_fewer_characters_is_still_written(tmp_path):
    # 100 "é" are 200 bytes: the writer's pid and host would push the temporary past 255
    # bytes though it has fewer than 255 characters; the limit is on bytes.
    path = tmp_path / ("é" * 100 + ".txt")
    fileio.write_text(str(path), "whole")
    assert path.read_text() == "whole" and list(tmp_path.iterdir()) == [path]


def test_a_dead_writer_on_a_host_named_with_dots_is_recognised(tmp_path, monkeypatch):
    # Host names are often fully qualified: the dots after the pid belong to the host.
    monkeypatch.setattr(fileio, "_host", lambda: "worker-3.pool.example.com-pidns4026531836")
    path = tmp_path / "train.tfrecord"
    dead = _leftover(path, pid=_dead_pid())
    assert fileio.dead_writers_temporaries(str(path)) == [str(dead)]
