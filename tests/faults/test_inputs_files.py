"""Result files go through tf.io.gfile (ram:// here, gs:// in production), written whole;
truncated feature caches are rebuilt with a warning instead of failing mid-run."""

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from albert import fileio
from albert.data import features as feature_lib
from albert.data import race, squad, squad_postprocessing
from albert.data.glue import InputExample
from albert.metrics import squad as squad_metrics
from albert.metrics import write_eval_results
from albert.metrics.squad_threshold import tune_null_threshold
from albert.tasks import glue_submission


@pytest.fixture
def ram_dir():
    """A fresh in-memory folder; a local folder named "ram:" must never appear."""
    return f"ram://faults-{uuid.uuid4().hex}/out"


def _read(path):
    with tf.io.gfile.GFile(path) as f:
        return f.read()


def _no_temporaries(directory):
    return [name for name in tf.io.gfile.listdir(directory) if fileio.is_temporary(name)]


def test_squad_predictions_land_on_the_gfile_path(ram_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    predictions = {"q1": "Paris", "q2": ""}
    nbest = {"q1": [{"text": "Paris", "probability": 1.0}], "q2": [{"text": ""}]}
    paths = squad_postprocessing.write_predictions(ram_dir, predictions, nbest, {"q1": -2.0})
    assert paths == {
        kind: f"{ram_dir}/{name}"
        for kind, name in (
            ("predictions", "predictions.json"),
            ("nbest", "nbest_predictions.json"),
            ("null_odds", "null_odds.json"),
        )
    }
    assert json.loads(_read(paths["predictions"])) == predictions
    assert json.loads(_read(paths["nbest"])) == nbest
    assert json.loads(_read(paths["null_odds"])) == {"q1": -2.0}
    assert _no_temporaries(ram_dir) == []
    assert list(tmp_path.iterdir()) == []  # nothing under a local "ram:" folder


def test_squad_threshold_rewrite_and_eval_read_ram(ram_dir):
    dataset = [
        {
            "paragraphs": [
                {
                    "context": "Paris is big.",
                    "qas": [
                        {
                            "id": "q1",
                            "question": "?",
                            "answers": [{"text": "Paris", "answer_start": 0}],
                        },
                        {"id": "q2", "question": "?", "answers": [], "is_impossible": True},
                    ],
                }
            ]
        }
    ]
    fileio.write_text(f"{ram_dir}/dev.json", json.dumps({"version": "v2.0", "data": dataset}))
    loaded = squad_metrics.load_json(f"{ram_dir}/dev.json", "SQuAD dataset file")
    assert loaded["data"] == dataset
    tuned = tune_null_threshold(
        dataset, {"q1": "Paris", "q2": "big"}, {"q1": -5.0, "q2": 3.0}, output_dir=ram_dir
    )
    assert json.loads(_read(f"{ram_dir}/predictions.json")) == tuned.predictions
    assert tuned.predictions == {"q1": "Paris", "q2": ""}


def test_glue_submission_test_results_and_eval_results_on_ram(ram_dir):
    examples = [InputExample(str(i), "a", "b") for i in (7, 8, 9)]
    probabilities = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]], np.float32)
    submission = glue_submission.write_submission(ram_dir, "mrpc", examples, probabilities)
    assert submission == f"{ram_dir}/MRPC.tsv"
    assert _read(submission) == "index\tprediction\n7\t0\n8\t1\n9\t0\n"
    results = glue_submission.write_test_results(ram_dir, probabilities)
    assert len(_read(results).splitlines()) == 3
    path = write_eval_results(ram_dir, {"accuracy": 0.5}, append=True)
    write_eval_results(ram_dir, {"accuracy": 0.75}, append=True)
    assert _read(path) == f"accuracy = 0.5\n{'=' * 50}\naccuracy = 0.75\n{'=' * 50}\n"
    assert _no_temporaries(ram_dir) == []


