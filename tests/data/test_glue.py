"""GLUE readers on every task's real column layout, feature conversion and the feature cache."""

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from albert import progress
from albert.data.glue import (
    GlueDataError,
    InputExample,
    convert_examples_to_features,
    get_task,
    load_features,
    read_examples,
)
from albert.tokenization import FullTokenizer

TESTS = Path(__file__).resolve().parents[1]
MODEL = str(TESTS / "fixtures" / "tokenizer" / "tiny.model")
SHARED_GLUE = TESTS.parent.parent / "shared" / "data" / "glue"

MNLI_HEAD = ["index", "promptID", "pairID", "genre"] + [
    f"sentence{i}_{kind}" for kind in ("binary_parse", "parse") for i in (1, 2)
]
MNLI_PARSES = ["( A )", "( B )", "(ROOT A)", "(ROOT B)"]
MNLI_HEADER = MNLI_HEAD + ["sentence1", "sentence2"]

# task -> {file: rows}, in the column layout of the GLUE download.
FILES = {
    "cola": {
        "train.tsv": [
            ["gj04", "1", "", "Our friends won't buy this analysis."],
            ["gj04", "0", "*", "They drank the pub."],
        ],
        "dev.tsv": [["cl10", "1", "", "The sailors rode the breeze clear of the rocks."]],
        "test.tsv": [["index", "sentence"], ["0", "Bill whistled past the house."]],
    },
    "sst-2": {
        "train.tsv": [["sentence", "label"], ["hide new secretions ", "0"], ["loves it ", "1"]],
        "dev.tsv": [["sentence", "label"], ["it 's a charming journey . ", "1"]],
        "test.tsv": [["index", "sentence"], ["0", "uneasy mishmash ."], ["1", "a chilly film ."]],
    },
    "mrpc": {
        "train.tsv": [
            ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["1", "702876", "702977", 'He said " yes .', "He agreed ."],
        ],
        "dev.tsv": [
            ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["0", "1", "2", "A b .", "C d ."],
        ],
        "test.tsv": [
            ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["0", "1089874", "1089925", "PCCW 's chief quit .", 'The " chief " quit .'],
        ],
    },
    "sts-b": {
        "train.tsv": [
            ["index", "genre", "filename", "year", "old_index", "source1", "source2"]
            + ["sentence1", "sentence2", "score"],
            ["0", "main-news", "MSRvid", "2012test", "0001", "none", "none"]
            + ["A plane takes off.", "An air plane takes off.", "5.000"],
        ],
        "dev.tsv": [
            ["index", "genre", "filename", "year", "old_index", "source1", "source2"]
            + ["sentence1", "sentence2", "score"],
            ["3", "main-captions", "MSRvid", "2012test", "0004", "none", "none"]
            + ["A man plays.", "A man sings.", "0.750"],
        ],
        "test.tsv": [
            ["index", "genre", "filename", "year", "old_index", "source1", "source2"]
            + ["sentence1", "sentence2"],
            ["0", "main-captions", "MSRvid", "2012test", "0024", "none", "none"]
            + ["A girl styles hair.", "A girl brushes hair."],
        ],
    },
    "qqp": {
        "train.tsv": [
            ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            ["133273", "213221", "213222", "How is math?", "Is math hard?", "0"],
            ["201841", "303345", "303346", "Why do rockets look white?", "Why white?"],
            ["402555", "536040", "536041", "Q one?", "Q two?", "1"],
            ["7", "8", "9", "too", "many", "1", "columns"],
        ],
        "dev.tsv": [
            ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            ["40", "1", "2", "Is it?", "It is?", "1"],
        ],
        "test.tsv": [["id", "question1", "question2"], ["0", "Why sky?", "Why blue?"]],
    },
    "mnli": {
        "train.tsv": [
            MNLI_HEADER + ["label1", "gold_label"],
            ["0", "31193", "31193n", "government"]
            + MNLI_PARSES
            + ["A.", "B.", "entailment", "neutral"],
        ],
        "dev_matched.tsv": [
            MNLI_HEADER + [f"label{i}" for i in range(1, 6)] + ["gold_label"],
            ["0", "63735", "63735n", "slate"]
            + MNLI_PARSES
            + ["C.", "D."]
            # Each annotator's label differs from the gold one somewhere: only gold is read.
            + ["neutral", "contradiction", "neutral", "neutral", "neutral", "entailment"],
        ],
        "test_matched.tsv": [
            MNLI_HEADER,
            ["0", "31", "31n", "fiction"] + MNLI_PARSES + ["E.", "F."],
        ],
        "dev_mismatched.tsv": [
            MNLI_HEADER + [f"label{i}" for i in range(1, 6)] + ["gold_label"],
            ["0", "75", "75c", "letters"] + MNLI_PARSES + ["G.", "H."] + ["contradiction"] * 6,
        ],
        "test_mismatched.tsv": [
            MNLI_HEADER,
            ["7", "1", "1n", "verbatim"] + MNLI_PARSES + ["I.", "J."],
        ],
    },
    "qnli": {
        "train.tsv": [
            ["index", "question", "sentence", "label"],
            ["0", "When?", "Then.", "entailment"],
        ],
        "dev.tsv": [
            ["index", "question", "sentence", "label"],
            ["0", "Who?", "No.", "not_entailment"],
        ],
        "test.tsv": [["index", "question", "sentence"], ["0", "Where?", "There."]],
    },
    "rte": {
        "train.tsv": [
            ["index", "sentence1", "sentence2", "label"],
            ["0", "X.", "Y.", "not_entailment"],
        ],
        "dev.tsv": [["index", "sentence1", "sentence2", "label"], ["0", "P.", "Q.", "entailment"]],
        "test.tsv": [["index", "sentence1", "sentence2"], ["0", "R.", "S."]],
    },
    "wnli": {
        "train.tsv": [
            ["index", "sentence1", "sentence2", "label"],
            ["0", "I put it.", "It is.", "1"],
        ],
        "dev.tsv": [
            ["index", "sentence1", "sentence2", "label"],
            ["0", "The cat.", "It sat.", "0"],
        ],
        "test.tsv": [["index", "sentence1", "sentence2"], ["0", "Lily spoke.", "She did."]],
    },
}
FILES["ax"] = {
    os.path.join("diagnostic", "diagnostic.tsv"): [
        ["index", "sentence1", "sentence2"],
        ["0", "The cat sat on the mat.", "The cat did not sit on the mat."],
    ]
}

