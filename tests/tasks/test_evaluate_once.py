"""--do_train --do_eval reads dev once per evaluation point: the final eval_results.txt takes
the training loop's metrics of the checkpoint it reports (model.ckpt-best) instead of a pass
of its own; a run that did not evaluate those weights (--do_eval alone) still reads dev."""

import pytest
import synthetic_glue as synthetic
import tensorflow as tf

from albert.config import AlbertConfig
from albert.tasks import classification, engine
from albert.tokenization import FullTokenizer
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


def _eval_accuracies(output_dir):
    """[(step, accuracy)] of the eval/ event files, in the order written."""
    written = []
    for path in sorted((output_dir / "eval").glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == "accuracy":
                    written.append((event.step, float(tf.make_ndarray(value.tensor))))
    return written
