"""SQuAD and RACE files that used to give silently wrong results: now errors or right ids."""

import json

import pytest
from absl import flags

from albert.data import race
from albert.data.squad import SquadDataError, read_squad_examples
from albert.tasks import squad as squad_task


def _squad(path, qas, version="1.1"):
    paragraph = {"context": "Paris is the capital of France.", "qas": qas}
    path.write_text(json.dumps({"version": version, "data": [{"paragraphs": [paragraph]}]}))
    return str(path)


def _qa(qid, **extra):
    return {
        "id": qid,
        "question": "What is the capital?",
        "answers": [{"text": "Paris", "answer_start": 0}],
        **extra,
    }


def test_duplicate_question_id_names_the_id_and_file(tmp_path):
    path = _squad(tmp_path / "dev.json", [_qa("q1"), _qa("q2"), _qa("q1")])
    with pytest.raises(SquadDataError) as error:
        read_squad_examples(path)
    assert str(error.value) == (
        f"SQuAD file {path!r} has the question id 'q1' twice (article 0 paragraph 0 question 0 "
        "and article 0 paragraph 0 question 2); question ids must be unique."
    )


@pytest.mark.parametrize(
    "qas, version",
    [
        ([_qa("q1"), _qa("q2", is_impossible=True, answers=[])], "1.1"),
        ([_qa("q1", plausible_answers=[{"text": "Paris", "answer_start": 0}])], "1.1"),
        ([_qa("q1")], "v2.0"),
    ],
    ids=["is_impossible", "plausible_answers", "version"],
)
def test_v2_file_without_the_flag_says_which_flag_to_add(tmp_path, qas, version):
    path = _squad(tmp_path / "train.json", qas, version)
    with pytest.raises(SquadDataError) as error:
        read_squad_examples(path, version_2_with_negative=False)
    assert str(error.value) == (
        f"SQuAD file {path!r} is a SQuAD 2.0 file (it has unanswerable questions); "
        "add --version_2_with_negative."
    )
    assert len(read_squad_examples(path, version_2_with_negative=True)) == len(qas)


def test_v1_file_reads_with_or_without_the_flag(tmp_path):
    path = _squad(tmp_path / "train.json", [_qa("q1"), _qa("q2")])
    assert len(read_squad_examples(path, version_2_with_negative=False)) == 2
    assert len(read_squad_examples(path, version_2_with_negative=True)) == 2


def test_run_squad_checks_the_files_up_front(tmp_path):
    v2 = _squad(tmp_path / "train-v2.0.json", [_qa("q1", is_impossible=True, answers=[])])
    flag_values = flags.FlagValues()
    squad_task.define_squad_flags(flag_values)
    flag_values(
        [
            "run_squad.py",
            "--do_train",
            f"--train_file={v2}",
            "--max_seq_length=64",
            "--max_query_length=16",
            "--doc_stride=32",
        ]
    )
    with pytest.raises(SquadDataError, match="add --version_2_with_negative"):
        squad_task.check_squad_flags(flag_values)


@pytest.mark.parametrize(
    "content",
    [
        {"q1": "Paris"},
        {"data": [{"title": "no paragraphs"}]},
        [1, 2],
        {"data": [{"paragraphs": [{"context": "Paris.", "qas": ["Where?"]}]}]},
    ],
    ids=["predictions_json", "no_paragraphs", "a_list", "question_not_a_dict"],
)
def test_predict_file_that_is_not_squad_is_one_clear_error(tmp_path, content):
    # e.g. predictions.json passed as --predict_file: refused in one sentence naming the file.
    path = tmp_path / "predictions.json"
    path.write_text(json.dumps(content))
    flag_values = flags.FlagValues()
    squad_task.define_squad_flags(flag_values)
    flag_values(["run_squad.py", "--do_predict", f"--predict_file={path}"])
    with pytest.raises(SquadDataError, match="is it a SQuAD v1.1 or v2.0 JSON file"):
        squad_task.squad_task_key(flag_values)


def _race_article(folder, name, with_id=None, num_questions=2):
    folder.mkdir(parents=True, exist_ok=True)
    article = {
        "article": f"Text of {name}.",
        "questions": ["Which?"] * num_questions,
        "options": [["a", "b", "c", "d"]] * num_questions,
        "answers": ["A"] * num_questions,
    }
    if with_id:
        article["id"] = with_id
    (folder / name).write_text(json.dumps(article))


def test_race_files_without_id_get_level_and_name(tmp_path):
    for level in ("middle", "high"):
        for name in ("1.txt", "2.txt"):
            _race_article(tmp_path / "RACE" / "dev" / level, name)
    examples = race.read_race_examples(str(tmp_path), "dev")
    ids = [example.example_id for example in examples]
    assert ids == [
        f"{level}/{n}.txt-{q}" for level in ("middle", "high") for n in (1, 2) for q in (0, 1)
    ]
    predictions = tmp_path / "out" / "predictions.json"
    race.write_predictions(str(predictions), examples, [0] * len(examples))
    assert len(json.loads(predictions.read_text())) == 8


