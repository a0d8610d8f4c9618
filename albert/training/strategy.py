"""The tf.distribute strategy and numeric precision a run uses, chosen from flags.

    tpu           TPUClusterResolver + TPUStrategy (`--use_tpu`, `--tpu_name`, `--master` imply it)
    mirrored      MirroredStrategy over the local GPUs (or the CPU)
    multi_worker  MultiWorkerMirroredStrategy; the cluster comes from the TF_CONFIG variable
    default       the default (no-op) strategy: one device

Every strategy runs the same training code: the loop only uses `strategy.run`, replica-context
all-reduces and `InputContext` sharding, which all of them implement.

Who writes. MultiWorkerMirroredStrategy runs one process per worker; its chief (worker 0)
writes checkpoints, summaries and results, the others write into temporary directories.
TPUStrategy on a pod slice is driven by ONE client process (TensorFlow's single-client
model: the client places the steps and the input pipelines on every host of the slice), so
that process is the chief. Started on every host of a slice (`--worker=all`), each process
would drive the whole slice and write into the same output_dir: `create_strategy` refuses to
start on any host but worker 0, and refuses `--tpu_name=local` on a slice of several hosts
(it would drive that VM's chips only), when the TPU VM says which host it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
import time
import urllib.request

import keras
import tensorflow as tf
from absl import logging

from albert import fileio
from albert.errors import AlbertError

STRATEGIES = ("tpu", "mirrored", "multi_worker", "default")
PRECISIONS = ("none", "bfloat16", "float16")
_POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


class StrategyError(AlbertError):
    """A strategy or precision setting that cannot run here."""


def resolve_strategy_name(strategy=None, use_tpu=False, tpu_name=None, master=None):
    """The strategy to use, from `--strategy` and the original's TPU flags.

    Args:
        strategy: `--strategy`, or None to choose: tpu when a TPU flag is set, multi_worker
            when TF_CONFIG names a cluster of several tasks, mirrored with several GPUs,
            otherwise default.
        use_tpu, tpu_name, master: the original's flags; any of them implies tpu.

    Returns:
        One of STRATEGIES.

    Raises:
        StrategyError: an unknown name, or a TPU flag together with a non-TPU strategy.
    """
    wants_tpu = bool(use_tpu or tpu_name or master)
    if strategy is None:
        if wants_tpu:
            return "tpu"
        if _cluster_size() > 1:
            return "multi_worker"
        return "mirrored" if len(tf.config.list_physical_devices("GPU")) > 1 else "default"
    if strategy not in STRATEGIES:
        raise StrategyError(
            f"`strategy` must be one of {', '.join(STRATEGIES)}. Received: {strategy!r}"
        )
    if wants_tpu and strategy != "tpu":
        raise StrategyError(
            f"--use_tpu/--tpu_name/--master ask for a TPU but --strategy={strategy}; "
            "drop one of them."
        )
    return strategy


def _cluster_size():
    config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
    return sum(len(tasks) for tasks in config.get("cluster", {}).values())


def _this_task():
    task = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}").get("task", {})
    return f"{task.get('type', '?')} {task.get('index', '?')}"


def create_strategy(name, tpu_name=None, tpu_zone=None, gcp_project=None, master=None):
    """Builds the strategy `name` (one of STRATEGIES).

    Args:
        name: the strategy, as `resolve_strategy_name` returns it.
        tpu_name, tpu_zone, gcp_project, master: where the TPU is (`--master` is a gRPC
            address; `--tpu_name` a Cloud TPU name, "local" on a TPU VM).

    Returns:
        A `tf.distribute.Strategy`.

    Raises:
        StrategyError: multi_worker without TF_CONFIG, no TPU to connect to, or an unknown
            name.
    """
    if name == "tpu":
        tpu = tpu_name or master or ""
        check_tpu_client(tpu)
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu=tpu, zone=tpu_zone, project=gcp_project
            )
        except (ValueError, OSError) as e:  # No name and none in the environment; no lookup.
            named = f" named {tpu!r}" if tpu else ""
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise StrategyError(
                f"No TPU to connect to{named} ({reason}); pass --tpu_name: the Cloud TPU's "
                "name (with --tpu_zone and --gcp_project), a grpc:// address, or local on a "
                "TPU VM."
            ) from None
        if (tpu_name or master) != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        if _cluster_size() < 1:
            raise StrategyError(
                "--strategy=multi_worker needs the TF_CONFIG environment variable describing "
                "the cluster and this task; set it on every worker."
            )
        # TensorFlow waits here until every task of TF_CONFIG has joined, and says so only
        # in its C++ INFO log, hidden by default: a worker that failed to start (a flag
        # error on that host, a crash) left the others waiting without a word.
        logging.info(
            "Waiting for the %d tasks of TF_CONFIG to join the cluster (this is %s); if one "
            "of them failed to start, stop the others and start every worker again.",
            _cluster_size(),
            _this_task(),
        )
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "default":
        return tf.distribute.get_strategy()
    raise StrategyError(f"`strategy` must be one of {', '.join(STRATEGIES)}. Received: {name!r}")


_METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/"


def _gce_metadata(key):
    """A TPU VM's metadata attribute (as JAX reads it), or None off Google Cloud."""
    if os.environ.get("TPU_SKIP_MDS_QUERY") is not None:
        return None
    request = urllib.request.Request(_METADATA_URL + key, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.read().decode()
    except (OSError, ValueError):
        return None


def tpu_slice_position():
    """(this VM's host index in its TPU slice, number of hosts), or None when unknown.

    From `TPU_WORKER_ID` and `TPU_WORKER_HOSTNAMES` when set (GKE, and what the TPU
    runtime reads), else the TPU VM's metadata (`agent-worker-number`,
    `worker-network-endpoints`).
    """
    index = os.environ.get("TPU_WORKER_ID")
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES")
    if index is None:
        index = _gce_metadata("agent-worker-number")
        hosts = _gce_metadata("worker-network-endpoints") if index is not None else None
    if index is None or not index.strip().isdigit():
        return None
    num_hosts = len([h for h in (hosts or "").split(",") if h.strip()]) or 1
    return int(index), num_hosts


def check_tpu_client(tpu):
    """Refuses to start a TPU run that is not the slice's one client (see the module doc).

    Args:
        tpu: `--tpu_name` (or `--master`): a TPU name, a gRPC address, "local" or "".

    Raises:
        StrategyError: this is not worker 0 of its slice, or `local` on a multi-host slice.
    """
    position = tpu_slice_position()
    if position is None:
        return
    index, num_hosts = position
    if index > 0:
        raise StrategyError(
            f"This is host {index} of a {num_hosts}-host TPU slice, but TensorFlow drives a "
            "slice from one client process: run the command on worker 0 only (gcloud "
            "compute tpus tpu-vm ssh $TPU_NAME --worker=0), not on every worker."
        )
    if tpu == "local" and num_hosts > 1:
        raise StrategyError(
            f"--tpu_name=local drives this VM's TPU chips only, but the slice has {num_hosts} "
            "hosts; pass --tpu_name=<the TPU's name> so that this client drives all of them."
        )


def set_precision(mixed_precision, strategy_name):
    """Sets Keras's global dtype policy; call before building the model.

    Args:
        mixed_precision: `--mixed_precision` (none, bfloat16, float16) or None for the default,
            bfloat16 on TPU and none elsewhere.
        strategy_name: the resolved strategy name.

    Returns:
        The precision used, one of PRECISIONS.
    """
    if mixed_precision is None:
        mixed_precision = "bfloat16" if strategy_name == "tpu" else "none"
    if mixed_precision not in PRECISIONS:
        raise StrategyError(
            f"`mixed_precision` must be one of {', '.join(PRECISIONS)}. "
            f"Received: {mixed_precision!r}"
        )
    keras.mixed_precision.set_dtype_policy(_POLICIES[mixed_precision])
    return mixed_precision


def worker_info(strategy):
    """(task index among the training workers, number of workers, whether this is the chief).

    Only MultiWorkerMirroredStrategy has several worker processes; under every other
    strategy, TPUStrategy on a pod slice included, the one process is the chief.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or task_type is None:
        return 0, 1, True
    jobs = resolver.cluster_spec().as_dict()
    has_chief = "chief" in jobs
    num_workers = len(jobs.get("worker", [])) + (1 if has_chief else 0)
    if task_type == "chief":
        return 0, num_workers, True
    index = resolver.task_id + (1 if has_chief else 0)
    return index, num_workers, index == 0


def is_chief(strategy):
    """Whether this process writes checkpoints and summaries to the output directory."""
    return worker_info(strategy)[2]


def writable_dir(output_dir, strategy):
    """Where this worker writes: `output_dir` for the chief, a temporary directory otherwise.

    Multi-worker runs need every worker to take part in saving (the save may hold
    collectives), but only one copy must land in `output_dir`, as TensorFlow's multi-worker
    guide recommends. A worker's directory is named after it and `output_dir` and emptied
    here, so a rerun after a kill (which leaves it behind, full checkpoints included)
    reclaims it instead of leaving one more. Remove it with `remove_worker_dir`.
    """
    if is_chief(strategy):
        return output_dir
    index = worker_info(strategy)[0]
    digest = hashlib.sha1(output_dir.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"albert_worker_{index}_{digest}")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, mode=0o700)
    return path


def worker_barrier(strategy):
    """A function that returns once every worker has called it, or None with one worker.

    An all-reduce across the workers' replicas: no worker gets its result before all of
    them have joined. Every worker must call it at the same points of the run.
    """
    if worker_info(strategy)[1] < 2:
        return None

    def barrier():
        joined = strategy.run(lambda: tf.constant(1.0))
        strategy.reduce(tf.distribute.ReduceOp.SUM, joined, axis=None).numpy()

    return barrier


def check_same_step(strategy, step, output_dir):
    """Raises StrategyError on every worker unless all of them see the same checkpoint.

    Each worker restores (or evaluates) the newest checkpoint of `output_dir` itself, so all
    of them must read one directory (shared storage or gs://). A worker reading another one
    (its own local disk) resumes from another step or starts over: the replicas would then
    train different weights, the chief would save a mix of them, and the workers would fall
    out of step at the end of the run (an evaluation would run a different number of passes
    on each). The steps are gathered from every worker (a collective: every worker calls
    this at the same point), so all of them stop, none left waiting.

    Args:
        strategy: the run's strategy (one worker, TPU pods included: nothing to check).
        step: the global step of the checkpoint this worker restored or found (0: none).
        output_dir: `--output_dir`, for the message.

    Raises:
        StrategyError: the workers' steps differ (on every worker).
    """
    _, num_workers, _ = worker_info(strategy)
    if num_workers < 2:
        return
    steps = _gather_workers(strategy, step, num_workers)
    if len(set(steps)) > 1:
        found = ", ".join(f"worker {i} step {s}" for i, s in enumerate(steps))
        raise StrategyError(
            f"The workers see different checkpoints in --output_dir={output_dir} ({found}; "
            "0: none): each reads a folder of its own by that name. Every worker must read "
            "and write one directory (shared storage or gs://); rerun with such an "
            "--output_dir."
        )


# The file by which `check_shared_dir` tells whether every worker reads the chief's folder.
SHARED_DIR_MARK = ".albert_workers_check"
# How long a worker that does not find the chief's file there looks again before it stops.
SHARED_DIR_WAIT_SECONDS = 10.0


def check_shared_dir(strategy, output_dir):
    """Raises StrategyError on every worker unless all of them read the chief's `output_dir`.

    `check_same_step` cannot tell a fresh run on folders of their own (each worker's local
    disk) from a fresh run on one shared folder: every worker sees step 0. So the chief
    writes a random token into `output_dir` (atomically), every worker learns it through a
    collective (which the chief joins only once the file is written), reads the file in its
    own `output_dir` (looking again for `SHARED_DIR_WAIT_SECONDS` when it finds another
    token or none), and the tokens read are gathered: a worker that finds none, or another
    run's, reads another folder. The chief then removes the file. Every worker calls this at
    the same point, before anything is restored or written, so all of them stop, none left
    waiting.

    Args:
        strategy: the run's strategy (one worker, TPU pods included: nothing to check).
        output_dir: `--output_dir`.

    Raises:
        StrategyError: some worker does not read the chief's folder (on every worker).
    """
    _, num_workers, chief = worker_info(strategy)
    if num_workers < 2:
        return
    path = os.path.join(output_dir, SHARED_DIR_MARK)
    token, failure = (secrets.randbits(62) + 1 if chief else 0), None  # 0 is "no file"
    if chief:
        try:
            fileio.write_text(path, str(token))
        except (tf.errors.OpError, OSError) as error:  # a full disk, no permission
            token, failure = -1, error  # the others must still join the collective
    written = _gather_workers(strategy, token, num_workers)[0]  # worker 0 is the chief
    if written == -1:
        raise StrategyError(
            f"The chief (worker 0) cannot write into --output_dir={output_dir}"
            + (f": {failure}" if failure else ".")
        )
    found = _read_token(path)
    # Shared file systems that cache what a folder holds (NFS) may show the file late.
    waited = 0.0
    while found != written and waited < SHARED_DIR_WAIT_SECONDS:
        time.sleep(0.5)
        waited += 0.5
        found = _read_token(path)
    seen = _gather_workers(strategy, found, num_workers)
    if chief:
        fileio.remove_quietly(path)
    apart = [index for index, token_read in enumerate(seen) if token_read != written]
    if apart:
        names = ", ".join(f"worker {index}" for index in apart)
        raise StrategyError(
            f"The workers do not share --output_dir={output_dir}: {names} cannot read the "
            f"file the chief (worker 0) wrote there, so each reads a folder of its own by "
            "that name. Every worker must read and write one directory (shared storage or "
            "gs://); rerun with such an --output_dir."
        )


def _read_token(path):
    """The integer in the file at `path`, or 0 when there is none (or it holds no integer)."""
    try:
        with tf.io.gfile.GFile(path) as f:
            return int(f.read().strip())
    except (tf.errors.OpError, OSError, ValueError):
        return 0


def _gather_workers(strategy, value, num_workers):
    """Every worker's int `value`, in worker order (a collective: all of them must call it)."""
    local = strategy.run(lambda: tf.constant([value], tf.int64))
    # [replicas] in replica order; each worker's replicas are contiguous.
    gathered = strategy.gather(local, axis=0).numpy().reshape(num_workers, -1)[:, 0]
    return [int(v) for v in gathered]


def remove_worker_dir(path, output_dir):
    """Deletes a directory `writable_dir` created for a non-chief worker."""
    if path != output_dir and os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