# (task, split) -> the examples the reader must return.
EXPECTED = {
    ("cola", "train"): [
        InputExample("train-1", "Our friends won't buy this analysis.", None, "1"),
        InputExample("train-2", "They drank the pub.", None, "0"),
    ],
    ("cola", "dev"): [
        InputExample("dev-1", "The sailors rode the breeze clear of the rocks.", None, "1")
    ],
    ("cola", "test"): [InputExample("0", "Bill whistled past the house.")],
    ("sst-2", "train"): [
        InputExample("train-2", "hide new secretions ", None, "0"),
        InputExample("train-3", "loves it ", None, "1"),
    ],
    ("sst-2", "test"): [
        InputExample("0", "uneasy mishmash ."),
        InputExample("1", "a chilly film ."),
    ],
    ("mrpc", "train"): [InputExample("train-2", 'He said " yes .', "He agreed .", "1")],
    ("mrpc", "test"): [InputExample("0", "PCCW 's chief quit .", 'The " chief " quit .')],
    ("sts-b", "train"): [InputExample("0", "A plane takes off.", "An air plane takes off.", 5.0)],
    ("sts-b", "dev"): [InputExample("3", "A man plays.", "A man sings.", 0.75)],
    ("sts-b", "test"): [InputExample("0", "A girl styles hair.", "A girl brushes hair.")],
    ("qqp", "train"): [
        InputExample("133273", "How is math?", "Is math hard?", "0"),
        InputExample("402555", "Q one?", "Q two?", "1"),
    ],
    ("qqp", "test"): [InputExample("0", "Why sky?", "Why blue?")],
    ("mnli", "train"): [InputExample("0", "A.", "B.", "neutral")],
    ("mnli", "dev"): [InputExample("0", "C.", "D.", "entailment")],
    ("mnli", "test"): [InputExample("0", "E.", "F.")],
    ("mismnli", "dev"): [InputExample("0", "G.", "H.", "contradiction")],
    ("mismnli", "test"): [InputExample("7", "I.", "J.")],
    ("qnli", "train"): [InputExample("0", "When?", "Then.", "entailment")],
    ("qnli", "dev"): [InputExample("0", "Who?", "No.", "not_entailment")],
    ("qnli", "test"): [InputExample("0", "Where?", "There.")],
    ("rte", "train"): [InputExample("0", "X.", "Y.", "not_entailment")],
    ("rte", "test"): [InputExample("0", "R.", "S.")],
    ("wnli", "dev"): [InputExample("0", "The cat.", "It sat.", "0")],
    ("wnli", "test"): [InputExample("0", "Lily spoke.", "She did.")],
    ("ax", "test"): [
        InputExample("0", "The cat sat on the mat.", "The cat did not sit on the mat.")
    ],
}


