"""The driver end to end: determinism across workers, sharding, summary, flag errors, script."""

import dataclasses
import logging
import os
import random
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from albert.data.create_pretraining_data import (
    PretrainingDataConfig,
    PretrainingDataError,
    Summary,
    create_pretraining_data,
    expand_input_files,
    unit_seed,
)
from albert.data.pretraining import InstanceOptions, InstanceOptionsError
from albert.tokenization import TokenizerError
from tests.helpers import TINY_TEXT, train_tiny_spm

REPO = Path(__file__).resolve().parents[2]
SHARED_CORPUS = REPO.parent / "shared" / "data" / "corpus"
SENTENCES = [line for line in TINY_TEXT.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    return train_tiny_spm(tmp_path_factory.mktemp("spm"), do_lower_case=True)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """Two plain files and one WikiExtractor file, with a one-sentence document."""
    directory = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    for name, num_documents in (("a.txt", 23), ("b.txt", 9)):
        documents = [
            "\n".join(rng.choice(SENTENCES) for _ in range(rng.randint(3, 9)))
            for _ in range(num_documents)
        ]
        (directory / name).write_text("\n\n".join(documents + ["Alone in its document."]))
    wiki = "".join(
        f'<doc id="{d}" url="u" title="T{d}">\nT{d}\n\n{" ".join(rng.sample(SENTENCES, 5))}\n</doc>\n'
        for d in range(4)
    )
    (directory / "wiki_00").write_text(wiki)
    return directory


def _config(corpus_dir, spm_model, output, **overrides):
    instance = InstanceOptions(max_seq_length=128, max_predictions_per_seq=9, dupe_factor=3)
    config = PretrainingDataConfig(
        input_file=f"{corpus_dir}/*.txt,{corpus_dir}/wiki_*",
        output_file=str(output),
        spm_model_file=spm_model,
        num_workers=1,
        instance=instance,
        unit_chars=400,  # Many small units, so ordering and sharding are exercised.
    )
    return dataclasses.replace(config, **overrides)


def _read_all(paths):
    return [Path(p).read_bytes() for p in paths]


def test_output_is_byte_identical_whatever_the_number_of_workers(tmp_path, corpus_dir, spm_model):
    outputs = {}
    for workers in (1, 2):
        config = _config(
            corpus_dir, spm_model, tmp_path / f"w{workers}" / "data", num_workers=workers
        )
        config = dataclasses.replace(config, num_output_shards=3)
        summary = create_pretraining_data(config)
        outputs[workers] = _read_all(summary.output_files)
        assert [Path(p).name for p in summary.output_files] == [
            f"data-0000{i}-of-00003" for i in range(3)
        ]
    assert outputs[1] == outputs[2]
    assert all(len(data) > 1000 for data in outputs[1])  # Every shard gets passes.
    other_seed = _config(corpus_dir, spm_model, tmp_path / "seed", random_seed=1)
    assert _read_all(create_pretraining_data(other_seed).output_files)[0] != outputs[1][0]


def test_summary_counts_and_progress(tmp_path, corpus_dir, spm_model, caplog):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "empty.txt").write_bytes(b"\n\n")
    (extra / "latin1.txt").write_bytes(b"Caf\xe9 au lait.\nTwo sentences here.\n")
    (extra / "one_line.txt").write_text(" ".join(SENTENCES) * 80)  # 150 kB, no newline.
    config = _config(corpus_dir, spm_model, tmp_path / "out", progress_seconds=0.0)
    config = dataclasses.replace(config, input_file=config.input_file + f",{extra}/*")
    with caplog.at_level(logging.INFO, logger="absl"):
        summary = create_pretraining_data(config)
    corpus = summary.corpus
    assert corpus.files == 6 and corpus.empty_files == 1 and corpus.invalid_utf8_lines == 1
    assert corpus.long_lines == 1  # Cut into 64 kB pieces: one document of 3 "sentences".
    assert corpus.documents == 23 + 1 + 9 + 1 + 4 + 1 + 1
    assert summary.documents_skipped == 2 and summary.documents_used == corpus.documents - 2
    assert summary.instances > 150 and summary.tokens > 3000
    assert 0.4 < summary.label_ones / summary.instances < 0.75
    assert any("instances (" in r.getMessage() for r in caplog.records)  # Progress.
    gathered = f"Global shuffle: gathered {summary.buckets}/{summary.buckets} buckets (100%)"
    assert any(r.getMessage().startswith(gathered) for r in caplog.records)
    assert any("skipped 2 with fewer than 2 sentences" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"do_permutation": True}, PretrainingDataError, "--do_permutation"),
        ({"input_file": "/nonexistent/*.txt"}, PretrainingDataError, "matches no file"),
        ({"num_workers": 0}, PretrainingDataError, "--num_workers"),
        ({"num_output_shards": 0}, PretrainingDataError, "--num_output_shards"),
        ({"bucket_bytes": 1 << 19}, PretrainingDataError, "--shuffle_bucket_mb must be >= 1"),
        ({"spm_model_file": "/nonexistent.model"}, TokenizerError, "spm_model_file"),
        ({"spm_model_file": None}, TokenizerError, "neither was given"),
        (
            {"instance": InstanceOptions(max_seq_length=16, max_predictions_per_seq=20)},
            InstanceOptionsError,
            "--max_predictions_per_seq",
        ),
        ({"instance": InstanceOptions(masked_lm_prob=0.0)}, InstanceOptionsError, "masked_lm"),
    ],
)
def test_bad_flags_raise_one_clear_error(
    tmp_path, corpus_dir, spm_model, overrides, error, message
):
    config = dataclasses.replace(_config(corpus_dir, spm_model, tmp_path / "out"), **overrides)
    with pytest.raises(error, match=message):
        create_pretraining_data(config)


