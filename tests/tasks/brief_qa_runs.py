"""Brief SQuAD (v1.1, v2.0) and RACE runs of the fine-tuning engine under any strategy, for
the data-parallel parity tests (tests/tasks/test_mirrored_tasks.py); and a synthetic SQuAD
writer whose contexts hold several questions and run over several windows.

A run trains 6 steps of 8 with no dropout (the replicas of a strategy draw other masks than
one device), evaluates every 3 steps, predicts, and returns what it wrote: eval metrics,
prediction files, the raw predictions of the predict pass and the last checkpoint's values.
"""

import json
from pathlib import Path

import numpy as np
import synthetic_glue as synthetic
import tensorflow as tf

from albert.tasks.squad_null_threshold import RECORD_FILE

# Single pieces of the tiny SentencePiece model, never among the filler words.
ANSWERS = ("anarchism", "capitalism", "tactics", "autonomy", "workers", "authority")
# The windows of the brief runs: 32 tokens, a question of 6, so 23 context tokens a window.
WINDOW = dict(max_seq_length=32, doc_stride=8, max_query_length=8)


def write_squad(path, num_contexts, seed, version_2=False):
    """SQuAD JSON: contexts of 6 to 60 filler words with 1 to 3 answer words inserted, a
    question per answer word ("which word is X's neighbour" has the answer word itself), and
    for v2.0 one impossible question in every other context."""
    rng = np.random.default_rng(seed)
    paragraphs, number = [], 0
    for i in range(num_contexts):
        words = list(rng.choice(synthetic.WORDS, size=int(rng.integers(6, 61))))
        answers = [str(a) for a in rng.choice(ANSWERS, size=int(rng.integers(1, 4)), replace=False)]
        for answer in answers:
            words.insert(int(rng.integers(0, len(words) + 1)), answer)
        context = " ".join(words)
        qas = []
        for answer in answers:
            start = context.index(answer)  # no other word holds an answer word
            qa = {
                "id": f"q{number}",
                "question": f"which word is {answer} here",
                "answers": [{"text": answer, "answer_start": start}],
            }
            if version_2:
                qa["is_impossible"] = False
            qas.append(qa)
            number += 1
        if version_2 and i % 2:
            missing = next(a for a in ANSWERS if a not in answers)
            qa = {"id": f"q{number}", "question": f"which word is {missing} here"}
            qas.append({**qa, "answers": [], "is_impossible": True})
            number += 1
        paragraphs.append({"context": context, "qas": qas})
    data = {
        "version": "v2.0" if version_2 else "1.1",
        "data": [{"title": "t", "paragraphs": paragraphs}],
    }
    Path(path).write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def _optimizer_fn(global_step):
    from albert.training.optimization import create_optimizer

    return create_optimizer(
        "adamw", 1e-3, 6, num_warmup_steps=2, global_step=global_step, aggregate_gradients=False
    )


def squad_task(train_file, predict_file, version_2, eval_batch_size=6, predict_batch_size=4):
    from albert.config import AlbertConfig
    from albert.tasks.squad import SquadTask
    from albert.tokenization import FullTokenizer

    return SquadTask(
        train_file,
        predict_file,
        FullTokenizer(spm_model_file=synthetic.SPM_MODEL),
        AlbertConfig.from_dict(synthetic.TINY_CONFIG),
        version_2,
        train_batch_size=8,
        eval_batch_size=eval_batch_size,
        predict_batch_size=predict_batch_size,
        n_best_size=5,
        max_answer_length=5,
        start_n_top=3,
        end_n_top=3,
        classifier_dropout_prob=0.0,
        **WINDOW,
    )


def race_task(data_dir, eval_batch_size=6, predict_batch_size=4, **levels):
    from albert.config import AlbertConfig
    from albert.tasks.race import RaceTask
    from albert.tokenization import FullTokenizer

    return RaceTask(
        data_dir,
        FullTokenizer(spm_model_file=synthetic.SPM_MODEL),
        AlbertConfig.from_dict(synthetic.TINY_CONFIG),
        32,
        10,
        8,
        eval_batch_size,
        predict_batch_size,
        classifier_dropout_prob=0.0,
        **levels,
    )


