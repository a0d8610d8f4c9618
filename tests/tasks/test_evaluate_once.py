"""--do_train --do_eval reads dev once per evaluation point: the final eval_results.txt takes
the training loop's metrics of the checkpoint it reports (model.ckpt-best) instead of a pass
of its own; a run that did not evaluate those weights (--do_eval alone) still reads dev.
--do_eval alone then removes the evaluated checkpoints but the best and the two newest, as the
original's eval loop."""

import shutil

import numpy as np
import pytest
import synthetic_glue as synthetic
import tensorflow as tf

from albert.config import AlbertConfig
from albert.tasks import classification, engine
from albert.tokenization import FullTokenizer
from albert.training import checkpointing
from albert.training.checkpointing import read_key_values
from albert.training.optimization import create_optimizer


def _counted_task(data_dir, passes, accuracies):
    """A tiny SST-2 task that logs each predict pass's role and reports `accuracies` in turn
    as its main metric (so the best checkpoint need not be the last)."""
    tokenizer = FullTokenizer(spm_model_file=synthetic.SPM_MODEL)
    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    task = classification.GlueTask("sst-2", data_dir, tokenizer, config, 32, 8, 6, 4)
    predict, evaluate_predictions = task.predict, task.evaluate_predictions

    def counted_predict(model, strategy, role, steps_per_call=1):
        passes.append(role)
        return predict(model, strategy, role, steps_per_call)

    def scripted_evaluation(predictions):
        assert accuracies, "more evaluations than evaluation points"
        return {**evaluate_predictions(predictions), "accuracy": accuracies.pop(0)}

    task.predict, task.evaluate_predictions = counted_predict, scripted_evaluation
    return task


def _optimizer_fn(global_step):
    return create_optimizer(
        "adamw", 1e-3, 6, num_warmup_steps=2, global_step=global_step, aggregate_gradients=False
    )


@pytest.mark.slow  # trains and evaluates a classifier (~5 s)
def test_dev_is_read_once_per_evaluation_point(tmp_path):
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=24, num_dev=9, num_test=5)
    output_dir = tmp_path / "out"
    options = synthetic.brief_run_options(output_dir)
    strategy = tf.distribute.get_strategy()
    passes = []
    # Step 3 scores best, step 6 worse: the final weights are model.ckpt-best, of step 3.
    task = _counted_task(data_dir, passes, [0.75, 0.25])
    metrics = engine.run(task, strategy, options, _optimizer_fn, do_predict=True)
    assert passes == ["eval", "eval", "predict"]  # steps 3 and 6, then the test set
    assert metrics["global_step"] == 3 and metrics["accuracy"] == 0.75
    results = read_key_values(output_dir / "eval_results.txt")
    assert results["global_step"] == "3" and float(results["accuracy"]) == 0.75
    assert results["checkpoint"] == str(output_dir / "model.ckpt-best")
    assert read_key_values(output_dir / "best_checkpoint.txt")["global_step"] == "3"

    # --do_eval alone: no evaluation of those weights in this process, so one pass.
    passes.clear()
    task = _counted_task(data_dir, passes, [0.5])
    options.do_train = False
    metrics = engine.run(task, strategy, options, _optimizer_fn)
    assert passes == ["eval"]
    assert metrics["global_step"] == 3 and metrics["accuracy"] == 0.5


