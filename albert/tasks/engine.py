"""The fine-tuning engine: GLUE, SQuAD and RACE on the one training loop.

A task (a `FineTuningTask`) supplies what is specific to it:

    create_model()                          backbone + task head, from `self.config`
    load_features(role)                     reader + feature conversion (cached TFRecords):
                                            (unbatched dataset of feature dicts, count)
    loss(outputs, features, normalizers)    the loss and the training metric sums
    metric_results(sums)                    training scalars from those sums
    evaluate_predictions(predictions)       eval metrics from every prediction
    write_predictions(predictions, dir)     the prediction files
    export_saved_model(model, export_dir)   a serving SavedModel (optional)

and declares `model_inputs` (features the model takes), `prediction_keys` (model outputs to
keep) and `kept_features` (features returned beside them, e.g. labels). Roles are TRAIN,
EVAL and PREDICT; the task maps each to its files (GLUE: train, dev, test).

The engine owns the rest: batching and sharding for any strategy, the distributed steps,
checkpoints and resume, TensorBoard, initial weights, evaluation and the best checkpoint,
the predict pass and the final outputs. `run` does, in order:

    --do_train    albert.training.loop.run: a checkpoint every save_checkpoints_steps, and
                  with --do_eval an evaluation after each, keeping `model.ckpt-best` by the
                  task's `best_metric` (as the original run_classifier.py does)
    --do_eval     the final evaluation of the weights predictions use: eval_results.txt
    --do_predict  the task's prediction files, from the same weights
    --export_dir  the task's SavedModel, from the same weights

Every evaluation is a full predict pass (`albert.training.predict`) scored by the task on
the host, so metrics are exact (Spearman, F1, SQuAD) rather than accumulated per batch.
The weights of the final steps are `model.ckpt-best` in `output_dir`, else its latest
checkpoint, else `--init_checkpoint` (which must then hold the task head, e.g. an MNLI
fine-tuning run to predict AX with).
"""

from __future__ import annotations

import abc
import os

import tensorflow as tf
from absl import logging

from albert.data.features import pad_dataset
from albert.errors import AlbertError
from albert.metrics import write_eval_results
from albert.training import checkpointing, loop, predict
from albert.training.inputs import per_replica_batch_size
from albert.training.run_lock import output_dir_lock
from albert.training.strategy import is_chief
from albert.training.task import TrainingTask

TRAIN, EVAL, PREDICT = "train", "eval", "predict"
# A cap on the shuffle buffer of the training data: tasks up to this size (CoLA, MRPC,
# RTE, STS-B, WNLI) are shuffled whole; larger ones through a window this big, which also
# bounds the iterator state saved with every checkpoint.
SHUFFLE_BUFFER_SIZE = 10000
_GLOBAL_STEP_KEY = "global_step/.ATTRIBUTES/VARIABLE_VALUE"


class FineTuningError(AlbertError):
    """Weights or flags that cannot give the requested fine-tuning result."""


