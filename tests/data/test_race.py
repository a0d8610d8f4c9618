"""RACE reader on files in the released layout, multiple-choice features, accuracy per level."""

import json
from pathlib import Path

import numpy as np
import pytest

from albert import progress
from albert.data.race import (
    RaceDataError,
    RaceExample,
    accuracy_by_level,
    convert_examples_to_features,
    load_features,
    question_with_option,
    read_race_examples,
    write_predictions,
)
from albert.tokenization import FullTokenizer

MODEL = str(Path(__file__).resolve().parents[1] / "fixtures" / "tokenizer" / "tiny.model")

MIDDLE = {
    "article": "The river flows to the sea. The sea is large and deep.",
    "questions": ["Where does the river flow?", "The sea is _ ."],
    "options": [["to the sea", "to the hills", "nowhere", "up"], ["small", "dry", "large", "red"]],
    "answers": ["A", "C"],
    "id": "middle1.txt",
}
HIGH = {
    "article": "Winter brings snow, summer brings heat.",
    "questions": ["What does winter bring?"],
    "options": [["heat", "snow", "rain", "leaves"]],
    "answers": ["B"],
    "id": "high7.txt",
}


def make_race(root, split="dev", files=None):
    """Writes RACE/{split}/{level}/*.txt under `root`; returns `root`."""
    files = files or {"middle": {"1.txt": MIDDLE}, "high": {"7.txt": HIGH}}
    for level, contents in files.items():
        directory = root / "RACE" / split / level
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in contents.items():
            text = content if isinstance(content, str) else json.dumps(content)
            (directory / name).write_text(text, encoding="utf-8")
    return str(root)


@pytest.fixture(scope="module")
def tokenizer():
    return FullTokenizer(spm_model_file=MODEL, do_lower_case=True)


def test_reader_levels_and_labels(tmp_path):
    data_dir = make_race(tmp_path)
    examples = read_race_examples(data_dir, "dev")
    assert [(e.example_id, e.level, e.label) for e in examples] == [
        ("middle1.txt-0", "middle", 0),
        ("middle1.txt-1", "middle", 2),
        ("high7.txt-0", "high", 1),
    ]
    assert examples[1].options == ["small", "dry", "large", "red"]
    assert examples[2].article == HIGH["article"]
    assert [e.level for e in read_race_examples(data_dir, "dev", high_only=True)] == ["high"]
    assert len(read_race_examples(data_dir, "dev", middle_only=True)) == 2
    # The RACE directory itself is accepted too.
    assert len(read_race_examples(str(tmp_path / "RACE"), "dev")) == 3
    with pytest.raises(RaceDataError, match="at most one"):
        read_race_examples(data_dir, "dev", high_only=True, middle_only=True)


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "not valid UTF-8 JSON"),
        ({**HIGH, "article": None, "questions": None}, "must hold lists"),
        ({k: v for k, v in HIGH.items() if k != "options"}, "lacks the key 'options'"),
        ({**HIGH, "answers": ["B", "A"]}, "1 questions, 1 option lists and 2 answers"),
        ({**HIGH, "options": HIGH["options"] * 2}, "1 questions, 2 option lists and 1 answers"),
        ({**HIGH, "answers": ["E"]}, "question 0 has options"),
        ({**HIGH, "answers": ["AB"]}, "question 0 has options"),  # A substring of "ABCD".
        (json.dumps(HIGH) + " x", "9.txt' is not valid UTF-8 JSON"),  # One line: no JSON Lines.
        ({**HIGH, "options": [["a", "b", "c"]]}, "expected a list of 4 options"),
    ],
)
def test_malformed_files_are_named(tmp_path, content, message):
    data_dir = make_race(tmp_path, files={"middle": {"1.txt": MIDDLE}, "high": {"9.txt": content}})
    with pytest.raises(RaceDataError, match=message) as error:
        read_race_examples(data_dir, "dev")
    assert "9.txt" in str(error.value)


