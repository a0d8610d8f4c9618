"""run_race.py end to end on a learnable synthetic RACE set (the right option is the one
word of a small set, and it appears in the article; the three others are filler words), with per-level accuracy, the prediction
files and one-line user errors."""

import json
from pathlib import Path

import numpy as np
import pytest
import synthetic_glue as synthetic
import tensorflow as tf
from absl import flags

from albert.data import race as race_data
from albert.tasks import engine, race
from albert.tokenization import FullTokenizer
from albert.training.checkpointing import read_key_values

# Single pieces of the tiny SentencePiece model, never among the filler words.
OPTIONS = (
    "anarchism",
    "capitalism",
    "tactics",
    "autonomy",
    "workers",
    "authority",
    "marx",
    "human",
)


def write_race(directory, counts, seed):
    """RACE/{split}/{middle,high}/*.txt with one question per article; returns directory."""
    rng = np.random.default_rng(seed)
    for split, count in counts.items():
        for level in race_data.LEVELS:
            folder = Path(directory) / "RACE" / split / level
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                options = [str(o) for o in rng.choice(synthetic.WORDS, size=4, replace=False)]
                label = int(rng.integers(0, 4))
                options[label] = str(rng.choice(OPTIONS))
                words = list(rng.choice(synthetic.WORDS, size=int(rng.integers(5, 20))))
                words.insert(int(rng.integers(0, len(words) + 1)), options[label])
                article = {
                    "id": f"{level}{i}.txt",
                    "article": " ".join(words),
                    "questions": ["which word is in the text"],
                    "options": [options],
                    "answers": ["ABCD"[label]],
                }
                (folder / f"{level}{i}.txt").write_text(json.dumps(article), encoding="utf-8")
    return str(directory)


def run_race(*args):
    """run_race.py in this process (private FlagValues); returns (metrics, flag values)."""
    flag_values = flags.FlagValues()
    race.define_race_flags(flag_values)
    flag_values(["run_race.py", f"--spm_model_file={synthetic.SPM_MODEL}", *args])
    return race.run_from_flags(flag_values), flag_values


@pytest.mark.slow
def test_synthetic_race_is_learned(tmp_path, absl_caplog):
    data_dir = write_race(tmp_path / "data", {"train": 150, "dev": 30, "test": 11}, seed=0)
    config = synthetic.write_config(tmp_path / "config.json")
    output_dir = tmp_path / "out"
    metrics, _ = run_race(
        f"--data_dir={data_dir}",
        f"--albert_config_file={config}",
        f"--output_dir={output_dir}",
        "--max_seq_length=32",
        "--max_qa_length=10",
        "--train_batch_size=16",
        "--eval_batch_size=9",
        "--predict_batch_size=5",
        "--learning_rate=1e-3",
        "--warmup_step=20",
        "--albert_dropout_prob=0",
        "--classifier_dropout_prob=0",
        "--train_step=200",
        "--save_checkpoints_steps=200",
        "--iterations_per_loop=50",
        "--jit_compile",  # RACE's head under XLA (the suite's runs are otherwise XLA off)
        "--do_train",
        "--do_eval",
        "--do_predict",
    )
    assert metrics["accuracy"] > 0.6, metrics  # chance is 0.25; 1.0 is typical
    assert "stuck at chance" not in absl_caplog.text  # warned only for one class predicted
    assert metrics["middle_num_examples"] == metrics["high_num_examples"] == 30
    results = read_key_values(output_dir / "eval_results.txt")
    for key in ("accuracy", "middle_accuracy", "high_accuracy", "global_step"):
        assert key in results, key
    assert float(results["accuracy"]) == pytest.approx(metrics["accuracy"])
    predictions = json.loads((output_dir / "predictions.json").read_text())
    test = race_data.read_race_examples(data_dir, "test")
    assert list(predictions) == [e.example_id for e in test]
    assert set(predictions.values()) <= set("ABCD")
    test_results = read_key_values(output_dir / "predict_results.txt")  # the original's name
    assert results["eval_accuracy"] == results["accuracy"]  # and its key, in both files
    assert test_results["eval_accuracy"] == test_results["accuracy"]
    correct = sum(predictions[e.example_id] == "ABCD"[e.label] for e in test)
    assert float(test_results["accuracy"]) == pytest.approx(correct / len(test))


