"""The input of every task on several hosts, the way TPUStrategy feeds a pod slice: one client,
two in-process `tf.distribute.Server` hosts on loopback ports, and each task's `dataset_fn`
called under each host's device with that host's `InputContext` (2 pipelines, 2 replicas
each). Every host must build its own pipeline there (a dataset made on the client cannot be
used on another host), get its own share, with static shapes, and for eval and predict the
same number of full batches, the shares together holding every example exactly once.

Plus, under MirroredStrategy on 2 logical CPUs: pretraining eval batches are full on every
replica for exactly max_eval_steps, the evaluation stops at the first batch of padding
alone, and it gives the metrics of the records alone.

Both run in subprocesses: the cluster and the logical devices must be set up before
TensorFlow initialises.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import free_ports

# Slow tier: multi-host servers and subprocess runs (~15 s).
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
HOSTS, REPLICAS_PER_HOST = 2, 2
SEQ, PREDICTIONS = 9, 2


def _run(mode, tmp_path):
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join([str(REPO), str(HERE), str(REPO / "tests" / "tasks")]),
    )
    output = tmp_path / f"{mode}.json"
    process = subprocess.run(
        [sys.executable, __file__, mode, str(tmp_path), str(output)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    return json.loads(output.read_text())


# --- In the subprocess ------------------------------------------------------------------


def _rows(batch, keys):
    """Per-example identities: the given features of each row, as one hashable string."""
    import numpy as np

    size = len(batch[keys[0]])
    return ["|".join(np.asarray(batch[k][r]).tobytes().hex() for k in keys) for r in range(size)]


def _on_host(host, dataset_fn, batches=None):
    """Builds and reads `dataset_fn`'s pipeline on one host; returns its batches as numpy."""
    import tensorflow as tf

    context = tf.distribute.InputContext(
        num_input_pipelines=HOSTS,
        input_pipeline_id=host,
        num_replicas_in_sync=HOSTS * REPLICAS_PER_HOST,
    )
    with tf.device(f"/job:worker/replica:0/task:{host}/device:CPU:0"):
        dataset = dataset_fn(context)
        static = {k: spec.shape.as_list() for k, spec in dataset.element_spec.items()}
        iterator = iter(dataset)
        out = []
        for _ in range(batches) if batches else iter(int, 1):
            try:
                out.append({k: v.numpy() for k, v in next(iterator).items()})
            except (StopIteration, tf.errors.OutOfRangeError):
                break
    return static, out


def _inference_report(task, role, keys, client_rows):
    """Every host's eval / predict pipeline: shapes, batch counts, indices, contents."""
    import numpy as np

    report = {"static": [], "batches": [], "indices": [], "contents_match": True}
    for host in range(HOSTS):
        static, batches = _on_host(host, lambda c, role=role: task.inference_dataset(role, c))
        report["static"].append(static["input_ids"])
        report["batches"].append(len(batches))
        real = [b["is_real_example"] > 0 for b in batches]
        indices = np.concatenate(
            [b["example_index"][r] for b, r in zip(batches, real, strict=True)]
        )
        report["indices"].append(sorted(indices.tolist()))
        for batch, keep in zip(batches, real, strict=True):
            rows = _rows({k: batch[k][keep] for k in keys}, keys)
            for row, index in zip(rows, batch["example_index"][keep], strict=True):
                report["contents_match"] &= row == client_rows[index]
    report["count"] = len(client_rows)
    return report


def _train_report(task, keys, client_rows, count):
    """Every host's first pass of training data (shuffled, repeated, batched)."""
    per_host = [len(range(h, count, HOSTS)) for h in range(HOSTS)]
    report = {"static": [], "rows": []}
    for host in range(HOSTS):
        static, batches = _on_host(host, lambda c: task.train_dataset(c, seed=1), batches=40)
        report["static"].append(static["input_ids"])
        rows = [r for b in batches for r in _rows(b, keys)]
        report["rows"].append(sorted(rows[: per_host[host]]))
    report["client_rows"] = sorted(client_rows)
    return report


def _client_rows(task, role, keys):
    dataset, _, _ = task.load_features(role)
    return [_rows({k: v.numpy()[None] for k, v in f.items()}, keys)[0] for f in dataset]


