"""run_classifier.py's flags: the paper's table as defaults, MNLI -> AX and mismatched dev
with the MNLI model, --init_checkpoint from a TF1 checkpoint, and one-line user errors."""

import csv
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import synthetic_glue as synthetic
import tensorflow as tf
from absl import flags

from albert.checkpoints import save_checkpoint
from albert.config import AlbertConfig
from albert.data import glue
from albert.modeling import AlbertBackbone, AlbertClassifier, AlbertPretrainer
from albert.tasks import classification, engine, hyperparameters
from albert.tokenization import FullTokenizer
from albert.training import loop
from albert.training.checkpointing import read_key_values

REPO = Path(__file__).resolve().parents[2]


def _parsed(*args):
    flag_values = flags.FlagValues()
    classification.define_classifier_flags(flag_values)
    flag_values(["run_classifier.py", *args])
    return flag_values


def test_unset_flags_come_from_the_paper_table():
    flag_values = _parsed("--task_name=cola", "--train_step=7", "--learning_rate=0.5")
    taken = hyperparameters.fill_from_table(flag_values, "cola")
    assert taken == {
        "train_batch_size": 16,
        "num_warmup_steps": 320,
        "max_seq_length": 512,
        "albert_dropout_prob": 0.0,
    }
    assert flag_values.num_train_steps == 7 and flag_values.learning_rate == 0.5
    assert flag_values.optimizer == "adamw" and flag_values.eval_batch_size == 8
    flag_values = _parsed("--task_name=mismnli")
    hyperparameters.fill_from_table(flag_values, "mismnli")
    assert (flag_values.learning_rate, flag_values.train_batch_size) == (3e-5, 128)
    assert flag_values.warmup_step == 1000  # the original's name reads the same value


def test_flags_given_as_zero_are_kept_not_taken_from_the_table():
    # 0 is a value: --albert_dropout_prob=0 on QQP (row 0.1) and --warmup_step=0 keep theirs.
    flag_values = _parsed("--task_name=qqp", "--albert_dropout_prob=0", "--warmup_step=0")
    taken = hyperparameters.fill_from_table(flag_values, "qqp")
    assert "albert_dropout_prob" not in taken and "num_warmup_steps" not in taken
    assert (flag_values.albert_dropout_prob, flag_values.num_warmup_steps) == (0.0, 0)
    assert flag_values.learning_rate == 5e-5  # An unset flag still takes the row.


def test_the_table_is_the_one_its_module_documents():
    # Each row of the paper's table as the module doc prints it (task, lr, batch, steps,
    # warmup, max_seq_length, dropout) is the row the flags take.
    doc = hyperparameters.__doc__
    lines = doc[doc.index("    task ") :].split("\n\n")[0].splitlines()[1:]
    rows = {line.split()[0]: line.split()[1:] for line in lines}
    assert len(rows) == 12
    for task, values in rows.items():
        row = hyperparameters.PAPER_HYPERPARAMETERS[task]
        assert dataclasses.astuple(row) == (
            float(values[0]),
            *(int(value) for value in values[1:5]),
            float(values[5]),
        ), task


def test_a_table_warmup_beyond_the_given_steps_is_warned(caplog):
    # CoLA's row warms up for 320 steps; with --train_step=7 the rate would never peak.
    flag_values = _parsed("--task_name=cola", "--train_step=7", "--do_train")
    hyperparameters.fill_from_table(flag_values, "cola")
    assert "--warmup_step=320 from the paper's table is not below --train_step=7" in caplog.text
    assert "proportion, --warmup_step=0 for --train_step=7)" in caplog.text  # 7 * 320 // 5336
    caplog.clear()
    flag_values = _parsed("--task_name=cola", "--train_step=7", "--warmup_step=2")
    hyperparameters.fill_from_table(flag_values, "cola")
    flag_values = _parsed("--task_name=cola")  # the table's own steps and warmup
    hyperparameters.fill_from_table(flag_values, "cola")
    assert "never reaches" not in caplog.text


def test_an_eval_only_run_logs_only_the_sequence_length_it_takes(absl_caplog):
    # The training rows (--train_step=5336, ...) and the warmup warning are noise without
    # training; the values are still set, as before.
    flag_values = _parsed("--task_name=cola", "--train_step=7", "--do_eval")
    taken = hyperparameters.fill_from_table(flag_values, "cola")
    assert "train_batch_size" in taken and flag_values.train_batch_size == 16
    assert "for cola: --max_seq_length=512 (pass" in absl_caplog.text
    assert "warmup" not in absl_caplog.text and "never reaches" not in absl_caplog.text