class FineTuningTask(TrainingTask):
    """A fine-tuning task on `albert.training.loop` (see the module doc for what it supplies).

    Args:
        config: the `AlbertConfig` of the model.
        train_batch_size, eval_batch_size, predict_batch_size: global batch sizes.
        max_seq_length: tokens per input (for the tokens/s summary).

    Example (the shape of a task; `albert.tasks.classification.GlueTask` is a full one):
        >>> class MyTask(FineTuningTask):
        ...     prediction_keys, kept_features = ("logits",), ("label_ids",)
        ...     metric_names, best_metric = ("correct", "real_examples"), "accuracy"
        ...     def create_model(self): return AlbertClassifier(AlbertBackbone(self.config), 2)
        ...     def load_features(self, role): return my_reader(role)  # (dataset, count)
        ...     def loss(self, outputs, features, normalizers): ...   # (loss, sums)
        ...     def metric_results(self, sums): ...
        ...     def evaluate_predictions(self, predictions): ...      # {"accuracy": ...}
        ...     def write_predictions(self, predictions, output_dir): ...
        >>> engine.run(MyTask(config, 32, 8, 8, 128), strategy, options, optimizer_fn)
    """

    model_inputs = ("input_ids", "input_mask", "segment_ids")
    prediction_keys = ()
    kept_features = ()

    def __init__(self, config, train_batch_size, eval_batch_size, predict_batch_size,
                 max_seq_length):  # fmt: skip
        self.config = config
        self.batch_sizes = {
            TRAIN: train_batch_size,
            EVAL: eval_batch_size,
            PREDICT: predict_batch_size,
        }
        self.tokens_per_example = max_seq_length
        self._features = {}
        self._predictors = {}

    # --- What a task supplies --------------------------------------------------------

    @abc.abstractmethod
    def load_features(self, role):
        """(unbatched `tf.data.Dataset` of feature dicts, number of elements) for a role.

        Every element holds `is_real_example` (1) and the `model_inputs`."""

    @abc.abstractmethod
    def loss(self, outputs, features, normalizers):
        """(loss, sums) as `TrainingTask.compute_loss` returns them, from the model's
        outputs; `normalizers` holds `examples`, the global number of real examples."""

    @abc.abstractmethod
    def evaluate_predictions(self, predictions):
        """Dict of metric name -> float (holding `best_metric`) from EVAL predictions.

        Args:
            predictions: dict of numpy arrays, one row per example in dataset order: the
                `prediction_keys` outputs, the `kept_features` and `example_index`.
        """

    @abc.abstractmethod
    def write_predictions(self, predictions, output_dir):
        """Writes the prediction files of PREDICT predictions; returns their paths."""

    def export_saved_model(self, model, export_dir):
        """Writes a serving SavedModel of `model`; returns its directory."""
        raise FineTuningError(f"{type(self).__name__} has no SavedModel export; drop --export_dir.")

    # --- Data ------------------------------------------------------------------------

    def features(self, role):
        """`load_features(role)`, loaded once."""
        if role not in self._features:
            self._features[role] = self.load_features(role)
        return self._features[role]

    def read_features(self, train, evaluate, predict):
        """Reads (or tokenizes) every split a run needs, so a bad file fails before training."""
        for role, wanted in ((TRAIN, train), (EVAL, evaluate), (PREDICT, predict)):
            if wanted:
                self.features(role)

    def train_dataset(self, input_context, seed):
        dataset, count = self.features(TRAIN)
        dataset = _shard(dataset, input_context)
        dataset = dataset.shuffle(min(count, SHUFFLE_BUFFER_SIZE), seed=seed).repeat()
        batch_size = input_context.get_per_replica_batch_size(self.batch_sizes[TRAIN])
        return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    def eval_dataset(self, input_context):
        return self.inference_dataset(EVAL, input_context)

    def inference_dataset(self, role, input_context):
        """Every example of `role` once, numbered, padded to whole global batches, sharded
        and batched per replica (fixed shapes)."""
        dataset, count = self.features(role)
        global_batch_size = self.batch_sizes[role]
        dataset = pad_dataset(predict.add_example_index(dataset), count, global_batch_size)
        dataset = _shard(dataset, input_context)
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    # --- Loss ------------------------------------------------------------------------

    def loss_normalizers(self, features):
        return {"examples": tf.reduce_sum(tf.cast(features["is_real_example"], tf.float32))}

    def compute_loss(self, model, features, normalizers, training):
        outputs = model(self._inputs(features), training=training)
        return self.loss(outputs, features, normalizers)

    def _inputs(self, features):
        return {name: features[name] for name in self.model_inputs}

    # --- Evaluation and prediction ---------------------------------------------------

    def predict(self, model, strategy, role):
        """Predictions of `model` for every example of `role`, as `evaluate_predictions`
        receives them."""
        per_replica_batch_size(
            self.batch_sizes[role], strategy.num_replicas_in_sync, f"{role}_batch_size"
        )
        key = (id(model), id(strategy))
        if key not in self._predictors:
            self._predictors[key] = predict.Predictor(strategy, self._predict_step(model))
        outputs = self._predictors[key].predict(
            lambda context: self.inference_dataset(role, context)
        )
        return predict.real_examples_in_order(outputs)

    def _predict_step(self, model):
        passed = (*self.kept_features, predict.EXAMPLE_INDEX, predict.IS_REAL_EXAMPLE)

        def step(features):
            outputs = model(self._inputs(features), training=False)
            kept = {name: tf.cast(outputs[name], tf.float32) for name in self.prediction_keys}
            kept.update({name: features[name] for name in passed})
            return kept

        return step

    def evaluate(self, model, strategy):
        """The loop's eval hook: exact metrics from a full predict pass over EVAL."""
        return self.evaluate_predictions(self.predict(model, strategy, EVAL))

    # --- Weights ---------------------------------------------------------------------

    def load_initial_weights(self, model, path):
        load_finetuning_weights(model, path)

    def prepare_output_dir(self, output_dir):
        """albert_config.json beside the checkpoints (read back by --init_checkpoint=dir)."""
        self.config.to_json_file(os.path.join(output_dir, "albert_config.json"))


def _shard(dataset, input_context):
    if input_context.num_input_pipelines > 1:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset


# --- Initial weights ---------------------------------------------------------------------


def resolve_checkpoint(path):
    """`path`, or the `model.ckpt-best` of a run directory that holds one (a fine-tuning
    or pretraining output directory, or a released model's)."""
    # By file names only: on ram:// and some object stores `isdir` is true for any prefix.
    best = os.path.join(path, checkpointing.BEST_PREFIX)
    if not tf.io.gfile.exists(path + ".index") and tf.io.gfile.exists(best + ".index"):
        return best
    return path


def _head_weights(model):
    backbone = {id(w) for w in model.backbone.weights}
    return [w for w in model.weights if id(w) not in backbone]


