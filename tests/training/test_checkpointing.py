"""Training checkpoints hold every model weight (keyed by path) and restore them."""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert.checkpoints import CheckpointError, training_format
from albert.modeling import AlbertPretrainer
from albert.training import checkpointing, loop
from tests.helpers import tiny_config


def _config(**changes):
    values = dict(
        embedding_size=16,
        hidden_size=24,
        num_attention_heads=2,
        intermediate_size=40,
        inner_group_num=1,
        max_position_embeddings=512,
        type_vocab_size=2,
    )
    return tiny_config(**{**values, **changes})


def test_every_weight_is_saved_under_its_path(tmp_path):
    model = AlbertPretrainer(_config())
    # The trap: Keras 3 layers kept in nested lists are missing from the object graph.
    plain = tf.train.Checkpoint(model=model).write(str(tmp_path / "plain"))
    plain_keys = [n for n, _ in tf.train.list_variables(plain) if n.startswith("model/")]
    assert len(plain_keys) < len(model.weights)

    path = tf.train.Checkpoint(model=training_format.variable_tree(model.weights)).write(
        str(tmp_path / "ours")
    )
    keys = {n for n, _ in tf.train.list_variables(path) if n.startswith("model/")}
    assert len(keys) == len(model.weights)
    for weight in model.weights:
        assert f"model/{weight.path}/.ATTRIBUTES/VARIABLE_VALUE" in keys


def test_restore_model_weights_round_trip_and_mismatch(tmp_path):
    source = AlbertPretrainer(_config())
    step = tf.Variable(3, dtype=tf.int64)
    prefix = tf.train.Checkpoint(
        model=training_format.variable_tree(source.weights), global_step=step
    ).write(str(tmp_path / "model.ckpt-3"))
    assert training_format.is_training_checkpoint(prefix)
    assert not training_format.is_training_checkpoint(str(tmp_path / "missing"))

    target = AlbertPretrainer(_config())
    training_format.restore_model_weights(target, prefix)
    for a, b in zip(source.weights, target.weights, strict=True):
        assert np.array_equal(a.numpy(), b.numpy()), a.path

    with pytest.raises(CheckpointError, match="albert_config_file"):
        training_format.restore_model_weights(
            AlbertPretrainer(_config(num_hidden_groups=4)), prefix
        )


def test_key_values_round_trip(tmp_path):
    path = str(tmp_path / "eval_results.txt")
    checkpointing.write_key_values(path, {"global_step": 7, "masked_lm_accuracy": 0.25})
    with open(path) as f:
        assert f.read() == "global_step = 7\nmasked_lm_accuracy = 0.25\n"
    assert checkpointing.read_key_values(path) == {
        "global_step": "7",
        "masked_lm_accuracy": "0.25",
    }


def _batches(batch_size, seq_len):
    features = {"input_ids": tf.reshape(tf.range(60 * seq_len), [60, seq_len])}
    # Static batches, as the training input gives them.
    dataset = tf.data.Dataset.from_tensor_slices(features).repeat()
    return iter(dataset.batch(batch_size, drop_remainder=True))


def test_input_state_of_other_batches_is_not_restored(tmp_path):
    # A rerun with another --train_batch_size or --max_seq_length: the saved iterator would
    # restore buffered batches of the old shape and fail at the first step with a traceback.
    step = tf.Variable(0, dtype=tf.int64)
    model = keras.Sequential([keras.layers.Dense(2)])
    model.build((None, 3))
    optimizer = keras.optimizers.SGD()

    def checkpoints():
        return checkpointing.TrainingCheckpoints(
            str(tmp_path), str(tmp_path), model, optimizer, step, max_to_keep=2
        )

    saving = checkpoints()
    saving.input_iterator = _batches(4, 7)
    next(saving.input_iterator)
    saving.save(1)
    same = _batches(4, 7)
    assert checkpoints().restore_input(same, 1)
    assert next(same)["input_ids"][0, 0] == 4 * 7
    for batch_size, seq_len in ((3, 7), (4, 5)):
        with pytest.raises(ValueError, match="batches of another shape"):
            checkpoints().restore_input(_batches(batch_size, seq_len), 1)


