"""`python -m albert.convert_checkpoint` on a fine-tuning run: the task head is kept.

A run directory is made as the training loop leaves it (`model.ckpt-<step>` in the training
format, its `checkpoint` state file, `albert_config.json`, the exported `model.weights.h5`),
without training. The expected TF1 names are the original's (see
test_original_finetuned_heads.py); values must match exactly.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from checkpoint_testing import randomize, read_tf1, reference_tf1_shapes
from test_convert_checkpoint import _run_cli, main_with_flags
from test_original_finetuned_heads import build, head_shapes

from albert.checkpoints import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
    tf1,
    training_format,
)
from albert.convert_checkpoint import OutputFormatError, convert
from albert.modeling import AlbertClassifier
from tests.helpers import tiny_config


def fine_tuning_run(directory, kind, step=4):
    """A run directory holding a randomized `kind` model; returns the model."""
    config = tiny_config()
    model = randomize(build(kind, config))
    prefix = tf.train.Checkpoint(
        model=training_format.variable_tree(model.weights),
        global_step=tf.Variable(step, dtype=tf.int64),
    ).write(os.path.join(directory, f"model.ckpt-{step}"))
    tf.compat.v1.train.update_checkpoint_state(str(directory), prefix)
    training_format.write_config(config, str(directory))
    save_checkpoint(model, str(directory), "keras")  # as the run's final export
    return model


def assert_original_names_and_values(tmp_path, model, kind, step=0):
    """tmp_path/tf1 holds `model` under the original's names, each value exactly, and
    `global_step` = `step`."""
    written = read_tf1(tmp_path / "tf1" / "model.ckpt")
    assert tf1.stored_global_step(str(tmp_path / "tf1")) == step
    expected_names = {**reference_tf1_shapes(model.config, heads=False), **head_shapes(kind)}
    assert sorted(written) == sorted(expected_names)
    for name, shape in expected_names.items():
        assert written[name].shape == shape, name
    save_checkpoint(model, str(tmp_path / "reference"), "tf1")  # the API's export
    reference = read_tf1(tmp_path / "reference" / "model.ckpt")
    for name, value in reference.items():
        assert np.max(np.abs(written[name] - value)) == 0, name


@pytest.mark.parametrize(
    "kind, source",
    [
        ("classifier", "run"),
        ("classifier", "model.weights.h5"),
        ("squad_v1", "model.ckpt-4"),
        ("squad_v2", "model.weights.h5"),
    ],
)
def test_fine_tuned_run_converts_to_the_original_names(tmp_path, kind, source):
    model = fine_tuning_run(tmp_path / "run", kind)
    path = tmp_path / "run" if source == "run" else tmp_path / "run" / source
    convert(str(path), str(tmp_path / "tf1"), "tf1")
    # The step comes from the training checkpoint; the Keras export holds none.
    step = 0 if source == "model.weights.h5" else 4
    assert_original_names_and_values(tmp_path, model, kind, step)
    if kind == "classifier":
        np.testing.assert_array_equal(
            read_tf1(tmp_path / "tf1" / "model.ckpt")["output_weights"],
            model.classifier.output_weights.numpy(),
        )


def test_tf1_export_converts_back_to_the_same_task_model(tmp_path):
    model = fine_tuning_run(tmp_path / "run", "classifier")
    convert(str(tmp_path / "run"), str(tmp_path / "tf1"), "tf1")
    convert(str(tmp_path / "tf1"), str(tmp_path / "keras"), "keras")
    again = AlbertClassifier(tiny_config(), num_labels=3)
    result = load_checkpoint(again, str(tmp_path / "keras" / "model.weights.h5"))
    assert result.initialised == []
    for a, b in zip(model.weights, again.weights, strict=True):
        assert np.max(np.abs(a.numpy() - b.numpy())) == 0, a.path


def test_squad_v2_run_to_hf_is_refused_in_one_line(tmp_path, capsys):
    # HF has no class for the original's XLNet-style SQuAD 2.0 head (the other heads convert:
    # tests/checkpoints/test_hf_task_heads.py).
    fine_tuning_run(tmp_path / "run", "squad_v2")
    with pytest.raises(OutputFormatError, match="use --output_format=tf1"):
        convert(str(tmp_path / "run"), str(tmp_path / "hf"), "hf")
    flags = [f"--input={tmp_path / 'run'}", f"--output={tmp_path / 'hf'}", "--output_format=hf"]
    assert main_with_flags(*flags) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if "error" in line] == [
        f"convert_checkpoint: error: --input={tmp_path / 'run'} is a fine-tuned "
        "AlbertQuestionAnswering with the SQuAD 2.0 head (the original's XLNet-style start, "
        "end and answer-class layers), which no HF class computes; use --output_format=tf1 "
        "(the original's names) or keras."
    ]
    assert not (tmp_path / "hf").exists()
    with pytest.raises(CheckpointError, match="SQuAD 2.0 head .* has no HF class"):
        save_checkpoint(build("squad_v2", tiny_config()), str(tmp_path / "api"), "hf")
    assert not (tmp_path / "api").exists()


@pytest.mark.slow
def test_cli_converts_a_fine_tuning_run_to_tf1(tmp_path):
    model = fine_tuning_run(tmp_path / "run", "classifier")
    result = _run_cli(
        f"--input={tmp_path / 'run'}", f"--output={tmp_path / 'tf1'}", "--output_format=tf1"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert tf.train.latest_checkpoint(str(tmp_path / "tf1")) == str(tmp_path / "tf1" / "model.ckpt")
    assert_original_names_and_values(tmp_path, model, "classifier", step=4)


@pytest.mark.parametrize(
    "kind, task_name, message",
    [
        (
            "classifier",
            "bogus",
            "Unknown --task_name='bogus'; choose one of .*, ax \\(or race\\)\\.$",
        ),
        ("classifier", "race", "not the multiple-choice head of --task_name=race"),
        ("squad_v1", "mrpc", "not the 2-output classifier head of --task_name=mrpc"),
        # No HF class computes SQuAD 2.0's head: it was described as "no fine-tuning head".
        ("squad_v2", "mnli", "holds the SQuAD 2.0 head, not the 3-output classifier head"),
    ],
)
def test_a_task_name_that_is_not_the_inputs_is_refused_for_every_format(
    tmp_path, kind, task_name, message
):
    """--task_name is checked against the input's head for tf1 and keras too, not ignored."""
    fine_tuning_run(tmp_path / "run", kind)
    for output_format in ("tf1", "keras"):
        with pytest.raises(OutputFormatError, match=message):
            convert(
                str(tmp_path / "run"),
                str(tmp_path / output_format),
                output_format,
                None,
                task_name=task_name,
            )
        assert not (tmp_path / output_format).exists()