def test_one_level_and_user_errors(tmp_path):
    data_dir = write_race(tmp_path / "data", {"dev": 4}, seed=1)
    config = synthetic.write_config(tmp_path / "config.json")
    common = [
        f"--data_dir={data_dir}",
        f"--albert_config_file={config}",
        f"--output_dir={tmp_path / 'out'}",
        "--max_seq_length=32",
        "--max_qa_length=10",
    ]
    task = race.RaceTask(data_dir, None, None, 32, 10, 4, 4, 4, high_only=True)
    assert task.levels == ("high",)
    with pytest.raises(race_data.RaceDataError, match="at most one"):
        run_race(*common, "--high_only", "--middle_only", "--do_eval")
    with pytest.raises(race_data.RaceDataError, match="train"):
        run_race(*common, "--do_train", "--train_step=1")


@pytest.mark.slow
def test_export_dir_serves_the_predicted_answers(tmp_path):
    # A few steps at a high rate: the options' logits of a fresh head are nearly equal.
    data_dir = write_race(tmp_path / "data", {"train": 4, "test": 3}, seed=2)
    config = synthetic.write_config(tmp_path / "config.json")
    output_dir, export_dir = tmp_path / "out", tmp_path / "export"
    run_race(
        f"--data_dir={data_dir}",
        f"--albert_config_file={config}",
        f"--output_dir={output_dir}",
        "--max_seq_length=32",
        "--max_qa_length=10",
        "--train_batch_size=4",
        "--predict_batch_size=5",
        "--train_step=8",
        "--learning_rate=1e-2",
        "--warmup_step=0",
        "--do_train",
        "--do_predict",
        f"--export_dir={export_dir}",
    )
    predictions = json.loads((output_dir / "predictions.json").read_text())
    assert len(set(predictions.values())) > 1  # else the letters would match by chance
    test = race_data.read_race_examples(data_dir, "test")
    serve = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
    served = serve(
        article=tf.constant([e.article for e in test]),
        question=tf.constant([e.question for e in test]),
        options=tf.constant([e.options for e in test]),
    )
    assert [a.decode() for a in served["answer"].numpy()] == [
        predictions[e.example_id] for e in test
    ]
    assert np.max(np.abs(served["probabilities"].numpy().sum(axis=1) - 1.0)) < 1e-5


def test_export_needs_a_sentencepiece_model(tmp_path):
    vocab_file = str(Path(synthetic.SPM_MODEL).with_suffix(".vocab"))
    task = race.RaceTask(str(tmp_path), FullTokenizer(vocab_file=vocab_file), None, 32, 10, 4, 4, 4)
    with pytest.raises(engine.FineTuningError, match="--export_dir needs --spm_model_file"):
        task.check_export()


def test_the_originals_feature_file_flags_select_each_roles_cache(monkeypatch):
    from types import SimpleNamespace

    setup = SimpleNamespace(tokenizer=None, config=None, strategy=None, options=None)
    monkeypatch.setattr(race.finetuning_flags, "setup_from_flags", lambda *args: setup)
    monkeypatch.setattr(race.engine, "run_with_flags", lambda task, *args: task)
    flag_values = flags.FlagValues()
    race.define_race_flags(flag_values)
    flag_values(
        [
            "run_race",
            "--output_dir=out",
            "--max_seq_length=16",
            "--train_file=train_dir/train.tf_record",
            "--eval_file=dev_dir/eval.tf_record",
            "--predict_file=test_dir/predict.tf_record",
        ]
    )
    task = race.run_from_flags(flag_values)
    assert task.cached_dir == {
        engine.TRAIN: "train_dir",
        engine.EVAL: "dev_dir",
        engine.PREDICT: "test_dir",
    }