def test_input_state_of_another_number_of_workers_is_not_restored(tmp_path):
    # Worker 0 of a 2-worker run, rerun as worker 0 of 4 with the same batches: its pipeline
    # now reads other files (albert.data.records shares them out by the worker count); the
    # position of the old share would silently replay or skip files.
    step = tf.Variable(0, dtype=tf.int64)
    model = keras.Sequential([keras.layers.Dense(2)])
    model.build((None, 3))
    optimizer = keras.optimizers.SGD()

    def checkpoints(num_workers):
        return checkpointing.TrainingCheckpoints(
            str(tmp_path), str(tmp_path), model, optimizer, step, 2, num_workers=num_workers
        )

    saving = checkpoints(2)
    saving.input_iterator = _batches(4, 7)
    next(saving.input_iterator)
    saving.save(1)
    with pytest.raises(ValueError, match="saved by one of 2 workers, and this run has 4"):
        checkpoints(4).restore_input(_batches(4, 7), 1)
    same = _batches(4, 7)
    assert checkpoints(2).restore_input(same, 1)
    assert next(same)["input_ids"][0, 0] == 4 * 7
    # A position saved before the worker count was (its shapes alone) still resumes.
    spec = tmp_path / checkpointing.INPUT_STATE_DIR / "worker_0" / "ckpt-1.element_spec.json"
    spec.write_text(checkpointing.element_spec_signature(_batches(4, 7)))
    assert checkpoints(4).restore_input(_batches(4, 7), 1)
    with pytest.raises(ValueError, match="batches of another shape"):
        checkpoints(4).restore_input(_batches(3, 7), 1)


def test_a_model_without_dropout_resumes_without_a_random_state_warning(tmp_path, caplog):
    # v2 configs have no dropout, so no random state to save: every resume warned that the
    # checkpoint came from an older run and that dropout masks would differ.
    step = tf.Variable(0, dtype=tf.int64)
    models = []
    for layers in ([], [keras.layers.Dropout(0.1)]):
        model = keras.Sequential([keras.layers.Dense(2, name="dense"), *layers], name="model")
        model.build((None, 3))
        models.append(model)
    plain, dropped = models  # the same weight paths
    optimizer = keras.optimizers.SGD()

    def checkpoints(model):
        return checkpointing.TrainingCheckpoints(
            str(tmp_path), str(tmp_path), model, optimizer, step, max_to_keep=2
        )

    checkpoints(plain).save(1)
    assert checkpoints(plain).restore_latest().endswith("model.ckpt-1")
    assert "random state" not in caplog.text
    # The same weights with dropout: its masks after resume do differ.
    checkpoints(dropped).restore_latest()
    assert "holds no random state" in caplog.text


def test_keep_checkpoint_max_0_keeps_every_checkpoint(tmp_path):
    # The original's meaning (Estimator RunConfig): 0 keeps all. It was refused here, so a
    # command of the original with --keep_checkpoint_max=0 stopped with an error.
    from absl import flags

    from albert.training import flags as training_flags

    flag_values = flags.FlagValues()
    training_flags.define_pretraining_flags(flag_values)
    flag_values(["run_pretraining", "--keep_checkpoint_max=0"])
    training_flags.check_ranges(flag_values)
    step = tf.Variable(0, dtype=tf.int64)
    model = keras.Sequential([keras.layers.Dense(2)])
    model.build((None, 3))
    checkpoints = checkpointing.TrainingCheckpoints(
        str(tmp_path), str(tmp_path), model, keras.optimizers.SGD(), step, max_to_keep=0
    )
    for number in range(1, 8):
        checkpoints.save(number)
    kept = sorted(int(p.name.split("-")[1].split(".")[0]) for p in tmp_path.glob("*.index"))
    assert kept == list(range(1, 8))
    # A non-chief worker's scratch copies (never read back) are not kept by the run's worth.
    scratch = tmp_path / "worker"
    worker = checkpointing.TrainingCheckpoints(
        str(tmp_path), str(scratch), model, keras.optimizers.SGD(), step, max_to_keep=0
    )
    for number in range(1, 4):
        worker.save(number)
    assert [p.name for p in scratch.glob("*.index")] == ["model.ckpt-3.index"]


def test_a_checkpoint_that_only_ties_the_best_score_does_not_replace_it(tmp_path):
    # Small dev sets (RTE, MRPC, CoLA) often give two checkpoints the same score; the
    # original keeps the first that reached it (`value > best`), and so must model.ckpt-best.
    kept = []
    task = types.SimpleNamespace(
        best_metric="accuracy", save_best=lambda model, path, prefix: kept.append(path)
    )
    for step, accuracy in ((1, 0.5), (2, 0.75), (3, 0.75), (4, 0.625)):
        path = str(tmp_path / f"model.ckpt-{step}")
        loop.keep_best(task, None, str(tmp_path), {"accuracy": accuracy}, path)
    assert kept == [str(tmp_path / "model.ckpt-1"), str(tmp_path / "model.ckpt-2")]
    record = checkpointing.read_key_values(str(tmp_path / checkpointing.BEST_INFO_FILE))
    assert record["global_step"] == "2" and float(record["value"]) == 0.75