@pytest.fixture(scope="module")
def mnli(tmp_path_factory):
    root = tmp_path_factory.mktemp("mnli")
    data_dir = synthetic.write_mnli(root / "glue")
    config = synthetic.write_config(root / "config.json")
    output_dir = root / "mnli_out"
    run_flags = synthetic.tiny_run_flags(data_dir, output_dir, config, "mnli")
    synthetic.run_classifier(
        *run_flags, "--train_step=30", "--save_checkpoints_steps=30", "--do_train"
    )
    return root, data_dir, output_dir


@pytest.mark.slow
def test_ax_is_predicted_with_the_mnli_model(mnli):
    root, data_dir, mnli_dir = mnli
    ax_dir = root / "ax_out"
    # No --albert_config_file: the config is read from the MNLI run's directory.
    synthetic.run_classifier(
        "--task_name=ax",
        f"--data_dir={data_dir}",
        f"--output_dir={ax_dir}",
        f"--init_checkpoint={mnli_dir}",
        "--max_seq_length=32",
        "--predict_batch_size=5",
        "--do_predict",
    )
    examples = glue.read_examples("ax", data_dir, "test")
    with open(ax_dir / "AX.tsv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == ["index", "prediction"]
    assert [r[0] for r in rows[1:]] == [e.guid for e in examples]
    assert {r[1] for r in rows[1:]} <= set(glue.MNLI_LABELS)
    # The probabilities are the MNLI model's (its trained head) on the AX pairs.
    model = AlbertClassifier(AlbertBackbone(AlbertConfig.from_dict(synthetic.TINY_CONFIG)), 3)
    options = loop.RunOptions(output_dir=str(mnli_dir), num_train_steps=1, train_batch_size=1)
    engine.load_final_weights(model, options)
    tokenizer = FullTokenizer(spm_model_file=synthetic.SPM_MODEL, do_lower_case=True)
    features = glue.convert_examples_to_features(examples, "ax", 32, tokenizer)
    inputs = {
        k: np.array([f[k] for f in features]) for k in ("input_ids", "input_mask", "segment_ids")
    }
    expected = classification.softmax(np.asarray(model(inputs)["logits"]))
    written = np.loadtxt(ax_dir / "test_results.tsv", delimiter="\t")
    assert np.max(np.abs(written - expected)) < 1e-5
    assert [r[1] for r in rows[1:]] == [glue.MNLI_LABELS[i] for i in expected.argmax(axis=1)]


@pytest.mark.slow
def test_mismatched_dev_is_evaluated_with_the_mnli_model(mnli):
    root, data_dir, mnli_dir = mnli
    metrics, _ = synthetic.run_classifier(
        "--task_name=mismnli",
        f"--data_dir={data_dir}",
        f"--output_dir={root / 'mm_out'}",
        f"--init_checkpoint={mnli_dir}",
        "--max_seq_length=32",
        "--do_eval",
    )
    assert metrics["global_step"] == 30 and 0.0 <= metrics["accuracy"] <= 1.0
    results = read_key_values(root / "mm_out" / "eval_results.txt")
    assert float(results["accuracy"]) == pytest.approx(metrics["accuracy"])


@pytest.mark.slow
def test_init_checkpoint_from_an_official_tf1_checkpoint(tmp_path):
    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    source = AlbertPretrainer(config)
    rng = np.random.default_rng(0)
    for variable in source.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
    prefix = save_checkpoint(source, str(tmp_path / "tf1"), "tf1")
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=40, num_dev=10, num_test=3)
    run_flags = synthetic.tiny_run_flags(data_dir, tmp_path / "out", "", "sst-2")
    # No --albert_config_file (its albert_config.json is beside the checkpoint); a zero
    # learning rate keeps the weights as loaded.
    synthetic.run_classifier(
        *[f for f in run_flags if "albert_config_file" not in f],
        f"--init_checkpoint={prefix}",
        "--learning_rate=0",
        "--train_step=2",
        "--do_train",
    )
    model = AlbertClassifier(AlbertBackbone(config), 2)
    options = loop.RunOptions(
        output_dir=str(tmp_path / "out"), num_train_steps=1, train_batch_size=1
    )
    assert engine.load_final_weights(model, options)[1] == 2
    for weight, expected in zip(model.backbone.weights, source.backbone.weights, strict=True):
        assert np.max(np.abs(weight.numpy() - expected.numpy())) == 0.0, weight.path


