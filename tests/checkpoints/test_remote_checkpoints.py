"""HF and Keras checkpoints in remote folders: ram:// stands in for gs:// (both go through
`tf.io.gfile`). They read and write as local ones do, and nothing lands in a local folder
named after the scheme (`ram:`, as `os.makedirs("ram://out")` would make)."""

import os

import numpy as np
import pytest
import tensorflow as tf
from checkpoint_testing import HF_FIXTURE, copy_up, randomize
from safetensors.numpy import load_file

from albert.checkpoints import (
    CheckpointError,
    detect_format,
    hf,
    load_checkpoint,
    read_config,
    save_checkpoint,
)
from albert.convert_checkpoint import FLAGS, main
from albert.modeling import AlbertClassifier, AlbertPretrainer
from tests.helpers import tiny_config


def _max_abs_diff(variables, others):
    assert len(variables) == len(others)
    return max(
        float(np.max(np.abs(a.numpy() - b.numpy()))) for a, b in zip(variables, others, strict=True)
    )


def _no_local_scheme_folder(folder):
    assert not [name for name in os.listdir(folder) if name.startswith("ram:")]


@pytest.mark.parametrize("format_name", ["hf", "keras"])
def test_a_remote_round_trip_equals_the_local_one(tmp_path, monkeypatch, format_name):
    monkeypatch.chdir(tmp_path)
    config = tiny_config()
    model = randomize(AlbertPretrainer(config))
    local = str(tmp_path / "local")
    remote = f"ram://{tmp_path.name}-{format_name}/checkpoint_dir"
    save_checkpoint(model, local, format_name)
    written = save_checkpoint(model, remote, format_name)
    assert written.startswith(remote)
    # The same files, and no temporaries left beside them.
    assert sorted(tf.io.gfile.listdir(remote)) == sorted(os.listdir(local))
    assert detect_format(remote) == format_name
    assert read_config(remote) == config
    from_remote, from_local = AlbertPretrainer(config), AlbertPretrainer(config)
    result = load_checkpoint(from_remote, remote)
    load_checkpoint(from_local, local)
    assert result.initialised == [] and result.path.startswith(remote)
    assert _max_abs_diff(from_remote.weights, from_local.weights) == 0
    assert _max_abs_diff(from_remote.weights, model.weights) == 0
    _no_local_scheme_folder(tmp_path)


def test_a_remote_hf_folder_copied_up_reads_and_its_errors_name_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    remote = copy_up(HF_FIXTURE, f"ram://{tmp_path.name}-hf-fixture/hf")
    assert detect_format(remote) == "hf"
    config = read_config(remote)
    assert config == read_config(HF_FIXTURE)
    from_remote, from_local = AlbertPretrainer(config), AlbertPretrainer(config)
    load_checkpoint(from_remote, remote)
    load_checkpoint(from_local, HF_FIXTURE)
    assert _max_abs_diff(from_remote.weights, from_local.weights) == 0

    # Without its weights: the error names the remote folder, not a local copy.
    config_only = f"ram://{tmp_path.name}-hf-config-only/hf"
    tf.io.gfile.makedirs(config_only)
    tf.io.gfile.copy(f"{remote}/config.json", f"{config_only}/config.json")
    with pytest.raises(CheckpointError, match=f"No model.safetensors in {config_only};"):
        hf.load(AlbertPretrainer(config), config_only)
    _no_local_scheme_folder(tmp_path)


def _main_with_flags(*flags):
    """`convert_checkpoint`'s main in this process with `flags` parsed; its exit code."""
    FLAGS(["convert_checkpoint", *flags])
    try:
        return main([])
    finally:
        FLAGS.unparse_flags()


def test_convert_checkpoint_reads_and_writes_remote_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny_config()
    # A fine-tuned model: its head is found in the stored files (h5py, safetensors headers).
    model = randomize(AlbertClassifier(config, num_labels=3))
    local, remote = tmp_path / "local", f"ram://{tmp_path.name}-convert"
    save_checkpoint(model, str(local / "keras"), "keras")
    copy_up(str(local / "keras"), f"{remote}/keras")
    for source, target, format_name in [("keras", "hf", "hf"), ("hf", "keras2", "keras")]:
        for root in (str(local), remote):
            flags = [f"--input={root}/{source}", f"--output={root}/{target}"]
            assert _main_with_flags(*flags, f"--output_format={format_name}") == 0, root
    _no_local_scheme_folder(tmp_path)

    staged = tmp_path / "staged_hf"
    staged.mkdir()
    for name in tf.io.gfile.listdir(f"{remote}/hf"):
        tf.io.gfile.copy(f"{remote}/hf/{name}", str(staged / name))
    assert sorted(os.listdir(staged)) == sorted(os.listdir(local / "hf"))
    written, expected = (
        load_file(str(staged / hf.WEIGHTS_FILE)),
        load_file(str(local / "hf" / hf.WEIGHTS_FILE)),
    )
    assert set(written) == set(expected)
    assert all(np.array_equal(written[name], expected[name]) for name in expected)

    again = AlbertClassifier(config, num_labels=3)
    assert load_checkpoint(again, f"{remote}/keras2").initialised == []
    assert _max_abs_diff(again.weights, model.weights) == 0