def test_output_that_is_an_input_or_inputs_without_instances(tmp_path, spm_model):
    text = tmp_path / "one_sentence_documents.txt"
    text.write_text("Only one.\n\nAnd another one.\n")
    clash = PretrainingDataConfig(
        input_file=str(text), output_file=str(text), spm_model_file=spm_model
    )
    with pytest.raises(PretrainingDataError, match="also an input"):
        create_pretraining_data(clash)
    same_file = dataclasses.replace(clash, output_file=f"{tmp_path}/./{text.name}")
    with pytest.raises(PretrainingDataError, match="also an input"):
        create_pretraining_data(same_file)
    empty = dataclasses.replace(clash, output_file=str(tmp_path / "out"), num_workers=1)
    with pytest.raises(PretrainingDataError, match="fewer than 2 sentences"):
        create_pretraining_data(empty)


def test_an_output_file_named_twice_is_refused(tmp_path, corpus_dir, spm_model):
    # Two shards written to one path: the second replaced the first, and the summary still
    # counted the lost instances as written.
    out = tmp_path / "out"
    twice = f"{out / 'a'},{out / 'b'},{out}/./a"
    config = dataclasses.replace(_config(corpus_dir, spm_model, out), output_file=twice)
    with pytest.raises(PretrainingDataError, match=re.escape(f"names {out}/./a twice")):
        create_pretraining_data(config)
    assert not out.exists()


def test_wordpiece_vocab_without_a_sentencepiece_model(tmp_path, corpus_dir):
    words = sorted({w for line in SENTENCES for w in re.findall(r"\w+|[^\w\s]", line.lower())})
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (tmp_path / "vocab.txt").write_text("\n".join(specials + words + ["##s"]))
    config = _config(corpus_dir, None, tmp_path / "out", vocab_file=str(tmp_path / "vocab.txt"))
    summary = create_pretraining_data(config)
    assert summary.instances > 100 and summary.documents_used > 30


def test_default_workers_where_os_has_no_sched_getaffinity(
    tmp_path, corpus_dir, spm_model, monkeypatch
):
    # macOS has no os.sched_getaffinity: --num_workers left out counts the machine's cores.
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    config = _config(corpus_dir, spm_model, tmp_path / "out", num_workers=None)
    assert create_pretraining_data(config).instances > 100


def test_workers_do_not_load_tensorflow():
    # Workers import these modules; TensorFlow would cost seconds and ~500 MB each.
    code = (
        "import sys, albert.data.create_pretraining_data, albert.data.pretraining;"
        "assert not {'tensorflow', 'keras'} & set(sys.modules), 'TensorFlow was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_a_worker_that_cannot_start_fails_the_run_instead_of_hanging(tmp_path, corpus_dir):
    # The parent builds its own worker first, so a bad model file fails there; but a model
    # that goes away (or a worker that runs out of memory) after that used to hang the run:
    # the pool re-spawned the failing initializer forever and the first result never came.

    config = _config(corpus_dir, str(tmp_path / "gone.model"), tmp_path / "out")
    outcome = _first_result_of_two_workers(config, ("a.txt", 0, [["One.", "Two.", "Three."]]))
    assert isinstance(outcome, TokenizerError) and "gone.model" in str(outcome)


def _first_result_of_two_workers(config, task):
    """The first result (or error) of `task` run on 2 worker processes; fails the test when
    none comes within 60 s (the run hangs)."""
    from albert.data.create_pretraining_data import _UnitRunner

    runner = _UnitRunner(config, num_workers=2, worker=None)
    outcome = []

    def first_result():
        try:
            outcome.append(next(runner.results([task])))
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=first_result, daemon=True)
    thread.start()
    thread.join(timeout=60)
    runner.close()
    assert not thread.is_alive(), "the run hung"
    return outcome[0]


