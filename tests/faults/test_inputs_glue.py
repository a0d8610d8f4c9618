"""Malformed GLUE files: errors naming file and line instead of silently shifted examples."""

from pathlib import Path

import pytest

from albert.data.glue import GlueDataError, read_examples

SHARED_GLUE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "glue"
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
STSB_HEADER = (
    "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
)


def _write(directory, name, lines):
    path = Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_tab_inside_mrpc_text_names_file_and_line(tmp_path):
    path = _write(
        tmp_path,
        "MRPC/train.tsv",
        [
            MRPC_HEADER,
            "1\t11\t12\tThe cat sat .\tA cat sat .",
            "0\t13\t14\tHe said\tit rained .\tShe stayed home .",
        ],
    )
    with pytest.raises(GlueDataError) as error:
        read_examples("mrpc", str(tmp_path), "train")
    assert str(error.value) == (
        f"{path} line 3 has 6 tab-separated columns, but the header has 5; a tab inside a "
        "sentence shifts the columns: replace it with a space."
    )


def test_headerless_file_names_line_1(tmp_path):
    path = _write(tmp_path, "MRPC/dev.tsv", ["1\t11\t12\tThe cat sat .\tA cat sat ."])
    with pytest.raises(GlueDataError) as error:
        read_examples("mrpc", str(tmp_path), "dev")
    assert str(error.value) == (
        f"{path} line 1 is a data row, but MRPC dev files start with a header row; put the "
        "header line back (as in the GLUE download)."
    )


def test_headerless_test_file_is_found_by_its_index_column(tmp_path):
    _write(tmp_path, "SST-2/test.tsv", ["0\tA fine film .", "1\tA dull film ."])
    with pytest.raises(GlueDataError, match="SST-2/test.tsv line 1 is a data row"):
        read_examples("sst-2", str(tmp_path), "test")


@pytest.mark.parametrize("score", ["5.2", "-0.5"])
def test_stsb_score_outside_0_to_5(tmp_path, score):
    path = _write(
        tmp_path,
        "STS-B/dev.tsv",
        [
            STSB_HEADER,
            "0\tmain\tx\t2012\t0\tnone\tnone\tA man sings .\tA man sings .\t5.000",
            f"1\tmain\tx\t2012\t1\tnone\tnone\tA dog runs .\tA cat sleeps .\t{score}",
        ],
    )
    with pytest.raises(GlueDataError) as error:
        read_examples("sts-b", str(tmp_path), "dev")
    assert str(error.value) == (
        f"{path} line 3 has the score '{score}', outside STS-B's range [0.0, 5.0]."
    )


def test_headerless_cola_rows_must_match_the_first_row(tmp_path):
    path = _write(
        tmp_path, "CoLA/train.tsv", ["gj04\t1\t\tThe cat sat .", "gj04\t0\t*\tCat the\tsat ."]
    )
    with pytest.raises(GlueDataError, match=f"^{path} line 2 has 5 .* but line 1 has 4;"):
        read_examples("cola", str(tmp_path), "train")


def test_qqp_malformed_rows_stay_skipped_and_counted(tmp_path, caplog):
    _write(
        tmp_path,
        "QQP/train.tsv",
        [
            "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
            "0\t1\t2\tHow are you?\tHow do you do?\t1",
            "1\t3\t4\tA broken row",
            "2\t5\t6\tWhat time?\tWhen?\t0",
        ],
    )
    examples = read_examples("qqp", str(tmp_path), "train")
    assert [e.guid for e in examples] == ["0", "2"]
    assert "Skipped 1 malformed rows" in caplog.text


@pytest.mark.parametrize(
    "content",
    [bytes(range(256)) * 4, "index\tsentence\n0\tok\n".encode("utf-16")],
    ids=["binary", "utf16"],
)
def test_binary_glue_file_is_one_line(tmp_path, content):
    path = tmp_path / "SST-2" / "train.tsv"
    path.parent.mkdir()
    path.write_bytes(content)
    with pytest.raises(GlueDataError, match=f"^{path} line 1 is not UTF-8 text"):
        read_examples("sst-2", str(tmp_path), "train")


@pytest.mark.skipif(not SHARED_GLUE.is_dir(), reason="shared GLUE sample absent")
@pytest.mark.parametrize("task, folder", [("mrpc", "MRPC"), ("sts-b", "STS-B")])
def test_real_samples_still_read(task, folder):
    for split in ("train", "dev"):
        lines = (SHARED_GLUE / folder / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
        assert len(read_examples(task, str(SHARED_GLUE), split)) == len(lines) - 1


@pytest.mark.parametrize(
    "task, name, content",
    [
        ("cola", "CoLA/train.tsv", "gj04\t1\t\tThe cat sat .\rgj04\t0\t*\tCat the sat .\r"),
        ("sst-2", "SST-2/train.tsv", "sentence\tlabel\rA fine film .\t1\rA dull film .\t0"),
    ],
    ids=["headerless", "header"],
)
def test_cr_only_line_endings_are_one_line(tmp_path, task, name, content):
    # CoLA read one example whose text ran across the CRs; SST-2 read none ("no rows").
    path = tmp_path / name
    path.parent.mkdir()
    path.write_bytes(content.encode())
    with pytest.raises(GlueDataError) as error:
        read_examples(task, str(tmp_path), "train")
    assert str(error.value) == (
        f"{path} has CR (\\r) line endings, as old Mac editors write; convert it to \\n (or "
        "\\r\\n) line endings, e.g. tr '\\r' '\\n'."
    )


def test_crlf_and_a_stray_cr_inside_a_field_still_read(tmp_path):
    _write(tmp_path, "SST-2/train.tsv", [])
    (tmp_path / "SST-2" / "train.tsv").write_bytes(
        b"sentence\tlabel\r\nA fine\rfilm .\t1\r\nA dull film .\t0"
    )
    examples = read_examples("sst-2", str(tmp_path), "train")
    assert [(e.text_a, e.label) for e in examples] == [
        ("A fine\rfilm .", "1"),
        ("A dull film .", "0"),
    ]


def test_a_latin1_character_far_into_the_file_names_its_line(tmp_path):
    # The reader decodes 8 KB blocks: the error named the last line it had read (here 1).
    rows = ["sentence\tlabel"] + [f"Film number {i} .\t1" for i in range(2000)]
    rows[1500] = "Un film caf\xe9 .\t1"
    path = tmp_path / "SST-2" / "train.tsv"
    path.parent.mkdir()
    path.write_bytes("\n".join(rows).encode("latin-1"))
    with pytest.raises(GlueDataError) as error:
        read_examples("sst-2", str(tmp_path), "train")
    assert str(error.value) == (
        f"{path} line 1501 is not UTF-8 text: is it a binary, UTF-16 or Latin-1 file? Pass the "
        "GLUE TSV file as downloaded (UTF-8)."
    )