def test_race_predictions_on_ram(ram_dir):
    examples = [race.RaceExample("high/1.txt-0", "t", "q", ["a", "b", "c", "d"], 1, "high")]
    race.write_predictions(f"{ram_dir}/predictions.json", examples, [2])
    assert json.loads(_read(f"{ram_dir}/predictions.json")) == {"high/1.txt-0": "C"}


def test_failed_write_leaves_the_previous_file_byte_identical(tmp_path):
    path = tmp_path / "predictions.json"
    path.write_bytes(b'{"q1": "before"}\n')
    unserializable = {"q1": object()}
    with pytest.raises(TypeError):
        squad_postprocessing.write_predictions(str(tmp_path), unserializable, {})
    assert path.read_bytes() == b'{"q1": "before"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions.json"]


FEATURES = [{"input_ids": [i, i + 1, 0], "label_ids": i % 2} for i in range(40)]


def _load(path, calls):
    def create():
        calls.append(1)
        return FEATURES

    return feature_lib.load_or_create_features(str(path), create)


def _rows(cached):
    return [int(f["input_ids"][0]) for f in cached.dataset]


def test_truncated_feature_cache_is_rebuilt_with_a_warning(tmp_path, caplog):
    path, calls = tmp_path / "cache" / "mrpc_train.tfrecord", []
    assert not _load(path, calls).from_cache
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    cached = _load(path, calls)
    assert not cached.from_cache and len(calls) == 2
    assert f"The feature cache {path} is truncated ({len(data) // 2} of {len(data)} bytes)" in (
        caplog.text
    )
    assert _rows(cached) == list(range(40)) and path.read_bytes() == data
    assert _load(path, calls).from_cache and len(calls) == 2


def test_truncated_cache_without_recorded_size_is_found_by_its_checksums(tmp_path, caplog):
    path, calls = tmp_path / "old.tfrecord", []
    _load(path, calls)
    schema_file = Path(feature_lib.schema_path(str(path)))
    schema = json.loads(schema_file.read_text())
    del schema["num_bytes"]  # a cache written before the size was recorded
    schema_file.write_text(json.dumps(schema))
    path.write_bytes(path.read_bytes()[:-7])
    cached = _load(path, calls)
    assert not cached.from_cache and len(calls) == 2
    assert "is truncated or corrupted (a record fails its checksum); rebuilding it" in caplog.text
    assert _rows(cached) == list(range(40))


def test_damaged_schema_is_rebuilt(tmp_path, caplog):
    path, calls = tmp_path / "c.tfrecord", []
    _load(path, calls)
    (tmp_path / "c.tfrecord.json").write_text('{"num_exa')
    assert not _load(path, calls).from_cache and len(calls) == 2
    assert "is damaged (its schema" in caplog.text


TINY_SPM = Path(__file__).resolve().parents[1] / "fixtures" / "tokenizer" / "tiny.model"


def test_truncated_squad_metadata_is_rebuilt(tmp_path, caplog):
    from albert.tokenization import FullTokenizer

    tokenizer = FullTokenizer(spm_model_file=str(TINY_SPM))
    paragraphs = [
        {
            "context": f"The river {i} flows to the sea.",
            "qas": [
                {
                    "id": f"q{i}",
                    "question": "Where does it flow?",
                    "answers": [{"text": "the sea", "answer_start": 20 + len(str(i))}],
                }
            ],
        }
        for i in range(12)
    ]
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps({"version": "1.1", "data": [{"paragraphs": paragraphs}]}))
    settings = dict(max_seq_length=32, doc_stride=8, max_query_length=8, cache_dir=tmp_path / "c")
    first = squad.load_features(str(dev), tokenizer, False, **settings)
    sidecar = Path(squad.metadata_path(first.path))
    data = sidecar.read_bytes()
    sidecar.write_bytes(data[: len(data) - 5])
    again = squad.load_features(str(dev), tokenizer, False, **settings)
    assert f"The feature cache {sidecar} is truncated or damaged (" in caplog.text
    assert not again.from_cache and len(again.features) == len(first.features)
    assert sidecar.read_bytes() == data
