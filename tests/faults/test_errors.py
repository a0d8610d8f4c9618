"""One error path: every user-facing error derives from AlbertError, and the entry points print
environmental failures as one sentence naming the file and what to do."""

import errno
import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

import albert
from albert.errors import AlbertError
from albert.tasks import flags as finetuning_flags
from albert.training.failures import describe_failure, traceback_requested

REPO = Path(__file__).resolve().parents[2]
SPM_MODEL = REPO / "tests" / "fixtures" / "tokenizer" / "tiny.model"


def _albert_modules():
    for info in pkgutil.walk_packages(albert.__path__, "albert."):
        # Entry modules parse flags at import; the Beam pipeline needs apache_beam.
        if info.name.split(".")[-1].startswith("run_") or "beam" in info.name:
            continue
        yield importlib.import_module(info.name)


def test_every_value_error_class_derives_from_albert_error():
    # ValueError-based classes are the user-facing ones (quickstart's StepError, a control-flow
    # exception whose step has printed its own error, is not).
    classes = {
        f"{module.__name__}.{name}": value
        for module in _albert_modules()
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, ValueError)
        and name.endswith("Error")
        and value.__module__ == module.__name__
    }
    assert len(classes) >= 20, sorted(classes)
    assert [name for name, cls in classes.items() if not issubclass(cls, AlbertError)] == []


def test_project_errors_are_printed_as_they_are():
    assert describe_failure(AlbertError("--x is required.")) == "--x is required."


def test_data_loss_names_the_file_and_says_rebuild():
    error = tf.errors.DataLossError(
        None, None, "Unable to open table file /runs/out/model.ckpt-5.index: DATA_LOSS: bad magic"
    )
    message = describe_failure(error)
    assert message.startswith("/runs/out/model.ckpt-5.index is corrupted or truncated (")
    assert "rebuild it" in message