def test_race_files_with_the_same_id_are_an_error(tmp_path):
    folder = tmp_path / "RACE" / "test" / "high"
    _race_article(folder, "1.txt", with_id="high1.txt")
    _race_article(folder, "2.txt", with_id="high1.txt")
    with pytest.raises(race.RaceDataError) as error:
        race.read_race_examples(str(tmp_path), "test", high_only=True)
    assert str(error.value) == (
        f"RACE files {str(folder / '1.txt')!r} and {str(folder / '2.txt')!r} both give the "
        "question id 'high1.txt-0'; give each article file its own \"id\"."
    )


@pytest.mark.parametrize(
    "qas, context, detail",
    [
        ([_qa("q1", question=None)], "Paris.", "its question is null, not a string"),
        ([_qa("q1")], None, "its context is null, not a string"),
        (
            [_qa("q1", answers=[{"text": 1889, "answer_start": 0}])],
            "Paris.",
            "its answer text is 1889, not a string",
        ),
        # A truthy string: the answerable question was read as unanswerable.
        ([_qa("q1", is_impossible="false")], "Paris.", 'its is_impossible is "false", not true'),
    ],
    ids=["null_question", "null_context", "number_answer", "string_is_impossible"],
)
def test_squad_fields_of_the_wrong_type_name_the_place(tmp_path, qas, context, detail):
    # A null question or context failed in the tokenizer as an AttributeError traceback.
    path = tmp_path / "train.json"
    paragraph = {"context": context, "qas": qas}
    path.write_text(json.dumps({"version": "v2.0", "data": [{"paragraphs": [paragraph]}]}))
    with pytest.raises(SquadDataError) as error:
        read_squad_examples(str(path))
    place = "article 0 paragraph 0" + ("" if context is None else " question 0")
    assert str(error.value) == (
        f"SQuAD file {str(path)!r} is malformed at {place} ({detail}"
        + ("" if detail.endswith("string") else " or false")
        + "); is it a SQuAD v1.1 or v2.0 JSON file?"
    )


def test_squad_is_impossible_as_0_or_1_still_reads(tmp_path):
    path = _squad(tmp_path / "train.json", [_qa("q1", is_impossible=0)], "v2.0")
    assert read_squad_examples(path)[0].is_impossible is False


@pytest.mark.parametrize(
    "change, message",
    [
        ({"article": None}, "has the article None, not a string."),
        ({"questions": [None]}, "question 0 is None with options ['a', 'b', 'c', 'd']; the "),
        ({"options": [["a", None, "c", "d"]]}, "question 0 is 'Which?' with options ['a', None"),
    ],
    ids=["null_article", "null_question", "null_option"],
)
def test_race_fields_that_are_not_strings_name_the_file(tmp_path, change, message):
    # They failed in the tokenizer or in str.replace as a TypeError traceback.
    folder = tmp_path / "RACE" / "dev" / "high"
    folder.mkdir(parents=True)
    article = {
        "article": "Text.",
        "questions": ["Which?"],
        "options": [["a", "b", "c", "d"]],
        "answers": ["A"],
    }
    (folder / "1.txt").write_text(json.dumps({**article, **change}))
    with pytest.raises(race.RaceDataError) as error:
        race.read_race_examples(str(tmp_path), "dev", high_only=True)
    assert str(error.value).startswith(f"RACE file {str(folder / '1.txt')!r} {message}")


def _tiny_tokenizer():
    from pathlib import Path

    from albert.tokenization import FullTokenizer

    model = Path(__file__).resolve().parents[1] / "fixtures" / "tokenizer" / "tiny.model"
    return FullTokenizer(spm_model_file=str(model))


@pytest.mark.parametrize(
    "qas, is_training, reason",
    [
        ([_qa("q1", answers=[{"text": "Paris", "answer_start": 9}])], True, "no training "),
        ([], False, "no question."),
    ],
    ids=["every_answer_skipped", "no_question"],
)
def test_squad_file_without_features_names_the_file(tmp_path, qas, is_training, reason):
    # Was "No features to make a dataset of; the input split is empty.", naming no file.
    from albert.data.squad import load_features

    path = _squad(tmp_path / "train.json", qas)
    with pytest.raises(SquadDataError) as error:
        load_features(path, _tiny_tokenizer(), is_training, 32, 8, 8)
    assert str(error.value).startswith(f"SQuAD file {path!r} has {reason}")


def test_json_files_with_a_utf8_byte_order_mark_read_as_without(tmp_path):
    # Windows editors and PowerShell's `Out-File -Encoding utf8` write one; json.loads
    # refuses it ("Unexpected UTF-8 BOM"), so the readers decode with "utf-8-sig".
    from albert.metrics.squad import evaluate_files

    plain = _squad(tmp_path / "plain.json", [_qa("q1")])
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + (tmp_path / "plain.json").read_bytes())
    assert read_squad_examples(str(bom)) == read_squad_examples(plain)
    predictions = tmp_path / "predictions.json"
    predictions.write_bytes(b"\xef\xbb\xbf" + json.dumps({"q1": "Paris"}).encode())
    assert evaluate_files(str(bom), str(predictions))["exact_match"] == 100.0
    _race_article(tmp_path / "RACE" / "dev" / "middle", "1.txt", with_id="m1.txt")
    (tmp_path / "RACE" / "dev" / "high").mkdir()
    path = tmp_path / "RACE" / "dev" / "middle" / "1.txt"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    examples = race.read_race_examples(str(tmp_path), "dev")
    assert [e.example_id for e in examples] == ["m1.txt-0", "m1.txt-1"]