def write_task(directory, task, files=None):
    """Writes a task's tiny files under `directory` (tab-joined rows, one per line)."""
    for name, rows in (files or FILES[task]).items():
        path = Path(directory) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")
    return str(directory)


@pytest.mark.parametrize("task, split", sorted(EXPECTED))
def test_reader_on_the_real_layout(tmp_path, task, split):
    data_dir = write_task(tmp_path, "mnli" if task == "mismnli" else task)
    assert read_examples(task, data_dir, split) == EXPECTED[(task, split)]


def test_task_names_are_case_insensitive_with_aliases():
    assert get_task("SST2").name == get_task("SST-2").name == "sst-2"
    assert get_task("StsB").name == get_task("sts-b").name == "sts-b"
    assert get_task("MNLI").submission_file == "MNLI-m.tsv"
    assert get_task("MisMNLI").submission_file == "MNLI-mm.tsv"
    assert get_task("sts-b").is_regression and get_task("sts-b").num_labels == 1
    assert get_task("mnli").labels == ("contradiction", "entailment", "neutral")
    assert get_task("rte").labels == get_task("qnli").labels == ("entailment", "not_entailment")
    with pytest.raises(GlueDataError, match="Unknown --task_name='mnlii'; choose one of cola"):
        get_task("mnlii")


def test_glue_root_as_data_dir_finds_the_task_folder(tmp_path):
    write_task(tmp_path / "MRPC", "mrpc")
    assert read_examples("mrpc", str(tmp_path), "train") == EXPECTED[("mrpc", "train")]
    write_task(tmp_path, "ax", {"AX.tsv": FILES["ax"]["diagnostic/diagnostic.tsv"]})
    assert read_examples("ax", str(tmp_path), "test") == EXPECTED[("ax", "test")]


def test_qqp_malformed_rows_are_skipped_and_counted(tmp_path, caplog):
    data_dir = write_task(tmp_path, "qqp")
    with caplog.at_level(logging.WARNING):
        examples = read_examples("qqp", data_dir, "train")
    assert len(examples) == 2
    assert "Skipped 2 malformed rows" in caplog.text
    # A test row cannot be skipped: the submission needs every index.
    rows = FILES["qqp"]["test.tsv"] + [["1", "Only one question?"]]
    write_task(tmp_path, "qqp", {"test.tsv": rows})
    with pytest.raises(GlueDataError, match="line 3 has 2 tab-separated columns"):
        read_examples("qqp", data_dir, "test")


def test_missing_file_names_the_files_looked_for(tmp_path):
    with pytest.raises(GlueDataError, match="No mrpc dev file in --data_dir=") as error:
        read_examples("mrpc", str(tmp_path), "dev")
    assert os.path.join(str(tmp_path), "MRPC", "dev.tsv") in str(error.value)
    with pytest.raises(GlueDataError, match="only a test set"):
        read_examples("ax", str(tmp_path), "train")