def test_newest_step_reads_the_state_file_and_names_without_a_step(tmp_path):
    # Fine-tuning compares it across workers before it evaluates, predicts or exports: a
    # checkpoint named without a step (by hand, or by another tool) must not stop the run.
    assert checkpointing.newest_step(str(tmp_path)) == 0
    for name, step in (("model.ckpt-12", 12), ("model.ckpt-best", -1), ("model.ckpt", -1)):
        (tmp_path / f"{name}.index").write_bytes(b"")  # latest_checkpoint wants its files
        (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path / name}"\n')
        assert checkpointing.newest_step(str(tmp_path)) == step, name


def test_the_training_loop_saves_input_positions_with_its_worker_count(tmp_path, monkeypatch):
    # The run's checkpoints are told how many workers share the data out; with 1 (the
    # default) a rerun on another number of workers would restore the old share's position.
    from toy_tasks import LinearInputTask

    from albert.training import strategy as strategy_lib
    from albert.training.optimization import create_optimizer

    built = {}

    class Stop(Exception):
        pass

    def recorded(*args, **kwargs):
        built.update(kwargs)
        raise Stop

    monkeypatch.setattr(strategy_lib, "worker_info", lambda strategy: (0, 3, True))
    monkeypatch.setattr(checkpointing, "TrainingCheckpoints", recorded)
    options = loop.RunOptions(output_dir=str(tmp_path), num_train_steps=2, train_batch_size=1)
    with pytest.raises(Stop):
        loop._build(
            LinearInputTask([[1.0, 1.0]]),
            tf.distribute.get_strategy(),
            options,
            lambda step: create_optimizer("adamw", 0.01, 2, global_step=step),
        )
    assert (built["worker_index"], built["num_workers"]) == (0, 3)


def _saver(output_dir, write_dir=None, worker_index=0, max_to_keep=5):
    model = keras.Sequential([keras.layers.Dense(2)])
    model.build((None, 3))
    step = tf.Variable(0, dtype=tf.int64)
    return checkpointing.TrainingCheckpoints(
        str(output_dir),
        str(write_dir or output_dir),
        model,
        keras.optimizers.SGD(),
        step,
        max_to_keep=max_to_keep,
        worker_index=worker_index,
    )


def test_a_state_file_that_names_only_the_newest_checkpoint_is_read(tmp_path):
    # As TF1 tools and hand edits write it: no all_model_checkpoint_paths lines.
    _saver(tmp_path).save(3)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-3"\n')
    assert checkpointing.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-3")
    assert checkpointing.saved_checkpoints(str(tmp_path)) == [str(tmp_path / "model.ckpt-3")]


def test_leftovers_of_killed_writes_go_even_of_steps_the_rerun_never_writes(tmp_path):
    # Killed while saving step 9, resumed by a run that saves elsewhere (another cadence, or
    # --do_eval alone): TensorFlow's own merge never comes back to these.
    _saver(tmp_path).save(3)
    part = "part-00000-of-00001.data-00000-of-00001.tempstate8301734466204712419"
    leftovers = [
        tmp_path / "model.ckpt-9_temp" / part,
        tmp_path / "input_state" / "worker_0" / "ckpt-9_temp" / part,
        tmp_path / "input_state" / "worker_1" / "ckpt-9_temp" / part,
        tmp_path / ".model.ckpt-best.data-00000-of-00001.tmp-0123456789abcdef",
    ]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * 100)
    # A non-chief worker cleans its own input-state folder only.
    _saver(tmp_path, tmp_path / "scratch", worker_index=1).remove_unfinished_writes()
    assert [path.exists() for path in leftovers] == [True, True, False, True]
    _saver(tmp_path).remove_unfinished_writes()
    assert not any(path.parent.exists() and path.exists() for path in leftovers)
    assert not (tmp_path / "model.ckpt-9_temp").exists()
    assert checkpointing.is_intact(str(tmp_path / "model.ckpt-3"))


def test_input_positions_go_with_the_checkpoints_the_manager_drops(tmp_path):
    saver = _saver(tmp_path, max_to_keep=2)
    saver.input_iterator = iter(tf.data.Dataset.range(10))
    for step in range(1, 5):
        next(saver.input_iterator)
        saver.save(step)
    states = tmp_path / "input_state" / "worker_0"
    assert sorted({p.name.split(".")[0] for p in states.iterdir()}) == ["ckpt-3", "ckpt-4"]


