"""`python -m albert.convert_checkpoint`: every format to every other, and one-line errors."""

import errno
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from checkpoint_testing import (
    HF_FIXTURE,
    random_arrays,
    read_tf1,
    reference_tf1_shapes,
    write_tf1,
)
from safetensors.numpy import load_file, save_file

from albert.checkpoints import CheckpointError
from albert.convert_checkpoint import FLAGS, convert, main
from tests.helpers import tiny_config

REPO = pathlib.Path(__file__).resolve().parents[2]


def _run_cli(*flags):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "albert.convert_checkpoint", *flags],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def main_with_flags(*flags):
    """`convert_checkpoint`'s main in this process with `flags` parsed; its exit code."""
    FLAGS(["convert_checkpoint", *flags])
    try:
        return main([])
    finally:
        FLAGS.unparse_flags()


def test_hf_to_tf1_to_keras_to_hf_is_exact(tmp_path):
    # The config comes from the input each time: HF config.json, then albert_config.json.
    convert(HF_FIXTURE, str(tmp_path / "tf1"), "tf1")
    convert(str(tmp_path / "tf1"), str(tmp_path / "keras"), "keras")
    convert(str(tmp_path / "keras"), str(tmp_path / "hf"), "hf")
    original = load_file(os.path.join(HF_FIXTURE, "model.safetensors"))
    written = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert set(written) == set(original)
    for name, value in original.items():
        assert np.array_equal(written[name], value), name
    tf1 = read_tf1(tmp_path / "tf1" / "model.ckpt")
    np.testing.assert_array_equal(
        tf1["bert/encoder/transformer/group_1/inner_group_1/ffn_1/intermediate/dense/kernel"],
        original["albert.encoder.albert_layer_groups.1.albert_layers.1.ffn.weight"].T,
    )


def test_encoder_only_input_is_written_without_heads(tmp_path):
    config = tiny_config()
    config.to_json_file(str(tmp_path / "albert_config.json"))
    write_tf1(
        tmp_path / "model.ckpt-best", random_arrays(reference_tf1_shapes(config, heads=False))
    )
    convert(str(tmp_path), str(tmp_path / "hf"), "hf")
    names = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert all(name.startswith("albert.") for name in names)
    with open(tmp_path / "hf" / "config.json") as f:
        assert json.load(f)["architectures"] == ["AlbertModel"]


