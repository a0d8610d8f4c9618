"""run_pretraining's flags -> library path: outputs, summaries, best checkpoint, export,
--init_checkpoint, and one-line user errors."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import synthetic_pretraining as synthetic
import tensorflow as tf
from absl import flags

from albert.tasks import pretraining
from albert.training import flags as flags_lib
from albert.training.checkpointing import read_key_values
from tests.helpers import scalar_tags

REPO = Path(__file__).resolve().parents[2]
TRAIN_SCALARS = {
    "masked_lm_loss",
    "masked_lm_accuracy",
    "sentence_order_loss",
    "sentence_order_accuracy",
    "learning_rate",
    "gradient_norm",
    "examples_per_second",
    "tokens_per_second",
    "global_step/sec",
    "loss",
}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    directory = tmp_path_factory.mktemp("records")
    return {
        "train": synthetic.write_records(directory / "train.tfrecord", 120, seed=11),
        "eval": synthetic.write_records(directory / "eval.tfrecord", 40, seed=12),
        "config": synthetic.write_config(directory / "config.json"),
    }


def _run(records, output_dir, *extra):
    """Parses flags into a private FlagValues (no clash with other scripts' flags) and runs."""
    flag_values = flags.FlagValues()
    flags_lib.define_pretraining_flags(flag_values)
    flag_values(
        [
            "run_pretraining.py",
            f"--albert_config_file={records['config']}",
            f"--input_file={records['train']}",
            f"--eval_input_file={records['eval']}",
            f"--output_dir={output_dir}",
            "--train_batch_size=8",
            "--eval_batch_size=8",
            "--max_seq_length=32",
            "--max_predictions_per_seq=5",
            "--num_train_steps=6",
            "--num_warmup_steps=2",
            "--learning_rate=0.01",
            "--save_checkpoints_steps=3",
            "--iterations_per_loop=2",
            "--max_eval_steps=3",
            *extra,
        ]
    )
    return pretraining.run_from_flags(flag_values)


def _model_weights(path):
    reader = tf.train.load_checkpoint(str(path))
    return {
        k: reader.get_tensor(k)
        for k in reader.get_variable_to_shape_map()
        if k.startswith("model/")
    }


@pytest.fixture(scope="module")
def trained(records, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("run") / "out"
    metrics = _run(records, output_dir, "--do_train", "--do_eval")
    return output_dir, metrics


@pytest.mark.slow
@pytest.mark.xdist_group("pretraining_run")  # one worker: `trained` is run once
def test_outputs_of_a_train_and_eval_run(trained):
    output_dir, metrics = trained
    results = read_key_values(output_dir / "eval_results.txt")
    assert list(results) == [
        "global_step",
        "loss",
        "masked_lm_accuracy",
        "masked_lm_loss",
        "sentence_order_accuracy",
        "sentence_order_loss",
    ]
    assert results["global_step"] == "6"
    assert abs(float(results["masked_lm_loss"]) - metrics["masked_lm_loss"]) < 1e-6
    assert TRAIN_SCALARS <= scalar_tags(output_dir)
    assert {"masked_lm_accuracy", "sentence_order_accuracy"} <= scalar_tags(output_dir / "eval")
    assert sorted(p.name for p in output_dir.glob("model.ckpt-*.index")) == [
        "model.ckpt-3.index",
        "model.ckpt-6.index",
        "model.ckpt-best.index",
    ]
    best = read_key_values(output_dir / "best_checkpoint.txt")
    assert best["metric"] == "masked_lm_accuracy" and best["global_step"] in ("3", "6")


@pytest.mark.slow
@pytest.mark.xdist_group("pretraining_run")  # one worker: `trained` is run once
def test_best_checkpoint_and_export_load_with_the_project_tools(trained, tmp_path):
    from albert import AlbertConfig, AlbertPretrainer, load_checkpoint
    from albert.checkpoints import tf1
    from albert.convert_checkpoint import convert

    output_dir, _ = trained
    # model.ckpt-best uses the original's TF1 names, as a released model.
    names = [name for name, _ in tf.train.list_variables(str(output_dir / "model.ckpt-best"))]
    assert "bert/embeddings/word_embeddings" in names
    config = AlbertConfig.from_json_file(str(output_dir / "albert_config.json"))
    model = AlbertPretrainer(config)
    load_checkpoint(model, str(output_dir / "model.ckpt-best"))
    step = read_key_values(output_dir / "best_checkpoint.txt")["global_step"]
    # Its global_step is the step it was kept at, as in the original's checkpoints.
    assert tf1.stored_global_step(str(output_dir / "model.ckpt-best")) == int(step)
    kept = _model_weights(output_dir / f"model.ckpt-{step}")
    key = "model/encoder/group_0_inner_group_0_attention/query/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    query = next(w for w in model.weights if w.path.endswith("query/kernel")).numpy()
    assert np.array_equal(query, kept[key])
    # The final weights are in the converter's Keras format.
    written = convert(str(output_dir), str(tmp_path / "hf"), "hf")
    assert Path(written).exists()


@pytest.mark.slow
@pytest.mark.xdist_group("pretraining_run")  # one worker: `trained` is run once
def test_load_checkpoint_reads_a_training_checkpoint_and_the_run_directory(trained):
    from albert import AlbertConfig, AlbertPretrainer, load_checkpoint
    from albert.checkpoints import CheckpointError

    output_dir, _ = trained
    config = AlbertConfig.from_json_file(str(output_dir / "albert_config.json"))
    expected = _model_weights(output_dir / "model.ckpt-6")
    # The run directory is its newest checkpoint; the final weights it exported in the Keras
    # format beside it are the same.
    for path, format_name in (
        (output_dir / "model.ckpt-6", "training"),
        (output_dir, "training"),
        (output_dir / "pretrainer.weights.h5", "keras"),
    ):
        model = AlbertPretrainer(config)
        assert load_checkpoint(model, str(path)).format == format_name
        for weight in model.weights:
            key = f"model/{weight.path}/.ATTRIBUTES/VARIABLE_VALUE"
            assert np.array_equal(weight.numpy(), expected[key]), key
    with pytest.raises(CheckpointError, match="does not fit this model"):
        prefix = str(output_dir / "model.ckpt-6")
        load_checkpoint(AlbertPretrainer(config.replace(num_hidden_groups=2)), prefix)


@pytest.mark.slow
@pytest.mark.xdist_group("pretraining_run")  # one worker: `trained` is run once
def test_init_checkpoint_restarts_the_step_with_the_given_weights(records, trained, tmp_path):
    output_dir, _ = trained
    for name, source in (
        ("ours", output_dir / "model.ckpt-3"),
        ("tf1", output_dir / "model.ckpt-best"),
    ):
        target = tmp_path / name
        # A zero learning rate leaves the weights as loaded, so they must equal the source's.
        _run(
            records,
            target,
            "--do_train",
            f"--init_checkpoint={source}",
            "--learning_rate=0",
            "--num_train_steps=2",
            "--save_checkpoints_steps=2",
        )
        assert tf.train.latest_checkpoint(str(target)).endswith("model.ckpt-2")
        got = _model_weights(target / "model.ckpt-2")
        if name == "ours":
            expected = _model_weights(source)
            assert got.keys() == expected.keys()
            for key in expected:
                assert np.array_equal(got[key], expected[key]), key
        else:
            reader = tf.train.load_checkpoint(str(source))
            word = "model/embeddings/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE"
            assert np.array_equal(got[word], reader.get_tensor("bert/embeddings/word_embeddings"))


@pytest.mark.slow
@pytest.mark.xdist_group("pretraining_run")  # one worker: `trained` is run once
def test_rerun_of_a_finished_run_trains_no_more(records, trained):
    output_dir, _ = trained
    before = _model_weights(output_dir / "model.ckpt-6")
    metrics = _run(records, output_dir, "--do_eval")
    assert tf.train.latest_checkpoint(str(output_dir)).endswith("model.ckpt-6")
    after = _model_weights(output_dir / "model.ckpt-6")
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert metrics["masked_lm_loss"] > 0


@pytest.mark.slow
def test_gradient_accumulation_flag_reaches_the_run(records, tmp_path):
    # Dropout is 0 in the tiny config: 4 micro-batches of 2 train as the batch of 8 does.
    whole = _run(records, tmp_path / "whole", "--do_train", "--do_eval", "--num_train_steps=2")
    split = _run(
        records,
        tmp_path / "split",
        "--do_train",
        "--do_eval",
        "--num_train_steps=2",
        "--gradient_accumulation_steps=4",
    )
    assert abs(whole["masked_lm_loss"] - split["masked_lm_loss"]) < 1e-5
    with pytest.raises(flags_lib.FlagError, match="^--gradient_accumulation_steps must be pos"):
        _run(records, tmp_path / "zero", "--do_train", "--gradient_accumulation_steps=0")
    with pytest.raises(ValueError, match="^--gradient_accumulation_steps=3 must be a positive"):
        _run(records, tmp_path / "three", "--do_train", "--gradient_accumulation_steps=3")


def test_flag_errors_name_the_flag(records, tmp_path):
    with pytest.raises(flags_lib.FlagError, match="do_train"):
        _run(records, tmp_path / "a")
    with pytest.raises(ValueError, match="train_batch_size"):
        _run(records, tmp_path / "b", "--do_train", "--train_batch_size=0")
    with pytest.raises(ValueError, match="max_position_embeddings"):
        _run(records, tmp_path / "c", "--do_train", "--max_seq_length=100")


@pytest.mark.slow
def test_mismatched_records_give_one_line_and_no_traceback(records, tmp_path):
    command = [
        sys.executable,
        str(REPO / "run_pretraining.py"),
        "--do_train",
        f"--albert_config_file={records['config']}",
        f"--input_file={records['train']}",
        f"--output_dir={tmp_path}",
        "--max_seq_length=64",
        "--max_predictions_per_seq=5",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert process.returncode == 2
    assert "Traceback" not in process.stderr
    last = process.stderr.strip().splitlines()[-1]
    assert "error:" in last and "max_seq_length=32" in last and "max_seq_length" in last


@pytest.fixture
def float32_policy():
    import keras

    yield
    keras.mixed_precision.set_dtype_policy("float32")


@pytest.mark.slow
def test_jit_compile_and_mixed_precision_train_the_same_model(records, tmp_path, float32_policy):
    """--jit_compile gives the float32 run's weights; float16 (with loss scaling) and
    bfloat16 runs make nearly the same, finite update."""
    import keras

    from albert import AlbertConfig, AlbertPretrainer

    runs = {}
    # Explicit flags: the `auto` default depends on the machine (albert.training.hardware).
    for name, extra in (
        ("plain", ("--mixed_precision=none", "--nojit_compile")),
        ("jit", ("--mixed_precision=none", "--jit_compile")),
        ("float16", ("--mixed_precision=float16", "--nojit_compile")),
        ("bfloat16", ("--mixed_precision=bfloat16", "--nojit_compile")),
    ):
        _run(
            records,
            tmp_path / name,
            "--do_train",
            "--num_train_steps=2",
            "--num_warmup_steps=0",
            "--learning_rate=0.1",
            *extra,
        )
        runs[name] = _model_weights(tmp_path / name / "model.ckpt-2")
    keras.mixed_precision.set_dtype_policy("float32")
    keras.utils.set_random_seed(12345)  # the run's --random_seed: its initial weights
    model = AlbertPretrainer(AlbertConfig.from_json_file(records["config"]))
    initial = {f"model/{w.path}/.ATTRIBUTES/VARIABLE_VALUE": w.numpy() for w in model.weights}
    keys = sorted(initial)
    start = np.concatenate([initial[k].ravel() for k in keys])
    update = {n: np.concatenate([w[k].ravel() for k in keys]) - start for n, w in runs.items()}
    for weights in runs.values():
        assert all(np.all(np.isfinite(weights[k])) for k in keys)
    assert np.max(np.abs(update["plain"])) > 1e-2  # it trained
    assert np.max(np.abs(update["jit"] - update["plain"])) < 1e-4
    # Lower precision: the same update, up to rounding (cosine of the two updates).
    for name, least in (("float16", 0.9995), ("bfloat16", 0.995)):
        a, b = update[name], update["plain"]
        cosine = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
        assert cosine > least, (name, cosine)


@pytest.mark.slow
@pytest.mark.xdist_group("pretraining_run")  # one worker: `trained` is run once
def test_init_from_group0_copies_group_0_into_every_group(records, trained, tmp_path):
    output_dir, _ = trained
    config = synthetic.write_config(tmp_path / "two_groups.json", num_hidden_groups=2)
    _run(
        records,
        tmp_path / "out",
        "--do_train",
        f"--albert_config_file={config}",
        f"--init_checkpoint={output_dir / 'model.ckpt-3'}",
        "--init_from_group0",
        "--learning_rate=0",
        "--num_train_steps=1",
    )
    got = _model_weights(tmp_path / "out" / "model.ckpt-1")
    source = _model_weights(output_dir / "model.ckpt-3")
    suffix = "attention/query/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    group_0 = source[f"model/encoder/group_0_inner_group_0_{suffix}"]
    for group in (0, 1):
        assert np.array_equal(got[f"model/encoder/group_{group}_inner_group_0_{suffix}"], group_0)
    word = "model/embeddings/word_embeddings/.ATTRIBUTES/VARIABLE_VALUE"
    assert np.array_equal(got[word], source[word])


def test_copy_from_group0_keeps_each_inner_block_apart():
    # With inner_group_num=2 a path holds two group indexes (`group_1_inner_group_1_...`):
    # only the outer one names the layer group; inner block 1 must come from inner block 1.
    from albert.modeling import AlbertPretrainer
    from tests.helpers import tiny_config

    source = AlbertPretrainer(tiny_config(num_hidden_groups=1))
    target = AlbertPretrainer(tiny_config(num_hidden_groups=2))
    pretraining.copy_from_group0(source, target)
    stored = {w.path: w.numpy() for w in source.weights}
    for group in (0, 1):
        for inner in (0, 1):
            got = {
                w.path: w.numpy()
                for w in target.weights
                if f"/group_{group}_inner_group_{inner}_" in w.path
            }
            assert got
            for path, value in got.items():
                source_path = path.replace(f"/group_{group}_", "/group_0_")
                assert np.array_equal(value, stored[source_path]), path