@pytest.mark.slow  # trains and evaluates a classifier (~5 s)
def test_eval_alone_picks_the_best_of_the_saved_checkpoints(tmp_path, absl_caplog):
    # run_glue.sh trains with --do_train --nodo_eval, then runs --nodo_train --do_eval
    # --do_predict: as the original, every checkpoint the training run saved is evaluated
    # and the best one becomes model.ckpt-best, which reports and predicts.
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=24, num_dev=9, num_test=5)
    output_dir = tmp_path / "out"
    options = synthetic.brief_run_options(output_dir, do_eval=False)
    strategy = tf.distribute.get_strategy()
    passes = []
    engine.run(_counted_task(data_dir, passes, []), strategy, options, _optimizer_fn)
    assert passes == []  # --do_train alone: checkpoints 3 and 6, never evaluated

    # Step 3 scores best, step 6 worse.
    task = _counted_task(data_dir, passes, [0.75, 0.25])
    options.do_train, options.do_eval = False, True
    metrics = engine.run(task, strategy, options, _optimizer_fn, do_predict=True)
    assert passes == ["eval", "eval", "predict"]
    assert metrics["global_step"] == 3 and metrics["accuracy"] == 0.75
    # No training in this run: the console must not say the weights were evaluated in one.
    assert "evaluated earlier in this run" in absl_caplog.text
    results = read_key_values(output_dir / "eval_results.txt")
    assert results["global_step"] == "3"
    assert results["checkpoint"] == str(output_dir / "model.ckpt-best")
    assert read_key_values(output_dir / "best_checkpoint.txt")["global_step"] == "3"
    # TensorBoard shows each checkpoint's eval at its step, as after --do_train --do_eval.
    assert _eval_accuracies(output_dir) == [(3, 0.75), (6, 0.25)]

    # Evaluated checkpoints are not evaluated again: a rerun reads dev once, for its report.
    passes.clear()
    metrics = engine.run(_counted_task(data_dir, passes, [0.5]), strategy, options, _optimizer_fn)
    assert passes == ["eval"] and metrics["global_step"] == 3
    assert _eval_accuracies(output_dir) == [(3, 0.75), (6, 0.25)]


@pytest.mark.slow  # trains and evaluates a classifier (~5 s)
def test_eval_alone_of_initial_weights_writes_their_tensorboard_point(tmp_path):
    # --do_eval alone in a new output_dir on --init_checkpoint weights (a fine-tuning run, a
    # released model): no training checkpoint to evaluate, so the final evaluation is the
    # point eval/ gets, at the weights' global step, as run_pretraining --do_eval writes it.
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=24, num_dev=9, num_test=5)
    strategy = tf.distribute.get_strategy()
    trained = synthetic.brief_run_options(tmp_path / "trained", do_eval=False)
    engine.run(_counted_task(data_dir, [], []), strategy, trained, _optimizer_fn)
    options = synthetic.brief_run_options(tmp_path / "out")
    options.do_train, options.init_checkpoint = False, trained.output_dir
    metrics = engine.run(_counted_task(data_dir, [], [0.5]), strategy, options, _optimizer_fn)
    assert metrics["global_step"] == 6
    assert _eval_accuracies(tmp_path / "out") == [(6, 0.5)]