def _finetuning_reports(tmp_path):
    import synthetic_glue as synthetic
    import test_race_task
    import test_squad_task

    from albert.config import AlbertConfig
    from albert.tasks import classification, engine, race, squad
    from albert.tokenization import FullTokenizer

    tokenizer = FullTokenizer(spm_model_file=synthetic.SPM_MODEL, do_lower_case=True)
    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    glue_dir = synthetic.write_sst2(tmp_path / "glue", num_train=21, num_dev=13, num_test=7)
    race_dir = test_race_task.write_race(tmp_path / "race", {"train": 6, "dev": 5, "test": 3}, 0)
    squad_train = test_squad_task.write_marker_squad(tmp_path / "train.json", 12, seed=0)
    squad_dev = test_squad_task.write_marker_squad(tmp_path / "dev.json", 9, seed=1)
    tasks = {
        # Features held in memory: the engine writes them for the hosts (output_dir/features).
        "glue": classification.GlueTask("sst-2", glue_dir, tokenizer, config, 16, 8, 8, 8),
        # Features from the cache: RACE's [C, T] inputs are read back in that shape.
        "race": race.RaceTask(
            race_dir, tokenizer, config, 24, 8, 8, 8, 8, cached_dir=str(tmp_path / "cache")
        ),
        "squad": squad.SquadTask(
            squad_train,
            squad_dev,
            tokenizer,
            config,
            False,
            max_seq_length=32,
            doc_stride=16,
            max_query_length=8,
            train_batch_size=8,
            eval_batch_size=8,
            predict_batch_size=8,
            cached_dir=str(tmp_path / "cache"),
        ),
    }
    keys = {
        "glue": ("input_ids", "label_ids"),
        "race": ("input_ids", "label_ids"),
        "squad": ("input_ids", "unique_ids"),
    }
    reports = {}
    for name, task in tasks.items():
        engine.use_output_dir(task, str(tmp_path / f"out_{name}"))
        for role in (engine.TRAIN, engine.EVAL, engine.PREDICT):
            client_rows = _client_rows(task, role, keys[name])
            if role == engine.TRAIN:
                report = _train_report(task, keys[name], client_rows, len(client_rows))
            else:
                report = _inference_report(task, role, keys[name], client_rows)
            reports[f"{name}/{role}"] = report
    return reports


def _pretraining_reports(tmp_path):
    import tensorflow as tf

    from albert.config import AlbertConfig
    from albert.data import records
    from albert.tasks.pretraining import PretrainingTask

    # 3 files of 5, 4 and 4 records: input_ids[1] numbers each record.
    files, number = [], 0
    for f, size in enumerate((5, 4, 4)):
        files.append(str(tmp_path / f"part-{f}"))
        with tf.io.TFRecordWriter(files[-1]) as writer:
            for _ in range(size):
                number += 1
                writer.write(
                    records.serialize_instance(
                        [2, 5 + number, 3],
                        [0, 0, 0],
                        [1, 1, 1],
                        [1],
                        [5 + number],
                        f % 2,  # a sentence-order label (0 or 1: the input checks it)
                        SEQ,
                        PREDICTIONS,
                    )
                )
    import synthetic_pretraining as synthetic

    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    # Global eval batch 8: 2 per replica, 4 per host.
    task = PretrainingTask(config, ",".join(files), 8, 8, SEQ, PREDICTIONS)
    reports = {}
    for num_steps in (1, 4):  # stops in the data; runs past its end (padding)
        report = {"static": [], "batches": [], "numbers": [], "padding_weights": 0.0}
        for host in range(HOSTS):
            static, batches = _on_host(host, lambda c, n=num_steps: task.eval_dataset(c, n))
            report["static"].append(static["input_ids"])
            report["batches"].append(len(batches))
            numbers = []
            for batch in batches:
                real = batch["is_real_example"] > 0
                numbers += (batch["input_ids"][real][:, 1] - 5).tolist()
                report["padding_weights"] += float(batch["masked_lm_weights"][~real].sum())
            report["numbers"].append(sorted(numbers))
        reports[f"pretraining/eval/{num_steps}"] = report
    train = {"static": [], "numbers": []}
    for host in range(HOSTS):
        static, batches = _on_host(host, lambda c: task.train_dataset(c, seed=3), batches=6)
        train["static"].append(static["input_ids"])
        train["numbers"].append(sorted({int(n) for b in batches for n in b["input_ids"][:, 1] - 5}))
    reports["pretraining/train"] = train
    return reports


def _hosts_main(tmp_path, output):
    import tensorflow as tf

    ports = free_ports(HOSTS)
    cluster = tf.train.ClusterSpec({"worker": [f"localhost:{p}" for p in ports]})
    servers = [tf.distribute.Server(cluster, job_name="worker", task_index=i) for i in range(HOSTS)]
    tf.config.experimental_connect_to_cluster(cluster)
    reports = {**_pretraining_reports(tmp_path), **_finetuning_reports(tmp_path)}
    Path(output).write_text(json.dumps(reports))
    del servers