def test_a_file_of_one_article_per_line(tmp_path):
    # The original reads each line of a file as an article (JSON Lines); the release has one.
    no_id = {k: v for k, v in HIGH.items() if k != "id"}
    lines = "\n".join(json.dumps(a) for a in (MIDDLE, no_id, no_id)) + "\n"
    data_dir = make_race(tmp_path, files={"middle": {"1.txt": lines}})
    examples = read_race_examples(data_dir, "dev", middle_only=True)
    assert [(e.example_id, e.label) for e in examples] == [
        ("middle1.txt-0", 0),
        ("middle1.txt-1", 2),
        ("middle/1.txt:line2-0", 1),
        ("middle/1.txt:line3-0", 1),
    ]
    # ensure_ascii=False leaves U+2028 and U+0085 unescaped in strings: they end no line.
    odd = {**no_id, "article": "One\u2028two\x85three."}
    lines = "\r\n".join(json.dumps(a, ensure_ascii=False) for a in (MIDDLE, odd)) + "\r\n"
    data_dir = make_race(tmp_path / "odd", files={"middle": {"1.txt": lines}})
    examples = read_race_examples(data_dir, "dev", middle_only=True)
    assert examples[2].example_id == "middle/1.txt:line2-0"
    assert examples[2].article == "One\u2028two\x85three."
    bad = json.dumps(MIDDLE) + "\n{not json\n"
    data_dir = make_race(tmp_path / "bad", files={"middle": {"1.txt": bad}})
    with pytest.raises(RaceDataError, match="1.txt' line 2 is not one JSON article"):
        read_race_examples(data_dir, "dev", middle_only=True)
    # Blank lines count: the line named, and an article's id, are the line as an editor shows.
    spaced = f"{json.dumps(MIDDLE)}\n\n{json.dumps(no_id)}\r\n\r\n{{not json\n"
    data_dir = make_race(tmp_path / "spaced", files={"middle": {"1.txt": spaced}})
    with pytest.raises(RaceDataError, match="1.txt' line 5 is not one JSON article"):
        read_race_examples(data_dir, "dev", middle_only=True)
    data_dir = make_race(
        tmp_path / "ids", files={"middle": {"1.txt": spaced[: -len("{not json\n")]}}
    )
    examples = read_race_examples(data_dir, "dev", middle_only=True)
    assert examples[2].example_id == "middle/1.txt:line3-0"


def test_every_answer_letter_and_file_order(tmp_path):
    # Files come in name order whatever order the folder lists them in; other files are
    # not articles.
    names = ["5.txt", "3.txt", "1.txt", "4.txt", "2.txt"]
    files = {
        name: {**HIGH, "id": name, "answers": [letter]}
        for name, letter in zip(names, "DBCAD", strict=True)
    }
    data_dir = make_race(tmp_path, files={"high": {**files, "notes.md": "not an article"}})
    examples = read_race_examples(data_dir, "dev", high_only=True)
    assert [(e.example_id, e.label) for e in examples] == [
        ("1.txt-0", 2),
        ("2.txt-0", 3),
        ("3.txt-0", 1),
        ("4.txt-0", 0),
        ("5.txt-0", 3),
    ]


def test_missing_directories(tmp_path):
    data_dir = make_race(tmp_path, files={"middle": {"1.txt": MIDDLE}})
    with pytest.raises(RaceDataError, match="dev/high' does not exist"):
        read_race_examples(data_dir, "dev")
    assert len(read_race_examples(data_dir, "dev", middle_only=True)) == 2
    with pytest.raises(RaceDataError, match="does not exist"):
        read_race_examples(data_dir, "train", middle_only=True)
    with pytest.raises(RaceDataError, match="split must be one of"):
        read_race_examples(data_dir, "validation")


def test_question_with_option():
    assert question_with_option("The sea is _ .", "large") == "The sea is large ."
    assert question_with_option("Where?", "here") == "Where? here"
    # The original's str.replace fills every blank.
    assert question_with_option("_ rose and _ fell.", "it") == "it rose and it fell."


def test_features_layout_and_truncation(tokenizer):
    long_question = "Which of these words " + "very " * 30 + "_ describes the sea?"
    example = RaceExample(
        "x-0", MIDDLE["article"] * 3, long_question, ["a", "b", "c", "dd"], 3, "high"
    )
    t, max_qa = 37, 12
    (feature,) = convert_examples_to_features([example], tokenizer, t, max_qa)
    assert feature["label_ids"] == 3 and feature["is_real_example"] == 1
    input_ids = np.reshape(feature["input_ids"], (4, t))
    segment_ids = np.reshape(feature["segment_ids"], (4, t))
    input_mask = np.reshape(feature["input_mask"], (4, t))
    article = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.article))
    cls_id, sep_id = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    for choice, option in enumerate(example.options):
        qa = tokenizer.tokenize(long_question.replace("_", option))
        qa_ids = tokenizer.convert_tokens_to_ids(qa[-max_qa:])  # The question's END is kept.
        context = article[: t - 3 - len(qa_ids)]  # The article's START is kept.
        expected = [cls_id, *context, sep_id, *qa_ids, sep_id]
        assert len(expected) == t  # Both were cut: the long article fills the rest.
        assert input_ids[choice].tolist() == expected
        assert segment_ids[choice].tolist() == [0] * (len(context) + 2) + [1] * (len(qa_ids) + 1)
        assert input_mask[choice].tolist() == [1] * t
    assert len(set(map(tuple, input_ids.tolist()))) == 4  # Each choice differs.
    with pytest.raises(RaceDataError, match="--max_qa_length=40"):
        convert_examples_to_features([example], tokenizer, t, 40)
    convert_examples_to_features([example], tokenizer, t, t - 3)  # Room for the 3 specials.
    with pytest.raises(RaceDataError, match=f"--max_qa_length={t - 2}"):
        convert_examples_to_features([example], tokenizer, t, t - 2)