def brief_run(task, strategy, output_dir, num_train_steps=6, eval_batch_size=None):
    """Trains `task` `num_train_steps` steps of 8 under `strategy` (eval every 3), predicts.

    Returns:
        dict: `metrics` (final eval), `files` (name -> parsed JSON of every .json written,
        or the text of the .txt results), `predictions` (name -> list, the raw predict pass in
        example order), `train` (the training summaries: tag -> step -> value, every 3 steps)
        and `weights` (checkpoint key -> list, every float of the last one).
    """
    from albert.tasks import engine
    from albert.training import loop

    options = loop.RunOptions(
        output_dir=str(output_dir),
        num_train_steps=num_train_steps,
        train_batch_size=8,
        eval_batch_size=eval_batch_size or task.eval_batch_size,
        do_eval=True,
        save_checkpoints_steps=3,
        iterations_per_loop=3,
        seed=3,
    )
    kept = {}
    write_predictions = task.write_predictions

    def keep_and_write(predictions, directory):
        kept.update({name: np.asarray(value).tolist() for name, value in predictions.items()})
        return write_predictions(predictions, directory)

    task.write_predictions = keep_and_write
    metrics = engine.run(task, strategy, options, _optimizer_fn, do_predict=True)
    output = Path(output_dir)
    files = {p.name: json.loads(p.read_text()) for p in sorted(output.glob("*.json"))}
    # SQuAD 2.0's record of its null threshold names the weights by their path in output_dir,
    # which differs between the runs compared; the threshold and step are compared.
    files.get(RECORD_FILE, {}).pop("checkpoint", None)
    files.update({p.name: p.read_text() for p in output.glob("predict_results.txt")})
    reader = tf.train.load_checkpoint(str(output / f"model.ckpt-{num_train_steps}"))
    weights = {
        name: reader.get_tensor(name).tolist()
        for name, dtype in reader.get_variable_to_dtype_map().items()
        if dtype.is_floating
    }
    return {
        "metrics": metrics,
        "files": files,
        "predictions": kept,
        "train": training_summaries(output),
        "weights": weights,
    }


def training_summaries(directory):
    """tag -> "step" -> value of the training scalars in `directory` (loss, gradient_norm,
    the task's metrics, learning_rate), but the speeds."""
    values = {}
    for path in sorted(Path(directory).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if not value.tag.endswith(("_per_second", "/sec")):
                    scalar = float(tf.make_ndarray(value.tensor))
                    values.setdefault(value.tag, {})[str(event.step)] = scalar
    return values


def run_spec(strategy, spec):
    """`brief_run` of a JSON spec: `kind` (v1, v2 or race), the data (`train` and `predict`
    files, or RACE's `data_dir`), `output_dir`, optional `steps` and `task` (keyword arguments
    of `squad_task` / `race_task`). With `error` set, the error it raises is returned as
    {"error": "Class: message"}."""
    try:
        if spec["kind"] == "race":
            task = race_task(spec["data_dir"], **spec.get("task", {}))
        else:
            task = squad_task(
                spec["train"], spec["predict"], spec["kind"] == "v2", **spec.get("task", {})
            )
        return brief_run(task, strategy, spec["output_dir"], spec.get("steps", 6))
    except Exception as e:
        if not spec.get("error"):
            raise
        return {"error": f"{type(e).__name__}: {e}"}


def max_abs_diff(expected, actual, where="", skip=()):
    """The largest |difference| of the numbers in two JSON-like values whose structure, keys
    (in order) and strings are equal (AssertionError naming the place otherwise); keys holding
    a string of `skip` are left out."""
    if isinstance(expected, dict):
        assert list(expected) == list(actual), where
        diffs = [
            max_abs_diff(expected[k], actual[k], f"{where}/{k}", skip)
            for k in expected
            if not any(s in k for s in skip)
        ]
        return max(diffs, default=0.0)
    if isinstance(expected, str):
        assert expected == actual, f"{where}: {expected!r} != {actual!r}"
        return 0.0
    if isinstance(expected, list) and any(isinstance(v, (dict, str)) for v in expected):
        assert len(expected) == len(actual), where
        diffs = [
            max_abs_diff(e, a, f"{where}[{i}]", skip)
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
        ]
        return max(diffs, default=0.0)
    expected, actual = np.asarray(expected, np.float64), np.asarray(actual, np.float64)
    assert expected.shape == actual.shape, f"{where}: {expected.shape} != {actual.shape}"
    return float(np.max(np.abs(expected - actual), initial=0.0))