def load_finetuning_weights(model, path, require_head=False):
    """Loads `--init_checkpoint` into a fine-tuning model: the encoder always, the head too
    when the checkpoint holds one of the same shape (e.g. MNLI weights to predict AX).

    Args:
        model: a task model holding its `AlbertBackbone` as `.backbone`.
        path: one of our training checkpoints or run directories (fine-tuning or
            pretraining), an official TF1 checkpoint, an HF directory or Keras weights.
        require_head: raise unless the head was loaded too (to predict without training).

    Returns:
        Whether the head was loaded.

    Raises:
        FineTuningError: `require_head` and the checkpoint holds no fitting head.
        albert.checkpoints.CheckpointError: the checkpoint does not fit the encoder (another
            config) or does not exist.
    """
    path = resolve_checkpoint(path)
    head = _head_weights(model)
    if checkpointing.is_training_checkpoint(path):
        prefix = checkpointing.checkpoint_prefix(path)
        stored = checkpointing.stored_shapes(prefix)
        keys = {w.path: f"model/{w.path}/.ATTRIBUTES/VARIABLE_VALUE" for w in head}
        head_loaded = all(
            keys[w.path] in stored and list(stored[keys[w.path]]) == list(w.shape) for w in head
        )
        checkpointing.restore_model_weights(model if head_loaded else model.backbone, prefix)
        path = prefix
    else:
        from albert.checkpoints import load_checkpoint

        initialised = set(load_checkpoint(model, path).initialised)
        head_loaded = not any(w.path in initialised for w in head)
    if require_head and not head_loaded:
        raise FineTuningError(
            f"--init_checkpoint={path} holds no {type(model).__name__} head of this shape, so "
            "its predictions would be random; fine-tune first (--do_train) or pass the "
            "output_dir of a fine-tuning run."
        )
    logging.info(
        "Initialised from %s: encoder%s.",
        path,
        " and task head" if head_loaded else " (the task head starts from random values)",
    )
    return head_loaded


def load_final_weights(model, options):
    """Loads the weights that evaluation, prediction and export use (see the module doc).

    Returns:
        (checkpoint path, its global step or None).

    Raises:
        FineTuningError: no checkpoint in `output_dir` and no `--init_checkpoint`.
    """
    best = os.path.join(options.output_dir, checkpointing.BEST_PREFIX)
    path = best if tf.io.gfile.exists(best + ".index") else None
    path = path or checkpointing.latest_checkpoint(options.output_dir)
    if path:
        checkpointing.restore_model_weights(model, path)
    elif options.init_checkpoint:
        path = resolve_checkpoint(options.init_checkpoint)
        load_finetuning_weights(model, path, require_head=True)
    else:
        raise FineTuningError(
            f"--output_dir={options.output_dir} holds no checkpoint to evaluate or predict "
            "with; train first (--do_train) or pass --init_checkpoint of a fine-tuned model."
        )
    step = None
    if checkpointing.is_training_checkpoint(path):
        prefix = checkpointing.checkpoint_prefix(path)
        step = int(checkpointing.checkpoint_reader(prefix).get_tensor(_GLOBAL_STEP_KEY))
    logging.info("Final weights: %s (global step %s).", path, step)
    return path, step


# --- The run -----------------------------------------------------------------------------


def run_with_flags(task, strategy, options, flag_values):
    """`run` as the fine-tuning scripts call it: the splits the flags ask for are read first,
    then the optimizer, predict and export settings come from the shared flags."""
    from albert.training import flags as training_flags

    task.read_features(flag_values.do_train, flag_values.do_eval, flag_values.do_predict)
    return run(
        task,
        strategy,
        options,
        training_flags.optimizer_fn_from_flags(flag_values),
        do_predict=flag_values.do_predict,
        export_dir=flag_values.export_dir,
    )


def run(task, strategy, options, optimizer_fn, do_predict=False, export_dir=None):
    """Trains, evaluates, predicts and exports a fine-tuning task (see the module doc).

    Args:
        task: a `FineTuningTask`.
        strategy: a `tf.distribute.Strategy`.
        options: `albert.training.loop.RunOptions`.
        optimizer_fn: as `albert.training.loop.run` takes it.
        do_predict: write the task's prediction files.
        export_dir: write the task's SavedModel there.

    Returns:
        The final eval metrics (with `global_step`), or the last ones of training, or {}.
    """
    with output_dir_lock(options.output_dir, enabled=is_chief(strategy)):
        return _run_locked(task, strategy, options, optimizer_fn, do_predict, export_dir)


def _run_locked(task, strategy, options, optimizer_fn, do_predict, export_dir):
    results = {}
    if options.do_train:
        results = loop.run(task, strategy, options, optimizer_fn)
    if not (options.do_eval or do_predict or export_dir):
        return results
    with strategy.scope():
        model = task.create_model()
    path, step = load_final_weights(model, options)
    chief = is_chief(strategy)
    if options.do_eval:
        results = {"global_step": step, **task.evaluate(model, strategy)}
        logging.info(
            "Final eval of %s: %s", path, " | ".join(f"{k} {v}" for k, v in results.items())
        )
        if chief:
            write_eval_results(options.output_dir, {**results, "checkpoint": path})
    if do_predict:
        predictions = task.predict(model, strategy, PREDICT)
        if chief:
            for written in task.write_predictions(predictions, options.output_dir):
                logging.info("Predictions written to %s.", written)
    if export_dir and chief:
        logging.info("SavedModel written to %s.", task.export_saved_model(model, export_dir))
    return results
