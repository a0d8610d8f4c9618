"""The original README's command blocks, and run_glue.sh's per-task lines, run unchanged.

Each command keeps the original's module path (`python -m albert.run_...`) and every flag of
its block; only the `...` placeholders become tiny local files, and sizes are scaled down
(batch sizes, steps, warmup, checkpoint cadence, sequence lengths) so that each run is a few
steps of a tiny model. One subprocess per command, as a user would run it.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Eight fresh processes (each imports TensorFlow; seven trace a model): about two minutes.
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
sys.path[:0] = [str(TESTS / "tasks"), str(TESTS / "training"), str(TESTS / "checkpoints")]

import synthetic_glue  # noqa: E402
import synthetic_pretraining  # noqa: E402
from test_race_task import write_race  # noqa: E402
from test_squad_task import write_marker_squad  # noqa: E402

from albert.checkpoints import save_checkpoint  # noqa: E402
from albert.config import AlbertConfig  # noqa: E402
from albert.modeling import AlbertPretrainer  # noqa: E402
from albert.training.checkpointing import read_key_values  # noqa: E402


def run(module, *flags):
    """`python -m <module> <flags>` in a fresh process, as the README runs it."""
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent), "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, "-m", module, *flags], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, f"{module} failed:\n{result.stderr[-4000:]}"
    return result.stderr


def write_model(directory, config_dict):
    """A released-style model folder: model.ckpt-best.* (TF1 names) and albert_config.json."""
    model = AlbertPretrainer(AlbertConfig.from_dict(config_dict))
    save_checkpoint(model, str(directory), "tf1")
    shutil.copy(synthetic_glue.SPM_MODEL, Path(directory) / "30k-clean.model")
    return str(Path(directory) / "model.ckpt"), str(Path(directory) / "albert_config.json")


def write_hub_module(directory, checkpoint_dir):
    """A TF1-format TF-Hub module folder: variables/ under `module/`, assets/, the config."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(checkpoint_dir))
    names = sorted(reader.get_variable_to_shape_map())
    variables = Path(directory) / "variables"
    variables.mkdir(parents=True)
    tf.raw_ops.SaveV2(
        prefix=str(variables / "variables"),
        tensor_names=[f"module/{n}" for n in names],
        shape_and_slices=[""] * len(names),
        tensors=[reader.get_tensor(n) for n in names],
    )
    (Path(directory) / "assets").mkdir()
    shutil.copy(synthetic_glue.SPM_MODEL, Path(directory) / "assets" / "30k-clean.model")
    shutil.copy(Path(checkpoint_dir) / "albert_config.json", Path(directory) / "assets")
    (Path(directory) / "tfhub_module.pb").write_bytes(b"")
    return str(directory)