def test_a_short_question_leaves_the_rest_to_each_article(tokenizer):
    # The article fills what the question and option leave, not what max_qa_length would;
    # each example's own article, even right after another one.
    t, max_qa = 29, 12
    first = RaceExample("a-0", MIDDLE["article"] * 3, "Why?", ["a", "b", "c", "d"], 0, "middle")
    second = RaceExample("b-0", HIGH["article"] * 3, "Why?", ["a", "b", "c", "d"], 0, "high")
    features = convert_examples_to_features([first, second], tokenizer, t, max_qa)
    for example, feature in zip((first, second), features, strict=True):
        article = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.article))
        input_ids = np.reshape(feature["input_ids"], (4, t))
        qa_ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("Why? a"))
        assert len(qa_ids) < max_qa
        assert input_ids[0, 1 : t - 2 - len(qa_ids)].tolist() == article[: t - 3 - len(qa_ids)]


def test_conversion_logs_its_progress(tokenizer, monkeypatch, absl_caplog):
    # RACE's 88k questions take minutes: a line every PROGRESS_SECONDS (here every one).
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)
    example = RaceExample("x-0", MIDDLE["article"], "Why?", ["a", "b", "c", "d"], 0, "high")
    convert_examples_to_features([example] * 3, tokenizer, 16, 4)
    assert "RACE: tokenized 3/3 questions (100%) | " in absl_caplog.text


def test_an_empty_question_and_option_still_ends_with_two_separators(tokenizer):
    """The original always packs `[CLS] article [SEP] qa [SEP]`, even when qa has no token."""
    example = RaceExample("x-0", "The sea.", "", ["", "a", "b", "c"], 0, "high")
    (feature,) = convert_examples_to_features([example], tokenizer, 16, 4)
    cls_id, sep_id = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    article = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("The sea."))
    first_ids = feature["input_ids"][:16]
    assert first_ids[: len(article) + 3] == [cls_id, *article, sep_id, sep_id]
    first_segments = feature["segment_ids"][:16]
    assert first_segments[: len(article) + 3] == [0] * (len(article) + 2) + [1]


def test_load_features_dataset_and_cache(tmp_path, tokenizer, monkeypatch):
    data_dir = make_race(tmp_path)
    first = load_features(data_dir, "dev", tokenizer, 29, 8, cache_dir=str(tmp_path / "cache"))
    monkeypatch.setattr(tokenizer, "tokenize", lambda text: pytest.fail("tokenized again"))
    second = load_features(data_dir, "dev", tokenizer, 29, 8, cache_dir=str(tmp_path / "cache"))
    assert (first.from_cache, second.from_cache) == (False, True)
    rows = [{k: v.numpy() for k, v in row.items()} for row in second.dataset]
    assert len(rows) == second.num_examples == 3
    assert rows[0]["input_ids"].shape == rows[0]["segment_ids"].shape == (4, 29)
    assert [int(r["label_ids"]) for r in rows] == [0, 2, 1]
    for a, b in zip(first.dataset, rows, strict=True):
        assert np.array_equal(a["input_ids"].numpy(), b["input_ids"])


def test_accuracy_by_level_and_predictions(tmp_path):
    examples = [
        RaceExample("m-0", "", "", ["a"] * 4, 0, "middle"),
        RaceExample("m-1", "", "", ["a"] * 4, 1, "middle"),
        RaceExample("h-0", "", "", ["a"] * 4, 2, "high"),
    ]
    # Right, wrong (2 for 1), right: 2/3 overall, 1/2 middle, 1/1 high.
    expected = {
        "accuracy": pytest.approx(2 / 3),
        "num_examples": 3,
        "middle_accuracy": 0.5,
        "middle_num_examples": 2,
        "high_accuracy": 1.0,
        "high_num_examples": 1,
    }
    assert accuracy_by_level(examples, [0, 2, 2]) == expected
    logits = np.array([[3.0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 5, 1]])
    assert accuracy_by_level(examples, logits) == expected
    with pytest.raises(RaceDataError, match="2 predictions for 3"):
        accuracy_by_level(examples, [0, 1])
    write_predictions(str(tmp_path / "p" / "predictions.json"), examples, logits)
    written = json.loads((tmp_path / "p" / "predictions.json").read_text())
    assert written == {"m-0": "A", "m-1": "C", "h-0": "C"}
    # Each example keeps its own letter, whatever the order of the predicted options.
    write_predictions(str(tmp_path / "p" / "predictions.json"), examples, [3, 0, 1])
    written = json.loads((tmp_path / "p" / "predictions.json").read_text())
    assert written == {"m-0": "D", "m-1": "A", "h-0": "B"}