def test_truncated_records_read_through_tf_data(tmp_path):
    path = str(tmp_path / "train.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(4):
            writer.write(b"x" * 50)
    Path(path).write_bytes(Path(path).read_bytes()[:-9])
    with pytest.raises(tf.errors.DataLossError) as caught:
        list(tf.data.TFRecordDataset(path))
    message = describe_failure(caught.value)
    assert message.startswith(
        "A TFRecord, feature-cache or checkpoint file this run reads is corrupted or truncated "
        "(truncated record at"
    )
    assert "function_node" not in message and "[Op:" not in message


def test_a_corrupted_record_read_inside_a_tf_function_says_what_is_wrong():
    # A training step's error starts with "Graph execution error:" and the Python stack that
    # defined the node (as run_pretraining printed it); the one-liner showed only that line.
    error = tf.errors.DataLossError(
        None,
        None,
        "Graph execution error:\n\nDetected at node IteratorGetNext defined at (most recent "
        'call last):\n  File "run_pretraining.py", line 12, in <module>\n\n  File '
        '"albert/training/steps.py", line 9, in step\n\ncorrupted record at 5000\n\t '
        "[[{{node IteratorGetNext}}]] [Op:__inference_step_21]",
    )
    message = describe_failure(error)
    assert "is corrupted or truncated (corrupted record at 5000); rebuild it" in message


def test_full_disk():
    error = OSError(errno.ENOSPC, "No space left on device", "/out/eval_results.txt")
    assert describe_failure(error) == (
        "No space left on the disk while writing (/out/eval_results.txt); free some space or "
        "point --output_dir (and --cached_dir) at a disk with room, then rerun to resume."
    )


@pytest.mark.parametrize(
    "error, reason",
    [
        (PermissionError(errno.EACCES, "Permission denied", "/ro/out"), "is not writable"),
        (OSError(errno.EROFS, "Read-only file system", "/ro/out"), "is on a read-only file"),
        (
            tf.errors.PermissionDeniedError(None, None, "/ro/out; Permission denied"),
            "is not writable",
        ),
    ],
)
def test_read_only_output(error, reason):
    message = describe_failure(error)
    assert message.startswith(f"/ro/out {reason}")
    assert "(--output_dir, --output_file or --output) at a folder you can write to" in message


def test_a_file_where_a_folder_belongs(tmp_path):
    # --output_dir (or --cached_dir) naming an existing file: one line, not a traceback.
    existing = tmp_path / "out"
    existing.write_text("")
    with pytest.raises(tf.errors.FailedPreconditionError) as caught:
        tf.io.gfile.makedirs(str(existing / "features"))
    expected = f"A folder this run writes ({existing}) is an existing file"
    assert (describe_failure(caught.value) or "").startswith(expected)
    with pytest.raises(NotADirectoryError) as caught:
        os.makedirs(existing / "features")
    assert (describe_failure(caught.value) or "").startswith(
        f"A folder this run writes ({existing / 'features'}) is an existing file, or lies under one"
    )


def test_a_relative_path_is_not_named_by_its_tail():
    # TensorFlow names the file as given: "ro/sub/x" must not become the file "/sub/x".
    error = tf.errors.PermissionDeniedError(None, None, "ro/sub/x.tfrecord; Read-only file system")
    message = describe_failure(error)
    assert message.startswith("The output location is on a read-only file system"), message
    absolute = tf.errors.PermissionDeniedError(None, None, "open '/ro/x': Permission denied")
    assert describe_failure(absolute).startswith("/ro/x is not writable")


def test_ids_beyond_the_vocabulary():
    table = tf.zeros((10, 3))
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        tf.gather(table, tf.constant([[1, 12]]))
    assert describe_failure(caught.value).startswith(
        "A token id (12) is outside the model's vocabulary of 10 (the config's vocab_size)"
    )


def _real_out_of_memory(jit_compile):
    """What TensorFlow raises for a 4 TiB tensor: the allocator's "OOM when allocating tensor
    with shape[...]", or XLA's "Out of memory while trying to allocate 4.00TiB."."""

    @tf.function(jit_compile=jit_compile)
    def fill(n):
        return tf.zeros([n, 2**20]) + 1.0

    with pytest.raises(tf.errors.ResourceExhaustedError) as caught:
        fill(tf.constant(2**20)) if jit_compile else tf.zeros([2**40])
    return caught.value


@pytest.mark.parametrize("jit_compile", [False, True], ids=["allocator", "xla"])
def test_out_of_memory_says_which_flags_shrink_it(jit_compile):
    message = describe_failure(_real_out_of_memory(jit_compile))
    assert message.startswith("The device ran out of memory (")
    assert "OOM when allocating tensor with shape[1099511627776]" in message or (
        "Out of memory while trying to allocate 4.00TiB" in message
    )
    assert "--gradient_accumulation_steps" in message and "--train_batch_size" in message
    assert "\n" not in message and "function_node" not in message and "allocator" not in message


# What a MirroredStrategy over 2 devices raised (TensorFlow 2.21, 2 logical CPUs) when a
# tensor did not fit on either: one "(i) RESOURCE_EXHAUSTED:" part a replica, after the Python
# stacks that defined the nodes; its first line says only "2 root error(s) found.".
_TWO_REPLICAS_OUT_OF_MEMORY = (
    "Graph execution error:\n\nDetected at node replica_1/random_uniform/RandomUniform defined "
    'at (most recent call last):\n  File "train.py", line 12, in <lambda>\n\nDetected at node '
    'random_uniform/RandomUniform defined at (most recent call last):\n  File "train.py", line '
    "12, in <lambda>\n\n2 root error(s) found.\n  (0) RESOURCE_EXHAUSTED:  OOM when allocating "
    "tensor with shape[549755813889] and type float on /job:localhost/replica:0/task:0/device:"
    "CPU:1 by allocator mklcpu\n\t [[{{node replica_1/random_uniform/RandomUniform}}]]\nHint: "
    "If you want to see a list of allocated tensors when OOM happens, add "
    "report_tensor_allocations_upon_oom to RunOptions for current allocation info. This isn't "
    "available when running in Eager mode.\n\n  (1) RESOURCE_EXHAUSTED:  OOM when allocating "
    "tensor with shape[549755813889] and type float on /job:localhost/replica:0/task:0/device:"
    "CPU:0 by allocator mklcpu\n\t [[{{node random_uniform/RandomUniform}}]]\nHint: If you "
    "want to see a list of allocated tensors when OOM happens, add "
    "report_tensor_allocations_upon_oom to RunOptions for current allocation info. This isn't "
    "available when running in Eager mode.\n\n0 successful operations.\n0 derived errors "
    "ignored. [Op:__inference_g_37]"
)


def test_out_of_memory_on_several_replicas_names_the_tensor():
    error = tf.errors.ResourceExhaustedError(None, None, _TWO_REPLICAS_OUT_OF_MEMORY)
    message = describe_failure(error)
    assert message.startswith(
        "The device ran out of memory (OOM when allocating tensor with shape[549755813889] and "
        "type float on /job:localhost/replica:0/task:0/device:CPU:1). ALBERT's activations"
    )
    assert "\n" not in message and "root error" not in message


def test_xla_gpu_allocation_failure_is_out_of_memory():
    # XLA's GPU allocator words it differently from TensorFlow's BFC allocator.
    text = "Failed to allocate request for 12.00GiB (12884901888B) on device ordinal 0"
    message = describe_failure(tf.errors.ResourceExhaustedError(None, None, text))
    assert message.startswith(f"The device ran out of memory ({text}).")


def test_a_resource_quota_is_not_called_out_of_memory():
    quota = tf.errors.ResourceExhaustedError(None, None, "Quota exceeded for quota metric")
    assert describe_failure(quota) is None


# What a surviving MultiWorkerMirroredStrategy worker raised when the other one was SIGKILLed
# mid-run (in a step, a checkpoint barrier, an evaluation): ~100 lines of traceback before.
_PEER_LOST_ERRORS = [
    "{{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/"
    "replica:0/task:1/device:CPU:0}} Collective ops is aborted by: recvmsg:Connection reset "
    "by peer\nAdditional GRPC error information from remote target /job:worker/replica:0/"
    "task:0 while calling /tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from "
    "peer  {grpc_status:14}\nThe error could be from a previous operation. Restart your "
    "program to reset. [Op:CollectiveReduceV2] name: ",
    "Graph execution error:\n\nDetected at node while/CollectiveReduceV2 defined at (most "
    'recent call last):\n  File "albert/training/steps.py", line 193, in _train_loop_fn\n\n'
    "Collective ops is aborted by: Error reported from /job:worker/task:1: The following "
    "tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1\nThe "
    "tasks have crashed.\n\t [[{{node while/CollectiveReduceV2}}]] "
    "[Op:__inference__train_loop_fn_5239]",
]


@pytest.mark.parametrize("text", _PEER_LOST_ERRORS, ids=["connection_reset", "heartbeats"])
def test_a_lost_worker_says_restart_every_worker(text):
    message = describe_failure(tf.errors.UnavailableError(None, None, text))
    assert message.startswith("Lost contact with another worker of the cluster (Collective ops")
    assert message.endswith(
        "rerun the same command on each: training resumes from the last checkpoint."
    )
    assert "\n" not in message and "function_node" not in message and ":)" not in message


def test_bugs_keep_their_traceback():
    assert describe_failure(KeyError("x")) is None
    assert describe_failure(tf.errors.InvalidArgumentError(None, None, "shapes differ")) is None


def test_entry_points_print_user_errors_in_one_line_and_keep_bugs_tracebacks(monkeypatch, capsys):
    from albert.training import flags as training_flags

    monkeypatch.setattr(sys, "argv", ["prog"])
    monkeypatch.delenv("ALBERT_TRACEBACK", raising=False)
    monkeypatch.setattr(training_flags, "quiet_python_logs", lambda: None)

    def user_error(argv):
        raise training_flags.FlagError("--output_dir is required.")

    with pytest.raises(SystemExit) as exit_info:
        training_flags.run_main(user_error)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "prog: error: --output_dir is required.\n"

    def bug(argv):
        raise KeyError("a bug")

    with pytest.raises(KeyError, match="a bug"):
        training_flags.run_main(bug)


def test_traceback_switches(monkeypatch):
    monkeypatch.delenv("ALBERT_TRACEBACK", raising=False)
    assert not traceback_requested(0) and not traceback_requested(None)
    assert traceback_requested(1)
    monkeypatch.setenv("ALBERT_TRACEBACK", "1")
    assert traceback_requested(0)


def test_vocabulary_larger_than_the_config_is_refused_up_front():
    from albert.tokenization import FullTokenizer
    from tests.helpers import tiny_config

    tokenizer = FullTokenizer(spm_model_file=str(SPM_MODEL))
    config = tiny_config(
        vocab_size=999,
        embedding_size=8,
        hidden_size=8,
        num_attention_heads=2,
        intermediate_size=8,
        num_hidden_layers=1,
        num_hidden_groups=1,
        inner_group_num=1,
        max_position_embeddings=512,
        type_vocab_size=2,
    )
    with pytest.raises(finetuning_flags.FlagError) as error:
        finetuning_flags.check_vocabulary(tokenizer, config)
    assert str(error.value) == (
        f"{SPM_MODEL} has 1000 pieces but the config's vocab_size is 999; pass the "
        "albert_config.json that goes with this vocabulary."
    )
    finetuning_flags.check_vocabulary(tokenizer, config.replace(vocab_size=1000))


def _run_classifier(*args, env=None):
    command = [
        sys.executable,
        "-m",
        "albert.run_classifier",
        "--task_name=sst-2",
        f"--spm_model_file={SPM_MODEL}",
        *args,
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, cwd=REPO)


@pytest.mark.slow
def test_cli_prints_one_line_and_keeps_files_intact(tmp_path):
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").write_text("sentence\tlabel\nA fine film .\t1\n")
    config = tmp_path / "albert_config.json"
    config.write_text('{"vocab_size": 1000, "hiden_size": 32}')
    before = config.read_bytes()
    args = (
        f"--albert_config_file={config}",
        f"--data_dir={tmp_path}",
        f"--output_dir={tmp_path / 'out'}",
        "--do_train",
    )
    result = _run_classifier(*args)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert errors == [
        f"run_classifier.py: error: {config} has an unknown key "
        "`hiden_size`; did you mean `hidden_size`?"
    ], result.stderr[-2000:]
    assert config.read_bytes() == before
    assert not (tmp_path / "out" / "albert_config.json").exists()
    # The same failure with ALBERT_TRACEBACK=1 shows where it came from.
    traced = _run_classifier(*args, env={"ALBERT_TRACEBACK": "1"})
    assert traced.returncode != 0 and "Traceback" in traced.stderr
    assert "ConfigError" in traced.stderr