def _mirrored_main(tmp_path, output):
    import tensorflow as tf

    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
    import keras
    import synthetic_pretraining as synthetic

    from albert.config import AlbertConfig
    from albert.tasks.pretraining import PretrainingTask, pretraining_metrics
    from albert.training.steps import Trainer

    data = synthetic.write_records(tmp_path / "eval.tfrecord", 10, seed=5)
    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    report = {}
    for name, strategy, batch, steps in (
        # 10 records in 3 steps of 2 x 3: 8 padding records.
        ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), 6, 3),
        # One device, one batch of exactly the 10 records: no padding.
        ("one_device", tf.distribute.get_strategy(), 10, 1),
        # 40 steps asked of 3 batches of 4: the steps of padding alone are not run.
        ("past_the_end", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), 4, 40),
    ):
        keras.utils.set_random_seed(4)
        task = PretrainingTask(
            config, data, batch, batch, synthetic.MAX_SEQ_LENGTH, synthetic.MAX_PREDICTIONS
        )
        with strategy.scope():
            model = task.create_model()
            global_step = tf.Variable(0, dtype=tf.int64)
        trainer = Trainer(strategy, task, model, keras.optimizers.SGD(0.0), global_step)
        dataset = strategy.distribute_datasets_from_function(
            lambda context, task=task, steps=steps: task.eval_dataset(context, steps)
        )
        shapes = []
        for values in dataset:
            local = strategy.experimental_local_results(values["input_ids"])
            shapes.append([list(t.shape) for t in local])
        sums = trainer.evaluate(iter(dataset), steps)
        report[name] = {
            "shapes": shapes,
            "steps": sums["steps"],
            "metrics": pretraining_metrics(sums),
            "examples": sums["sentence_order_examples"],
        }
    Path(output).write_text(json.dumps(report))


# --- Tests --------------------------------------------------------------------------------


def test_every_task_s_input_on_two_hosts(tmp_path):
    reports = _run("hosts", tmp_path)
    assert len(reports) == 12  # pretraining eval (twice) and train; 3 roles of 3 tasks
    for name, report in reports.items():
        task, role = name.split("/")[:2]
        # Static shapes on every host: [per-replica batch (global 8 / 4 replicas), ...].
        for static in report["static"]:
            assert static[0] == 2 and None not in static, (name, static)
        if task == "race":
            assert report["static"][0][1:] == [4, 24], name  # [C, T]
        if role == "train" and task != "pretraining":
            # Each host's first pass is its own share; together they are the data, once.
            a, b = report["rows"]
            assert len(a) + len(b) == len(report["client_rows"]), name
            assert sorted(a + b) == report["client_rows"], name
        elif role == "train":
            # 3 files on 2 hosts: host 0 reads file 0, host 1 file 1, and each its half of
            # the records of file 2 (10..13), so both hold the same share of the data.
            first, second = report["numbers"]
            assert first and set(first) <= {1, 2, 3, 4, 5, 10, 12}, name
            assert second and set(second) <= {6, 7, 8, 9, 11, 13}, name
        elif task == "pretraining":
            steps = int(name.rsplit("/", 1)[1])
            # Exactly `steps` full batches for each of a host's 2 replicas, on every host.
            assert report["batches"] == [steps * REPLICAS_PER_HOST] * HOSTS, name
            a, b = report["numbers"]
            assert not set(a) & set(b), name
            if steps == 4:  # past the data's end: every record once, padding weighs 0
                assert sorted(a + b) == list(range(1, 14)), name
                assert report["padding_weights"] == 0.0
            else:  # 4 records per host: the first of each host's interleaved files
                assert len(a) == len(b) == 4, name
        else:
            # Eval / predict: the same number of full batches on both hosts, and the real
            # rows' indices together 0..N-1 once, each row the client's row at its index.
            assert report["batches"][0] == report["batches"][1] > 0, name
            a, b = report["indices"]
            assert not set(a) & set(b), name
            assert sorted(a + b) == list(range(report["count"])), name
            assert report["contents_match"], name


def test_pretraining_eval_batches_are_full_on_every_replica(tmp_path):
    report = _run("mirrored", tmp_path)
    mirrored, one, past = report["mirrored"], report["one_device"], report["past_the_end"]
    assert mirrored["shapes"] == [[[3, 32], [3, 32]]] * 3  # 3 steps, both replicas full
    assert one["shapes"] == [[[10, 32]]]
    # The third step is padding alone (6 + 4 real records in the first two): not run.
    assert mirrored["steps"] == 2.0
    assert len(past["shapes"]) == 40 and past["steps"] == 3.0
    # Padding counts in no metric: the 10 records alone, as one device sees them.
    for report in (mirrored, past):
        assert report["examples"] == one["examples"] == 10.0
        for name, value in one["metrics"].items():
            assert abs(report["metrics"][name] - value) < 1e-5, name


if __name__ == "__main__":
    mode, directory, result = sys.argv[1:]
    (_hosts_main if mode == "hosts" else _mirrored_main)(Path(directory), result)
