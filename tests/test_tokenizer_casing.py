"""--do_lower_case against the vocabulary's casing: a mismatch (the original's users' common
silent loss, cased text through an uncased model) is one warning; a match says nothing."""

import dataclasses
import types

import pytest

from albert.data.create_pretraining_data import PretrainingDataConfig, create_pretraining_data
from albert.data.pretraining import InstanceOptions
from albert.tasks.flags import tokenizer_from_flags
from albert.tokenization import FullTokenizer, casing_mismatch
from tests.helpers import TINY_TEXT, train_tiny_spm


@pytest.fixture(scope="module")
def uncased_spm(tmp_path_factory):
    return train_tiny_spm(tmp_path_factory.mktemp("uncased"), do_lower_case=True)


@pytest.fixture(scope="module")
def cased_spm(tmp_path_factory):
    return train_tiny_spm(tmp_path_factory.mktemp("cased"), do_lower_case=False)


def test_cased_text_through_an_uncased_model_is_named(uncased_spm):
    message = casing_mismatch(FullTokenizer(spm_model_file=uncased_spm, do_lower_case=False))
    assert message.startswith("--do_lower_case=false, but only 0 of the ")
    assert f" pieces of {uncased_spm} hold a capital letter (an uncased vocabulary" in message
    assert casing_mismatch(FullTokenizer(spm_model_file=uncased_spm, do_lower_case=True)) is None
    # The original README passes both files (--vocab_file 30k-clean.vocab with
    # --spm_model_file): the pieces read are the model's, and so is the file named.
    both = FullTokenizer(
        vocab_file=uncased_spm.replace(".model", ".vocab"),
        spm_model_file=uncased_spm,
        do_lower_case=False,
    )
    assert f" pieces of {uncased_spm} hold a capital letter" in casing_mismatch(both)


def test_lower_cased_text_through_a_cased_model_is_named(cased_spm):
    message = casing_mismatch(FullTokenizer(spm_model_file=cased_spm, do_lower_case=True))
    assert message.startswith("--do_lower_case=true, but ")
    assert f"% of the pieces of {cased_spm} hold capital letters" in message
    assert casing_mismatch(FullTokenizer(spm_model_file=cased_spm, do_lower_case=False)) is None


@pytest.mark.parametrize(
    ("tokens", "do_lower_case", "expected"),
    [
        (["[PAD]", "[UNK]", "[CLS]", "the", "##s", "cat"], False, "--do_lower_case=false"),
        # The published model's few capitals alone (1 in 400 pieces here) still read uncased.
        (["[CLS]", "H", *(f"w{i}" for i in range(399))], False, "--do_lower_case=false"),
        (["[CLS]", "H", *(f"w{i}" for i in range(99))], False, None),
        (["[PAD]", "[UNK]", "[CLS]", "the", "##s", "cat"], True, None),
        (["[PAD]", "[UNK]", "The", "the", "Cat", "cat"], True, "--do_lower_case=true"),
        (["[PAD]", "[UNK]", "The", "the", "Cat", "cat"], False, None),
        (["[PAD]", "[UNK]", "的", "是", "##一"], False, None),  # no cased letters at all
        # Control symbols in angle brackets are not counted, capitals or not.
        (["<PAD>", "<UNK>", "<S>", "</S>", *(f"w{i}" for i in range(50))], True, None),
        # Mostly Chinese characters (no case): the share is of the pieces with cased letters.
        (
            ["[PAD]", "The", "the", *(chr(0x4E00 + i) for i in range(300))],
            True,
            "--do_lower_case=true",
        ),
    ],
    ids=[
        "uncased_kept",
        "few_capitals_kept",
        "some_capitals_kept",
        "uncased_lowered",
        "cased_lowered",
        "cased_kept",
        "chinese",
        "angle_bracket_controls",
        "cased_among_chinese",
    ],
)
def test_wordpiece_vocabularies(tmp_path, tokens, do_lower_case, expected):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    message = casing_mismatch(FullTokenizer(vocab_file=str(vocab), do_lower_case=do_lower_case))
    if expected is None:
        assert message is None
    else:
        assert message.startswith(expected)


def test_fine_tuning_scripts_warn_once(uncased_spm, absl_caplog):
    flag_values = types.SimpleNamespace(
        vocab_file=None, spm_model_file=uncased_spm, do_lower_case=False
    )
    tokenizer_from_flags(flag_values)
    warnings = [r for r in absl_caplog.records if "--do_lower_case=false" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelname == "WARNING"


def test_create_pretraining_data_warns_once(tmp_path, uncased_spm, absl_caplog):
    (tmp_path / "corpus.txt").write_text(TINY_TEXT, encoding="utf-8")
    config = PretrainingDataConfig(
        input_file=str(tmp_path / "corpus.txt"),
        output_file=str(tmp_path / "out" / "data"),
        spm_model_file=uncased_spm,
        do_lower_case=False,
        num_workers=1,
        instance=InstanceOptions(max_seq_length=64, max_predictions_per_seq=5, dupe_factor=1),
    )
    create_pretraining_data(config)
    warnings = [r for r in absl_caplog.records if "--do_lower_case=false" in r.getMessage()]
    assert len(warnings) == 1
    absl_caplog.clear()
    create_pretraining_data(
        dataclasses.replace(config, do_lower_case=True, output_file=str(tmp_path / "o2" / "d"))
    )
    assert not [r for r in absl_caplog.records if "do_lower_case" in r.getMessage()]