def test_weights_without_a_step_are_evaluated_as_step_0(tmp_path):
    # A Keras weights file (or an HF directory) holds no global step. The original's
    # eval_results.txt always holds an integer, which scripts parse as a number.
    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    weights = save_checkpoint(AlbertClassifier(AlbertBackbone(config), 2), str(tmp_path), "keras")
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=4, num_dev=6, num_test=3)
    run_flags = synthetic.tiny_run_flags(data_dir, tmp_path / "out", "", "sst-2")
    metrics, _ = synthetic.run_classifier(
        *[f for f in run_flags if "albert_config_file" not in f],
        f"--init_checkpoint={weights}",
        "--do_eval",
    )
    assert metrics["global_step"] == 0
    written = read_key_values(str(tmp_path / "out" / "eval_results.txt"))
    assert written["global_step"] == "0" and written["checkpoint"] == weights


@pytest.fixture(scope="module")
def sst2_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("errors")
    return synthetic.write_sst2(root / "glue", 20, 5, 3), synthetic.write_config(root / "c.json")


@pytest.mark.parametrize(
    "changes, error, message",
    [
        ({"task_name": None}, ValueError, "--task_name is required"),
        ({"task_name": "mnli-x"}, glue.GlueDataError, "Unknown --task_name='mnli-x'"),
        ({"data_dir": None}, ValueError, "--data_dir is required"),
        ({"spm_model_file": "missing.model"}, ValueError, "'missing.model' does not exist"),
        ({"do_train": False}, ValueError, "there is nothing to do"),
        ({"task_name": "ax"}, ValueError, "AX has only a test set"),
        ({"max_seq_length": 65}, ValueError, "exceeds the config's max_position_embeddings=64"),
        ({"albert_config_file": None}, ValueError, r"--albert_config_file is required \(or an "),
        ({"data_dir": "elsewhere"}, glue.GlueDataError, "No sst-2 train file in --data_dir"),
        ({"do_train": False, "do_predict": True}, engine.FineTuningError, "holds no checkpoint"),
    ],
)
def test_user_errors_name_the_flag(sst2_data, tmp_path, changes, error, message):
    data_dir, config = sst2_data
    values = {
        "task_name": "sst-2",
        "data_dir": data_dir,
        "output_dir": str(tmp_path),
        "albert_config_file": config,
        "spm_model_file": synthetic.SPM_MODEL,
        "max_seq_length": 32,
        "do_train": True,
        **changes,
    }
    args = [f"--{k}={v}" for k, v in values.items() if v is not None and not isinstance(v, bool)]
    args += [f"--{k}" if v else f"--no{k}" for k, v in values.items() if isinstance(v, bool)]
    with pytest.raises(error, match=message):
        synthetic.run_classifier(*args)


def test_an_init_checkpoint_without_its_config_is_named(sst2_data, tmp_path):
    data_dir, _ = sst2_data
    prefix = tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(tmp_path / "ckpt" / "model"))
    with pytest.raises(ValueError, match=f"no config is stored with --init_checkpoint={prefix}"):
        synthetic.run_classifier(
            "--task_name=sst-2",
            f"--data_dir={data_dir}",
            f"--output_dir={tmp_path / 'out'}",
            f"--init_checkpoint={prefix}",
            f"--spm_model_file={synthetic.SPM_MODEL}",
            "--max_seq_length=32",
            "--do_train",
        )


def test_a_batch_that_cannot_split_fails_before_the_features_are_read(
    sst2_data, tmp_path, monkeypatch
):
    # Tokenizing MNLI or SQuAD takes minutes: a batch the micro-batches (or replicas) cannot
    # split must fail before it, not after, leaving no feature cache behind.
    def no_reading(*args):
        raise AssertionError("the features were read before the batch sizes were checked")

    monkeypatch.setattr(classification.GlueTask, "read_features", no_reading)
    data_dir, config = sst2_data
    run_flags = synthetic.tiny_run_flags(data_dir, tmp_path / "out", config, "sst-2")
    with pytest.raises(ValueError, match="^--gradient_accumulation_steps=3 must be a positive"):
        # 16 rows a step: 3 micro-batches cannot split them.
        synthetic.run_classifier(*run_flags, "--do_train", "--gradient_accumulation_steps=3")
    assert not (tmp_path / "out" / engine.FEATURES_DIR).exists()


@pytest.mark.slow
def test_bad_flags_print_one_line_without_traceback(tmp_path):
    command = [
        sys.executable,
        str(REPO / "run_classifier.py"),
        "--task_name=glue",
        f"--output_dir={tmp_path}",
        f"--data_dir={tmp_path}",
        "--do_train",
        f"--spm_model_file={synthetic.SPM_MODEL}",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert errors == [
        "run_classifier.py: error: Unknown --task_name='glue'; choose one of "
        "cola, sst-2, mrpc, sts-b, qqp, mnli, mismnli, qnli, rte, wnli, ax."
    ], result.stderr[-2000:]