def _masked_lm_round_trip(tmp_path, left_out=()):
    """Writes the HF fixture without its SOP head and `left_out` as an HF AlbertForMaskedLM
    directory, converts it to HF; returns (the tensors written there, the source directory,
    the tensors it holds)."""
    tensors = load_file(os.path.join(HF_FIXTURE, "model.safetensors"))
    mlm_file = {
        k: v
        for k, v in tensors.items()
        if not k.startswith("sop_classifier.") and k not in left_out
    }
    source = tmp_path / "hf_mlm"
    source.mkdir()
    save_file(mlm_file, str(source / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(os.path.join(HF_FIXTURE, "config.json"), source)
    convert(str(source), str(tmp_path / "hf"), "hf")
    written = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert set(written) == set(mlm_file)
    for name, value in mlm_file.items():
        assert np.array_equal(written[name], value), name
    return written, source, mlm_file


def test_masked_lm_only_input_keeps_its_head(tmp_path):
    """HF AlbertForMaskedLM files (albert-base-v2 on the hub) have the MLM head and no SOP
    head: the MLM head is written, the SOP head (never trained) is not."""
    _, source, mlm_only = _masked_lm_round_trip(tmp_path)
    with open(tmp_path / "hf" / "config.json") as f:
        assert json.load(f)["architectures"] == ["AlbertForMaskedLM"]
    convert(str(source), str(tmp_path / "tf1"), "tf1")
    tf1 = read_tf1(tmp_path / "tf1" / "model.ckpt")
    np.testing.assert_array_equal(tf1["cls/predictions/output_bias"], mlm_only["predictions.bias"])
    assert not any(name.startswith("cls/seq_relationship") for name in tf1)
    # A Keras file holds a whole pretrainer or a backbone: the encoder alone, which loads.
    from albert.checkpoints import load_checkpoint, read_config
    from albert.modeling import AlbertBackbone

    written = convert(str(source), str(tmp_path / "keras"), "keras")
    load_checkpoint(AlbertBackbone(read_config(str(source))), written)


def test_masked_lm_file_without_pooler_round_trips_without_one(tmp_path):
    """HF's AlbertForMaskedLM is built without a pooler and saves none: HF -> HF writes every
    tensor it read and no pooler of initial values (which HF would report as unexpected)."""
    written, _, _ = _masked_lm_round_trip(tmp_path, ("albert.pooler.weight", "albert.pooler.bias"))
    assert not any(name.startswith("albert.pooler") for name in written)


def test_config_file_flag_overrides_and_is_checked(tmp_path):
    wrong = tiny_config(intermediate_size=40)
    wrong.to_json_file(str(tmp_path / "wrong.json"))
    with pytest.raises(CheckpointError, match="intermediate_size=40 vs 37"):
        convert(HF_FIXTURE, str(tmp_path / "out"), "tf1", str(tmp_path / "wrong.json"))


def test_tf1_input_without_any_config_asks_for_the_flag(tmp_path):
    write_tf1(tmp_path / "model.ckpt-best", random_arrays(reference_tf1_shapes(tiny_config())))
    with pytest.raises(CheckpointError, match="pass --albert_config_file"):
        convert(str(tmp_path), str(tmp_path / "out"), "hf")


@pytest.mark.parametrize("output_format", ["tf1", "hf", "keras"])
def test_each_phase_logs_a_line_and_the_end_what_was_written(
    output_format, tmp_path, monkeypatch, absl_caplog
):
    # At xxlarge each phase takes seconds (minutes from a bucket): a user sees where it is.
    from albert import progress

    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)  # a read progress line per tensor
    arrays = random_arrays(reference_tf1_shapes(tiny_config()))
    write_tf1(tmp_path / "in" / "model.ckpt-best", arrays)
    tiny_config().to_json_file(str(tmp_path / "in" / "albert_config.json"))
    written = convert(str(tmp_path / "in"), str(tmp_path / "out"), output_format)
    lines = [r.getMessage() for r in absl_caplog.records]
    assert f"Building the model that {tmp_path / 'in'} holds (tf1 format)." in lines
    params = sum(a.size for a in arrays.values())
    assert f"Reading {tmp_path / 'in'} into its AlbertPretrainer ({params:,} parameters)." in lines
    assert any(
        line.startswith(f"Checkpoint: read {params}/{params} parameters (100%)") for line in lines
    )
    assert f"Writing the {output_format} checkpoint into {tmp_path / 'out'}." in lines
    summary = (
        f"Wrote {written} ({output_format}): {len(arrays)} tensors, {params:,} parameters, in 0:00:"
    )
    assert any(line.startswith(summary) for line in lines), lines[-1]


def test_main_converts_from_flags(tmp_path):
    flags = [f"--input={HF_FIXTURE}", f"--output={tmp_path}", "--output_format=keras"]
    assert main_with_flags(*flags) == 0
    assert (tmp_path / "pretrainer.weights.h5").is_file()
    assert (tmp_path / "albert_config.json").is_file()


@pytest.mark.parametrize("writer_error", ["os", "tf"])
def test_main_reports_a_read_only_output_in_one_line(writer_error, tmp_path, monkeypatch, capsys):
    # As root a chmod'ed folder stays writable, so the failure is injected where the writers
    # create --output: the hf and keras writers raise OSError, the tf1 writer TensorFlow's
    # PermissionDeniedError (what a read-only mount gives each of them).
    import tensorflow as tf

    import albert.convert_checkpoint

    output = tmp_path / "ro" / "out"

    def read_only(*args, **kwargs):
        if writer_error == "os":
            raise OSError(errno.EROFS, "Read-only file system", str(output))
        raise tf.errors.PermissionDeniedError(None, None, f"{output}; Read-only file system")

    monkeypatch.setattr(albert.convert_checkpoint, "save_checkpoint", read_only)
    monkeypatch.delenv("ALBERT_TRACEBACK", raising=False)
    flags = [f"--input={HF_FIXTURE}", f"--output={output}", "--output_format=tf1"]
    assert main_with_flags(*flags) == 2
    assert capsys.readouterr().err == (
        f"convert_checkpoint: error: {output} is on a read-only file system (permission "
        "denied); point the output flag (--output_dir, --output_file or --output) at a folder "
        "you can write to, or fix its permissions.\n"
    )


@pytest.mark.slow
def test_cli_errors_are_one_line_without_traceback(tmp_path):
    result = _run_cli(
        f"--input={tmp_path / 'missing'}", f"--output={tmp_path / 'out'}", "--output_format=tf1"
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    message = [line for line in result.stderr.splitlines() if line.startswith("convert_checkpoint")]
    assert message == [
        f"convert_checkpoint: error: No checkpoint found at {tmp_path / 'missing'}: expected a TF1 "
        "checkpoint prefix or directory, an HF directory (config.json + model.safetensors) or "
        "Keras weights (*.weights.h5 with albert_config.json)."
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["-m", "albert.convert_checkpoint", "--helpfull"],
        # The `albert-convert` console script: the module imported under its own name.
        ["-c", "import sys; from albert.convert_checkpoint import run; sys.exit(run())"],
    ],
)
def test_helpfull_lists_each_flag_once(command):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    argv = command if command[0] == "-m" else [*command, "--helpfull"]
    result = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    listed = re.findall(r"^\s+(?:-\S,)?--(?:\[no\])?(\w+):", result.stdout, re.MULTILINE)
    assert {"input", "output", "output_format", "albert_config_file", "overwrite"} <= set(listed)
    assert sorted(name for name in set(listed) if listed.count(name) > 1) == []


def test_a_corrupted_or_missing_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    # As every entry point (README: corrupted checkpoints print `prog: error:`, exit 2).
    monkeypatch.delenv("ALBERT_TRACEBACK", raising=False)
    convert(HF_FIXTURE, str(tmp_path / "tf1"), "tf1")
    data = tmp_path / "tf1" / "model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:5000])
    for source in (tmp_path / "tf1", tmp_path / "missing"):
        flags = [f"--input={source}", f"--output={tmp_path / 'out'}", "--output_format=hf"]
        assert main_with_flags(*flags) == 2
        assert capsys.readouterr().err.startswith("convert_checkpoint: error: ")
    assert not (tmp_path / "out").exists()


def test_the_output_is_never_a_training_runs_directory_even_with_overwrite(tmp_path):
    import keras

    from albert.convert_checkpoint import check_output_dir
    from tests.helpers import write_training_checkpoint

    # Converting into it would rewrite its `checkpoint` file and break its resume.
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    write_training_checkpoint(model, str(tmp_path / "run"), 1)
    with pytest.raises(CheckpointError, match=r"\(it holds a training checkpoint\)"):
        check_output_dir(str(tmp_path / "run"), overwrite=True)
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "run.lock").write_text("")
    with pytest.raises(CheckpointError, match=r"\(it holds run\.lock\)"):
        check_output_dir(str(tmp_path / "locked"), overwrite=True)
    # Other files are replaced with --overwrite only.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text("{}")
    check_output_dir(str(tmp_path / "other"), overwrite=True)
    with pytest.raises(CheckpointError, match=r"is not empty \(config\.json\)"):
        check_output_dir(str(tmp_path / "other"))


def test_race_is_recognised_in_any_case_for_a_multiple_choice_head():
    from albert.convert_checkpoint import task_labels
    from albert.modeling import AlbertBackbone, AlbertMultipleChoice

    model = AlbertMultipleChoice(AlbertBackbone(tiny_config()))
    for name in ("race", "RACE", " Race "):
        assert task_labels(model, "in", name) is None


def test_an_hf_regression_head_is_not_taken_for_races_with_task_name_race(tmp_path):
    # An HF file names its class: AlbertForSequenceClassification with one label is STS-B's
    # head, whatever --task_name says (in TF1 or Keras, one label may be either).
    from albert.checkpoints import save_checkpoint
    from albert.convert_checkpoint import OutputFormatError
    from albert.modeling import AlbertClassifier

    save_checkpoint(AlbertClassifier(tiny_config(), num_labels=1), str(tmp_path / "sts"), "hf")
    with pytest.raises(OutputFormatError, match="not the multiple-choice head of --task_name=race"):
        convert(str(tmp_path / "sts"), str(tmp_path / "out"), "tf1", task_name="race")