@pytest.mark.parametrize("source", ["hf", "keras"])
def test_a_remote_conversion_downloads_each_file_once_and_leaves_no_copy(
    tmp_path, monkeypatch, source
):
    # The stored model's head was found from the weights' shapes, then the weights loaded:
    # each through its own local copy, so a remote checkpoint (0.9 GB at xxlarge) came down
    # twice.
    import tempfile

    monkeypatch.chdir(tmp_path)
    model = randomize(AlbertClassifier(tiny_config(), num_labels=3))
    remote = f"ram://{tmp_path.name}-once-{source}"
    save_checkpoint(model, str(tmp_path / source), source)
    copy_up(str(tmp_path / source), f"{remote}/{source}")
    copy, downloads = tf.io.gfile.copy, []

    def counting_copy(src, dst, overwrite=False):
        if src.startswith("ram://"):
            downloads.append(src)
        return copy(src, dst, overwrite)

    monkeypatch.setattr(tf.io.gfile, "copy", counting_copy)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    target = "keras" if source == "hf" else "hf"
    flags = [f"--input={remote}/{source}", f"--output={remote}/out", f"--output_format={target}"]
    assert _main_with_flags(*flags) == 0
    inputs = [d for d in downloads if d.startswith(f"{remote}/{source}/")]
    assert sorted(inputs) == sorted(set(inputs)) and inputs  # each input file once
    assert os.listdir(tmp_path / "tmp") == []
    again = AlbertClassifier(tiny_config(), num_labels=3)
    load_checkpoint(again, f"{remote}/out")
    assert _max_abs_diff(again.weights, model.weights) == 0


def test_shared_copies_are_not_read_after_their_folder_is_written(tmp_path):
    from albert.checkpoints import remote as remote_files

    folder = f"ram://{tmp_path.name}-stale"
    with tf.io.gfile.GFile(f"{folder}/w", "w") as f:
        f.write("old")
    with remote_files.shared_copies():
        with remote_files.local_copies(folder, ["w"]) as local:
            assert open(os.path.join(local, "w")).read() == "old"
        with remote_files.written_locally(folder, ["w"]) as local:
            with open(os.path.join(local, "w"), "w") as f:
                f.write("new")
        with remote_files.local_copies(folder, ["w"]) as local:
            assert open(os.path.join(local, "w")).read() == "new"


@pytest.mark.parametrize("format_name", ["hf", "keras"])
def test_init_checkpoint_takes_a_remote_fine_tuned_folder(tmp_path, monkeypatch, format_name):
    from albert.tasks.weights import load_finetuning_weights

    monkeypatch.chdir(tmp_path)
    config = tiny_config()
    model = randomize(AlbertClassifier(config, num_labels=2))
    remote = f"ram://{tmp_path.name}-init-{format_name}/mrpc"
    save_checkpoint(model, remote, format_name)
    again = AlbertClassifier(config, num_labels=2)
    assert load_finetuning_weights(again, remote, require_head=True, labels=["0", "1"])
    assert _max_abs_diff(again.weights, model.weights) == 0
    _no_local_scheme_folder(tmp_path)


def test_a_missing_remote_path_is_no_checkpoint_of_any_format(tmp_path):
    # Not "No TF1 checkpoint at ...": the path may be a mistyped HF or Keras folder.
    missing = f"ram://{tmp_path.name}-missing/albert_hf"
    with pytest.raises(CheckpointError, match=f"No checkpoint found at {missing}: expected a TF1"):
        detect_format(missing)