@pytest.mark.parametrize(
    "paths, message",
    [
        (["encoder/query/kernel", "encoder/query/kernel"], "Two variables share the path"),
        (["encoder/query", "encoder/query/kernel"], "clashes with another variable"),
        (["encoder/query/kernel", "encoder/query"], "Two variables share the path"),
    ],
)
def test_variables_whose_paths_collide_are_refused(paths, message):
    # Written anyway, one would overwrite the other's value in the checkpoint, or a
    # restore would hand a variable to a node of the tree.
    variables = [types.SimpleNamespace(path=p) for p in paths]
    with pytest.raises(CheckpointError, match=message):
        training_format.variable_tree(variables)


def test_a_checkpoint_of_a_step_alone_is_not_a_training_checkpoint(tmp_path):
    # Another program's object-based checkpoint may hold a global_step too: without the
    # model's weights it is not one of ours, and has no step to resume from.
    prefix = tf.train.Checkpoint(global_step=tf.Variable(7, dtype=tf.int64)).write(
        str(tmp_path / "other.ckpt")
    )
    assert not training_format.is_training_checkpoint(prefix)
    assert training_format.global_step(prefix) is None


def _write_training_checkpoint(model, prefix):
    return tf.train.Checkpoint(
        model=training_format.variable_tree(model.weights),
        global_step=tf.Variable(3, dtype=tf.int64),
    ).write(prefix)


def test_a_weight_of_another_size_is_named_before_anything_is_assigned(tmp_path):
    prefix = _write_training_checkpoint(AlbertPretrainer(_config()), str(tmp_path / "ckpt-3"))
    target = AlbertPretrainer(_config(vocab_size=50))  # [50, E] for a stored [99, E]
    before = [w.numpy() for w in target.weights]
    with pytest.raises(CheckpointError, match=r"word_embeddings \(50, 16\) is stored with shape"):
        training_format.load(target, prefix)
    for weight, value in zip(target.weights, before, strict=True):
        assert np.array_equal(weight.numpy(), value), weight.path


def test_optional_weights_load_whole_or_not_at_all(tmp_path):
    # A fine-tuning head is read only when every one of its weights fits; one missing
    # leaves the whole head initialised, and listed as such.
    source = AlbertPretrainer(_config())
    prefix = _write_training_checkpoint(source, str(tmp_path / "ckpt-3"))
    target = AlbertPretrainer(_config())
    head = target.sentence_order_head.weights
    result = training_format.load(target, prefix, optional_weights=head)
    assert result.initialised == [] and {w.path for w in head} <= set(result.loaded)
    for a, b in zip(source.weights, target.weights, strict=True):
        assert np.array_equal(a.numpy(), b.numpy()), a.path

    bias = source.sentence_order_head.output_bias
    bias.assign(np.ones(bias.shape, "float32"))
    without_bias = [w for w in source.weights if w is not bias]
    prefix = tf.train.Checkpoint(
        model=training_format.variable_tree(without_bias),
        global_step=tf.Variable(3, dtype=tf.int64),
    ).write(str(tmp_path / "no-bias-3"))
    other = AlbertPretrainer(_config())
    head = other.sentence_order_head
    before = head.output_weights.numpy()
    result = training_format.load(other, prefix, optional_weights=head.weights)
    assert result.initialised == [w.path for w in head.weights]
    assert np.array_equal(head.output_weights.numpy(), before)


def test_a_copy_cut_short_leaves_no_restorable_checkpoint_at_the_target(tmp_path, monkeypatch):
    # The old index goes first: old data files half replaced by new ones must not be
    # restorable under the old index.
    old = _write_training_checkpoint(AlbertPretrainer(_config()), str(tmp_path / "best"))
    new = _write_training_checkpoint(AlbertPretrainer(_config()), str(tmp_path / "ckpt-9"))
    copy = tf.io.gfile.copy

    def copy_until_data(source, target, overwrite=False):
        if ".data-" in source:
            raise tf.errors.UnavailableError(None, None, "connection lost")
        copy(source, target, overwrite=overwrite)

    monkeypatch.setattr(training_format.tf.io.gfile, "copy", copy_until_data)
    with pytest.raises(tf.errors.UnavailableError):
        training_format.copy_checkpoint(new, old)
    assert not tf.io.gfile.exists(old + ".index")
    assert not training_format.is_training_checkpoint(old)


def test_a_run_directory_names_its_newest_checkpoint_and_a_prefix_itself(tmp_path):
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(step=tf.Variable(1)), str(tmp_path), max_to_keep=None
    )
    first, newest = manager.save(checkpoint_number=3), manager.save(checkpoint_number=5)
    assert training_format.checkpoint_prefix(str(tmp_path)) == newest
    assert training_format.checkpoint_prefix(first) == first