class _EndsTheWorker:
    """Unpickled in a worker, ends its process at once, as the kernel's OOM killer does."""

    def __reduce__(self):
        return os._exit, (9,)


def test_a_worker_killed_during_a_unit_fails_the_run_instead_of_hanging(tmp_path, spm_model):
    # multiprocessing.Pool replaces a killed worker and loses its task: the run waited
    # forever for that unit's result (a worker killed for memory, the commonest failure).
    from albert.data.create_pretraining_data import PretrainingDataError

    config = _config(str(tmp_path), spm_model, tmp_path / "out")
    outcome = _first_result_of_two_workers(config, ("a.txt", 0, _EndsTheWorker()))
    assert isinstance(outcome, PretrainingDataError)
    assert "--num_workers" in str(outcome) and "\n" not in str(outcome)


def test_unit_seeds_differ_by_seed_file_and_position():
    seeds = {unit_seed(s, p, u) for s in (1, 2) for p in ("a", "b") for u in (0, 1)}
    assert len(seeds) == 8 and unit_seed(1, "a", 0) == unit_seed(1, "a", 0)


def test_shared_corpus(tmp_path, spm_model):
    if not SHARED_CORPUS.is_dir():
        pytest.skip("shared/data/corpus is not present")
    config = PretrainingDataConfig(
        input_file=f"{SHARED_CORPUS}/wiki_00,{SHARED_CORPUS}/sample_text.txt",
        output_file=str(tmp_path / "shared.tfrecord"),
        spm_model_file=spm_model,
        num_workers=1,
        instance=InstanceOptions(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2),
    )
    summary = create_pretraining_data(config)
    assert summary.corpus.documents == 4 and summary.documents_used == 4
    assert summary.instances > 100 and summary.corpus.invalid_utf8_lines == 0


@pytest.mark.slow
def test_script_runs_and_reports_user_errors_in_one_line(tmp_path, corpus_dir, spm_model):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    script = [sys.executable, str(REPO / "create_pretraining_data.py")]
    common = [f"--spm_model_file={spm_model}", "--max_seq_length=24"]
    bad = subprocess.run(
        script + ["--input_file=/nonexistent/x*", f"--output_file={tmp_path}/o", *common],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1] == (
        "create_pretraining_data.py: error: --input_file pattern '/nonexistent/x*' matches no file."
    )
    good = subprocess.run(
        script
        + [f"--input_file={corpus_dir}/a.txt", f"--output_file={tmp_path}/o", "--num_workers=2"]
        + common
        + ["--max_predictions_per_seq=4", "--num_output_shards=2", "--dupe_factor=2"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert good.returncode == 0, good.stderr
    assert "instances to 2 files" in good.stderr
    assert os.path.getsize(f"{tmp_path}/o-00001-of-00002") > 0


def test_a_file_matched_by_two_patterns_is_read_once(corpus_dir):
    files = expand_input_files(f"{corpus_dir}/a.txt, {corpus_dir}/*.txt")
    assert files == [f"{corpus_dir}/a.txt", f"{corpus_dir}/b.txt"]


def test_summary_keeps_the_largest_worker_peak_and_sums_the_rest():
    summary = Summary()
    summary.add_unit({"instances": 3, "worker_peak_rss_mb": 20.0})
    summary.add_unit({"instances": 4, "worker_peak_rss_mb": 10.0})
    assert summary.instances == 7 and summary.worker_peak_rss_mb == 20.0


def test_several_output_files_and_a_shard_count_are_refused(tmp_path, corpus_dir, spm_model):
    config = _config(corpus_dir, spm_model, tmp_path / "out")
    two = dataclasses.replace(config, output_file=f"{tmp_path}/a,{tmp_path}/b", num_output_shards=2)
    with pytest.raises(PretrainingDataError, match="either several --output_file paths or"):
        create_pretraining_data(two)
    assert sorted(os.listdir(tmp_path)) == []