def test_missing_column_names_file_line_and_column(tmp_path):
    rows = [["index", "sentence1", "sentence2", "label"], ["0", "A.", "B.", "entailment"]]
    write_task(tmp_path, "rte", {"dev.tsv": rows + [["1", "C.", "D."]]})
    expected = "dev.tsv line 3 has 3 tab-separated columns, but rte needs 4 to read its label"
    with pytest.raises(GlueDataError, match=expected):
        read_examples("rte", str(tmp_path), "dev")


def test_a_wrong_label_or_score_names_the_line(tmp_path):
    # A CoLA train file with a header: the original has none, so the header is a data row.
    write_task(tmp_path, "cola", {"train.tsv": [["source", "label", "orig", "sentence"]]})
    with pytest.raises(GlueDataError, match="train.tsv line 1 has the label 'label'"):
        read_examples("cola", str(tmp_path), "train")
    header = FILES["sts-b"]["dev.tsv"][0]
    write_task(tmp_path, "sts-b", {"dev.tsv": [header, ["0"] * 9 + ["high"]]})
    with pytest.raises(GlueDataError, match="line 2 has the score 'high'"):
        read_examples("sts-b", str(tmp_path), "dev")
    write_task(tmp_path, "sts-b", {"dev.tsv": [header, ["0"] * 9 + ["nan"]]})
    with pytest.raises(GlueDataError, match="line 2 has the score 'nan'"):
        read_examples("sts-b", str(tmp_path), "dev")


@pytest.mark.skipif(not SHARED_GLUE.is_dir(), reason="../shared/data/glue is not present")
def test_real_mrpc_and_stsb_rows():
    mrpc = read_examples("mrpc", str(SHARED_GLUE), "train")
    assert [e.label for e in mrpc] == ["1", "0", "0", "1", "0", "1"]
    # Unbalanced quotes stay in their own field and row.
    assert (
        mrpc[0].text_b
        == '" The foodservice pie business does not fit our long-term growth strategy .'
    )
    assert mrpc[1].text_b.count('"') == 2 and mrpc[1].text_b.endswith("in the war .")
    assert len(read_examples("mrpc", str(SHARED_GLUE / "MRPC"), "dev")) == 6
    stsb = read_examples("stsb", str(SHARED_GLUE), "train")
    assert [e.label for e in stsb] == [5.0, 3.8, 3.8, 2.6, 4.25, 4.25, 0.5, 1.6, 2.2]
    assert stsb[6] == InputExample("6", "A man is smoking.", "A man is skating.", 0.5)


class CountingTokenizer(FullTokenizer):
    """FullTokenizer that counts `tokenize` calls, to tell whether the cache was used."""

    calls = 0

    def tokenize(self, text):
        CountingTokenizer.calls += 1
        return super().tokenize(text)


def test_conversion_layout_labels_and_truncation():
    tokenizer = FullTokenizer(spm_model_file=MODEL)
    examples = EXPECTED[("mnli", "dev")] + EXPECTED[("mnli", "test")]
    features = convert_examples_to_features(examples, "mnli", 13, tokenizer)
    ids = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in ("C.", "D.")]
    expected = [2, *ids[0], 3, *ids[1], 3]
    assert features[0]["input_ids"] == expected + [0] * (13 - len(expected))
    assert features[0]["input_mask"] == [1] * len(expected) + [0] * (13 - len(expected))
    assert features[0]["segment_ids"] == [0] * (len(ids[0]) + 2) + [1] * (len(ids[1]) + 1) + [0] * (
        13 - len(expected)
    )
    assert [f["label_ids"] for f in features] == [1, 0]  # entailment; test -> 0
    assert all(f["is_real_example"] == 1 for f in features)
    long = [InputExample("0", "The quick brown fox jumps over the lazy dog.", None, "1")]
    (single,) = convert_examples_to_features(long, "sst-2", 7, tokenizer)
    full = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(long[0].text_a))
    assert single["input_ids"] == [2, *full[:5], 3] and single["label_ids"] == 1
    stsb = convert_examples_to_features(EXPECTED[("sts-b", "dev")], "sts-b", 32, tokenizer)
    assert stsb[0]["label_ids"] == 0.75 and isinstance(stsb[0]["label_ids"], float)