def test_a_runs_final_weights_export_to_a_remote_output_dir(tmp_path, monkeypatch):
    # TrainingTask.export, what every run writes last, goes through save_checkpoint's remote
    # path: the files a local output_dir gets, loadable from there.
    from albert.training.task import TrainingTask

    monkeypatch.chdir(tmp_path)
    model = randomize(AlbertPretrainer(tiny_config()))
    remote = f"ram://{tmp_path.name}-export/run"
    written = TrainingTask.export(None, model, remote)
    assert written == f"{remote}/pretrainer.weights.h5"
    local = TrainingTask.export(None, model, str(tmp_path / "run"))
    assert sorted(tf.io.gfile.listdir(remote)) == sorted(os.listdir(os.path.dirname(local)))
    loaded = AlbertPretrainer(tiny_config())
    load_checkpoint(loaded, remote)
    assert _max_abs_diff(loaded.weights, model.weights) == 0.0
    _no_local_scheme_folder(tmp_path)


def test_a_download_that_failed_midway_is_not_reused(tmp_path, monkeypatch):
    # Within shared_copies a file already in the local copy is not downloaded again: one cut
    # off midway stayed there, truncated, and the next read of the folder took it as whole.
    from albert.checkpoints import remote as remote_files

    folder = f"ram://{tmp_path.name}-cut"
    with tf.io.gfile.GFile(f"{folder}/w", "w") as f:
        f.write("whole")
    copy = tf.io.gfile.copy

    def cut_off(source, target, overwrite=False):
        with open(target, "w") as f:
            f.write("wh")
        raise tf.errors.UnavailableError(None, None, "connection reset")

    with remote_files.shared_copies():
        monkeypatch.setattr(tf.io.gfile, "copy", cut_off)
        with pytest.raises(tf.errors.UnavailableError):
            with remote_files.local_copies(folder, ["w"]):
                pass
        monkeypatch.setattr(tf.io.gfile, "copy", copy)
        with remote_files.local_copies(folder, ["w"]) as local:
            assert open(os.path.join(local, "w")).read() == "whole"


def test_a_remote_files_warnings_name_it_not_its_local_copy(tmp_path, absl_caplog):
    # HF's AlbertForMaskedLM saves no pooler: the warning named the local temporary copy
    # (/tmp/albert-checkpoint-.../model.safetensors), a path the user never gave.
    import shutil

    from safetensors.numpy import save_file

    from albert.modeling import AlbertBackbone

    local = tmp_path / "hf"
    shutil.copytree(HF_FIXTURE, local)
    tensors = load_file(str(local / hf.WEIGHTS_FILE))
    del tensors["albert.pooler.weight"], tensors["albert.pooler.bias"]
    save_file(tensors, str(local / hf.WEIGHTS_FILE), metadata={"format": "pt"})
    remote = copy_up(str(local), f"ram://{tmp_path.name}-nopooler")
    load_checkpoint(AlbertBackbone(read_config(remote)), remote)
    [warning] = [r.getMessage() for r in absl_caplog.records if "holds no pooler" in r.getMessage()]
    assert warning.startswith(f"{remote}/{hf.WEIGHTS_FILE} holds no pooler")
    assert "albert-checkpoint-" not in absl_caplog.text


def _same_class(model_class):
    if model_class is AlbertClassifier:
        return AlbertClassifier(tiny_config(), num_labels=3)
    return AlbertPretrainer(tiny_config())


@pytest.mark.parametrize("where", ["local", "remote"])
@pytest.mark.parametrize("model_class", [AlbertClassifier, AlbertPretrainer])
def test_a_truncated_keras_weights_file_is_one_line(tmp_path, where, model_class):
    # h5py's OSError ("truncated file: eof = ...") came out as a traceback.
    model = randomize(_same_class(model_class))
    folder = tmp_path / "keras"
    save_checkpoint(model, str(folder), "keras")
    [weights] = [p for p in folder.iterdir() if p.name.endswith(".weights.h5")]
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    path = str(folder) if where == "local" else copy_up(str(folder), f"ram://{tmp_path.name}-cut")
    from albert.convert_checkpoint import convert

    task = "mnli" if model_class is AlbertClassifier else None
    with pytest.raises(CheckpointError, match="Cannot read the Keras weights") as error:
        convert(path, str(tmp_path / "out"), "hf", task_name=task)
    assert "\n" not in str(error.value) and "albert-checkpoint-" not in str(error.value)
    with pytest.raises(CheckpointError, match="Cannot read the Keras weights") as error:
        load_checkpoint(_same_class(model_class), path)  # as --init_checkpoint loads it
    assert "\n" not in str(error.value) and "albert-checkpoint-" not in str(error.value)