def write_squad_v2(path, num_questions, seed):
    """A SQuAD 2.0 file: the marker questions plus one unanswerable question every third."""
    data = json.loads(Path(write_marker_squad(path, num_questions, seed)).read_text())
    for i, paragraph in enumerate(data["data"][0]["paragraphs"]):
        for qa in paragraph["qas"]:
            qa["is_impossible"] = False
        if i % 3 == 0:
            paragraph["qas"].append(
                {
                    "id": f"n{i}",
                    "question": "which word is missing here",
                    "answers": [],
                    "is_impossible": True,
                }
            )
    Path(path).write_text(json.dumps(data), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    finetuning = {**synthetic_glue.TINY_CONFIG, "max_position_embeddings": 128}
    init, config = write_model(root / "albert_tiny", finetuning)
    pretraining_init, pretraining_config = write_model(
        root / "albert_pretraining", synthetic_pretraining.TINY_CONFIG
    )
    hub = write_hub_module(root / "hub_module", root / "albert_tiny")
    return dict(
        init=init,
        config=config,
        spm=synthetic_glue.SPM_MODEL,
        hub=hub,
        pretraining_init=pretraining_init,
        pretraining_config=pretraining_config,
    )


def test_readme_pretraining(tmp_path, models):
    records = tmp_path / "data.tfrecord"
    synthetic_pretraining.write_records(records, 24)
    out = tmp_path / "out"
    run(
        "albert.run_pretraining",
        f"--input_file={records}",
        f"--output_dir={out}",
        f"--init_checkpoint={models['pretraining_init']}",
        f"--albert_config_file={models['pretraining_config']}",
        "--do_train",
        "--do_eval",
        "--train_batch_size=8",
        "--eval_batch_size=8",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--optimizer=lamb",
        "--learning_rate=.00176",
        "--num_train_steps=2",
        "--num_warmup_steps=1",
        "--save_checkpoints_steps=2",
    )
    results = read_key_values(out / "eval_results.txt")
    assert int(results["global_step"]) == 2 and "masked_lm_accuracy" in results


def test_readme_run_classifier_and_run_glue_sh(tmp_path, models):
    data_dir = tmp_path / "glue"
    synthetic_glue.write_mnli(data_dir, num_train=16, num_dev=6, num_test=5, num_ax=3)
    synthetic_glue.write_sst2(data_dir, num_train=16, num_dev=6, num_test=5)
    out = tmp_path / "mnli"
    run(
        "albert.run_classifier",
        f"--data_dir={data_dir}",
        f"--output_dir={out}",
        f"--init_checkpoint={models['init']}",
        f"--albert_config_file={models['config']}",
        f"--spm_model_file={models['spm']}",
        "--do_train",
        "--do_eval",
        "--do_predict",
        "--do_lower_case",
        "--max_seq_length=64",
        "--optimizer=adamw",
        "--task_name=MNLI",
        "--warmup_step=1",
        "--learning_rate=3e-5",
        "--train_step=2",
        "--save_checkpoints_steps=2",
        "--train_batch_size=8",
    )
    assert int(read_key_values(out / "eval_results.txt")["global_step"]) == 2
    assert (out / "submit_results.tsv").exists()

    # run_glue.sh's run_task with ALBERT_HUB_MODULE_HANDLE set to a downloaded module and
    # INIT_CHECKPOINT="" (its default, with the module as a folder instead of a URL).
    out = tmp_path / "output" / "SST-2"
    common = [
        f"--output_dir={out}",
        f"--data_dir={data_dir}",
        f"--vocab_file={tmp_path / 'vocab.txt'}",
        f"--spm_model_file={models['spm']}",
        "--do_lower_case",
        "--max_seq_length=64",
        "--optimizer=adamw",
        "--task_name=SST-2",
        "--warmup_step=1",
        "--learning_rate=1e-5",
        "--train_step=2",
        "--save_checkpoints_steps=1",
        "--train_batch_size=8",
    ]
    log = run(
        "albert.run_classifier",
        *common,
        "--do_train",
        "--nodo_eval",
        "--nodo_predict",
        f"--albert_hub_module_handle={models['hub']}",
        "--init_checkpoint=",
    )
    assert "TF-Hub module" in log
    run(
        "albert.run_classifier",
        *common,
        "--nodo_train",
        "--do_eval",
        "--do_predict",
        f"--albert_hub_module_handle={models['hub']}",
    )
    # As the original, the second command evaluates both checkpoints and reports the best.
    best = read_key_values(out / "best_checkpoint.txt")["global_step"]
    assert read_key_values(out / "eval_results.txt")["global_step"] == best in ("1", "2")


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_readme_run_squad(tmp_path, models, version):
    if version == "v1":
        train = write_marker_squad(tmp_path / "train.json", 24, seed=0)
        predict = write_marker_squad(tmp_path / "dev.json", 6, seed=1)
    else:
        train = write_squad_v2(tmp_path / "train.json", 18, seed=0)
        predict = write_squad_v2(tmp_path / "dev.json", 6, seed=1)
    out = tmp_path / "out"
    features = tmp_path / "features"
    train_flags = (
        ["--do_train=true", "--do_predict=true"]
        if version == "v1"
        else ["--do_train", "--do_predict"]
    )
    run(
        f"albert.run_squad_{version}",
        f"--albert_config_file={models['config']}",
        f"--output_dir={out}",
        f"--train_file={train}",
        f"--predict_file={predict}",
        f"--train_feature_file={features / 'train.tfrecord'}",
        f"--predict_feature_file={features / 'predict.tfrecord'}",
        f"--predict_feature_left_file={features / 'predict_left'}",
        f"--init_checkpoint={models['init']}",
        f"--spm_model_file={models['spm']}",
        "--do_lower_case",
        "--max_seq_length=64",
        "--doc_stride=32",
        "--max_query_length=16",
        *train_flags,
        "--train_batch_size=16",
        "--predict_batch_size=8",
        "--learning_rate=5e-5",
        "--num_train_epochs=2.0",
        "--warmup_proportion=.1",
        "--save_checkpoints_steps=5000",
        "--n_best_size=20",
        "--max_answer_length=30",
    )
    # int(24 questions / 16 * 2 epochs): 24 answerable (v1), 18 + 6 unanswerable (v2).
    results = read_key_values(out / "eval_results.txt")
    assert int(results["global_step"]) == 3
    assert "f1" in results and (out / "predictions.json").exists()
    if version == "v2":
        assert "null_score_diff_threshold" in results and (out / "null_odds.json").exists()
    assert any(features.iterdir()) and not (features / "predict_left").exists()


def test_readme_run_race(tmp_path, models):
    data_dir = write_race(tmp_path / "data", {"train": 8, "dev": 3}, seed=0)
    out = tmp_path / "out"
    cache = tmp_path / "cache"
    run(
        "albert.run_race",
        f"--albert_config_file={models['config']}",
        f"--output_dir={out}",
        f"--train_file={cache / 'train.tf_record'}",
        f"--eval_file={cache / 'eval.tf_record'}",
        f"--data_dir={data_dir}",
        f"--init_checkpoint={models['init']}",
        f"--spm_model_file={models['spm']}",
        "--max_seq_length=64",
        "--max_qa_length=16",
        "--do_train",
        "--do_eval",
        "--train_batch_size=4",
        "--eval_batch_size=8",
        "--learning_rate=1e-5",
        "--train_step=2",
        "--warmup_step=1",
        "--save_checkpoints_steps=2",
    )
    results = read_key_values(out / "eval_results.txt")
    assert int(results["global_step"]) == 2 and 0 <= float(results["accuracy"]) <= 1
    assert np.isfinite(float(results["accuracy"])) and any(cache.iterdir())


def test_original_create_pretraining_data_flags(tmp_path):
    # Every flag of the original create_pretraining_data.py, in the forms its users write
    # (`--flag=True`, a comma-separated output list, both vocabulary files).
    tokenizer = TESTS / "fixtures" / "tokenizer"
    outputs = [tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"]
    run(
        "albert.create_pretraining_data",
        f"--input_file={tokenizer / 'sample_text.txt'}",
        f"--output_file={','.join(map(str, outputs))}",
        f"--vocab_file={tokenizer / 'tiny.vocab'}",
        f"--spm_model_file={tokenizer / 'tiny.model'}",
        "--input_file_mode=r",
        "--do_lower_case=True",
        "--do_whole_word_mask=True",
        "--nodo_permutation",
        "--favor_shorter_ngram",
        "--random_next_sentence=False",
        "--max_seq_length=64",
        "--ngram=3",
        "--max_predictions_per_seq=10",
        "--random_seed=12345",
        "--dupe_factor=2",
        "--masked_lm_prob=0.15",
        "--short_seq_prob=0.1",
        "--parallel",
    )
    import tensorflow as tf

    spec = {
        "input_ids": tf.io.FixedLenFeature([64], tf.int64),
        "token_boundary": tf.io.FixedLenFeature([64], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([10], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([10], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }
    records = list(tf.data.TFRecordDataset([str(p) for p in outputs]))
    assert records and all(p.stat().st_size > 0 for p in outputs)
    for record in records:
        tf.io.parse_single_example(record, spec)