def test_conversion_logs_its_progress(monkeypatch, absl_caplog):
    # MNLI's 393k pairs take minutes: a line every PROGRESS_SECONDS (here every example).
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)
    tokenizer = FullTokenizer(spm_model_file=MODEL)
    examples = EXPECTED[("mnli", "dev")] + EXPECTED[("mnli", "test")]
    convert_examples_to_features(examples, "mnli", 13, tokenizer)
    assert "mnli: tokenized 2/2 examples (100%) | " in absl_caplog.text


def test_load_features_caches_and_skips_tokenization_the_second_time(tmp_path):
    data_dir = write_task(tmp_path / "glue", "mrpc")
    cache_dir = str(tmp_path / "cache")
    tokenizer = CountingTokenizer(spm_model_file=MODEL, do_lower_case=True)
    CountingTokenizer.calls = 0
    first = load_features("MRPC", data_dir, "test", tokenizer, 16, cache_dir)
    assert (first.from_cache, CountingTokenizer.calls) == (False, 2)
    second = load_features("mrpc", data_dir, "test", tokenizer, 16, cache_dir)
    assert (second.from_cache, CountingTokenizer.calls) == (True, 2)
    assert second.path == first.path
    assert os.path.basename(first.path).startswith("mrpc_test_seq16_")
    expected = convert_examples_to_features(EXPECTED[("mrpc", "test")], "mrpc", 16, tokenizer)
    (row,) = list(second.dataset.as_numpy_iterator())
    for name, value in expected[0].items():
        assert np.array_equal(row[name], value), name
    # Another lower-casing, length or data file is another cache file.
    upper = CountingTokenizer(spm_model_file=MODEL, do_lower_case=False)
    assert load_features("mrpc", data_dir, "test", upper, 16, cache_dir).path != first.path
    assert load_features("mrpc", data_dir, "test", tokenizer, 17, cache_dir).path != first.path
    rows = FILES["mrpc"]["test.tsv"] + [["1", "5", "6", "New row .", "Another ."]]
    write_task(tmp_path / "glue", "mrpc", {"test.tsv": rows})
    changed = load_features("mrpc", data_dir, "test", tokenizer, 16, cache_dir)
    assert (changed.from_cache, changed.num_examples) == (False, 2)


def test_load_features_in_memory_regression(tmp_path):
    data_dir = write_task(tmp_path, "sts-b")
    loaded = load_features("sts-b", data_dir, "dev", FullTokenizer(spm_model_file=MODEL), 20)
    assert (loaded.from_cache, loaded.path, loaded.num_examples) == (False, None, 1)
    (row,) = list(loaded.dataset.as_numpy_iterator())
    assert row["label_ids"].dtype == np.float32 and row["label_ids"] == np.float32(0.75)
    assert row["input_ids"].dtype == np.int32 and row["input_ids"].shape == (20,)


def test_a_byte_order_mark_does_not_hide_a_missing_header(tmp_path):
    # An SST-2 test file saved by a Windows editor, its header line lost: the first row's
    # index "0" must still show it is data (a kept mark made it "\ufeff0", not a number).
    path = tmp_path / "test.tsv"
    path.write_text("\ufeff0\tuneasy mishmash .\n1\ta chilly film .\n", encoding="utf-8")
    with pytest.raises(GlueDataError, match="line 1 is a data row"):
        read_examples("sst-2", str(tmp_path), "test")


def test_blank_lines_are_skipped_and_a_score_of_zero_is_a_score(tmp_path):
    header = FILES["sts-b"]["dev.tsv"][0]
    rows = ["\t".join(header), "\t".join(["0"] * 7 + ["A.", "B.", "0.000"]), "", ""]
    (tmp_path / "dev.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert read_examples("sts-b", str(tmp_path), "dev") == [InputExample("0", "A.", "B.", 0.0)]


def test_nul_bytes_are_not_text(tmp_path):
    (tmp_path / "test.tsv").write_bytes(b"index\tsentence\n0\tab\x00c\n")
    with pytest.raises(GlueDataError, match="test.tsv line 2 is not UTF-8 text"):
        read_examples("sst-2", str(tmp_path), "test")