@pytest.mark.slow  # trains a classifier twice and evaluates it three times (~15 s)
def test_eval_alone_removes_the_evaluated_checkpoints_as_the_original(
    tmp_path, absl_caplog, monkeypatch
):
    # run_glue.sh: --do_train --nodo_eval keeps every checkpoint (3 to 15), then --do_eval.
    data_dir = synthetic.write_sst2(tmp_path / "glue", num_train=24, num_dev=9, num_test=5)
    output_dir = tmp_path / "out"
    options = synthetic.brief_run_options(output_dir, do_eval=False)
    options.num_train_steps, options.keep_checkpoint_max = 15, 0
    strategy = tf.distribute.get_strategy()
    engine.run(_counted_task(data_dir, [], []), strategy, options, _optimizer_fn)
    shutil.copytree(output_dir, tmp_path / "kept")
    best_weights = _model_values(output_dir / "model.ckpt-6")

    # Step 6 scores best. The run is killed once the checkpoints to remove are off the
    # `checkpoint` list, before any file is deleted (ALBERT_FAULT_POINT=checkpoint_prune:3).
    passes = []
    options.do_train, options.do_eval, options.keep_checkpoint_max = False, True, 5
    task = _counted_task(data_dir, passes, [0.5, 0.75, 0.25, 0.5, 0.6])
    with monkeypatch.context() as patch:
        patch.setattr(checkpointing, "fault_point", _raise_at("checkpoint_prune", 3))
        with pytest.raises(_Killed):
            engine.run(task, strategy, options, _optimizer_fn)
    assert passes == ["eval"] * 5
    assert [
        checkpointing.checkpoint_step(p) for p in checkpointing.saved_checkpoints(output_dir)
    ] == [
        12,
        15,
    ]
    # The rerun evaluates nothing again (one pass: its report of model.ckpt-best) and
    # deletes what the killed run left. As the original: model.ckpt-best and the two newest.
    passes.clear()
    metrics = engine.run(_counted_task(data_dir, passes, [0.75]), strategy, options, _optimizer_fn)
    assert passes == ["eval"] and metrics["global_step"] == 6
    remaining = ["model.ckpt-12", "model.ckpt-15", "model.ckpt-best"]
    assert _checkpoint_files(output_dir) == remaining
    assert _model_values(output_dir / "model.ckpt-best").keys() == best_weights.keys()
    for key, value in _model_values(output_dir / "model.ckpt-best").items():
        assert np.array_equal(value, best_weights[key]), key
    assert read_key_values(output_dir / "evaluated_checkpoint.txt")["global_step"] == "15"
    results = read_key_values(output_dir / "eval_results.txt")
    assert results["global_step"] == "6"
    assert results["checkpoint"] == str(output_dir / "model.ckpt-best")
    assert (
        "Removing checkpoint 3: evaluated, not the best, and older than the newest [12, 15]"
        in absl_caplog.text
    )
    assert "Removing checkpoint 6: evaluated, model.ckpt-best holds its weights" in absl_caplog.text

    # Another rerun evaluates nothing again and removes nothing more.
    passes.clear()
    metrics = engine.run(_counted_task(data_dir, passes, [0.75]), strategy, options, _optimizer_fn)
    assert passes == ["eval"] and metrics["global_step"] == 6
    assert _checkpoint_files(output_dir) == remaining

    # Training on resumes from the newest checkpoint.
    options.do_train, options.do_eval, options.num_train_steps = True, False, 18
    engine.run(_counted_task(data_dir, [], []), strategy, options, _optimizer_fn)
    assert f"Resumed from {output_dir / 'model.ckpt-15'} at global step 15" in absl_caplog.text
    assert [
        checkpointing.checkpoint_step(p) for p in checkpointing.saved_checkpoints(output_dir)
    ] == [
        12,
        15,
        18,
    ]

    # --keep_checkpoint_max=0 on the eval command keeps every checkpoint.
    options.output_dir, options.num_train_steps = str(tmp_path / "kept"), 15
    options.do_train, options.do_eval, options.keep_checkpoint_max = False, True, 0
    task = _counted_task(data_dir, [], [0.5, 0.75, 0.25, 0.5, 0.6])
    engine.run(task, strategy, options, _optimizer_fn)
    assert _checkpoint_files(tmp_path / "kept") == [
        f"model.ckpt-{step}" for step in (12, 15, 3, 6, 9, "best")
    ]


class _Killed(Exception):
    pass


def _raise_at(point, step):
    """A `checkpointing.fault_point` that raises `_Killed` where ALBERT_FAULT_POINT would kill."""

    def fault_point(name, at):
        if (name, at) == (point, step):
            raise _Killed(f"{name}:{at}")

    return fault_point


def _checkpoint_files(output_dir):
    """The checkpoint prefixes in `output_dir`, sorted by name; each input state's too."""
    prefixes = sorted(p.name[: -len(".index")] for p in output_dir.glob("model.ckpt-*.index"))
    states = sorted(p.name for p in output_dir.glob("input_state/worker_0/ckpt-*.index"))
    assert states == sorted(f"{p[len('model.') :]}.index" for p in prefixes if "best" not in p)
    return prefixes


def _model_values(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("model/")]
    return {name: reader.get_tensor(name) for name in names}


def _eval_accuracies(output_dir):
    """[(step, accuracy)] of the eval/ event files, in the order written."""
    written = []
    for path in sorted((output_dir / "eval").glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == "accuracy":
                    written.append((event.step, float(tf.make_ndarray(value.tensor))))
    return written
