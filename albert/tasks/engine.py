"""The fine-tuning engine: GLUE, SQuAD and RACE on the one training loop.

A task (a `FineTuningTask`) supplies what is specific to it:

    create_model()                          backbone + task head, from `self.config`
    load_features(role)                     reader + feature conversion (cached TFRecords):
                                            (unbatched dataset of feature dicts, count,
                                            the cache file it was read from or None)
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
    --do_eval     without --do_train: first, as the original's eval loop, every training
                  checkpoint in output_dir not evaluated yet, keeping `model.ckpt-best`
                  (a run trained with --nodo_eval, as run_glue.sh does, is judged by its
                  best checkpoint), then removing the evaluated ones but the best and the
                  two newest (--keep_checkpoint_max=0 keeps all). Then the final
                  evaluation of the weights predictions use: eval_results.txt.
                  After --do_train those weights are a checkpoint the loop has evaluated
                  (`model.ckpt-best`, or the last one): its metrics are reused, so dev is
                  read once per evaluated checkpoint, not once more at the end
    --do_predict  the task's prediction files, from the same weights
    --export_dir  the task's SavedModel, from the same weights

Every evaluation is a full predict pass (`albert.training.predict`, `--iterations_per_loop`
batches per host call) scored by the task on the host, so metrics are exact (Spearman, F1,
SQuAD) rather than accumulated per batch.

Input on several hosts. Every dataset is built inside `dataset_fn`, on the input host that
calls it (TPUStrategy calls it once per host of a pod slice), from a TFRecord file every host
can read: the task's feature cache (`--cached_dir`), or, for features a task holds in memory,
a copy the engine writes under `output_dir/features/` (on GCS for a pod). Host `i` of `n`
reads records `i, i + n, i + 2n, ...`; for eval and predict it numbers them (`example_index`
= their position in the file) and pads its share with `is_real_example` 0 rows to the same
number of full batches as every other host, so the predict pass sees each example exactly
once and puts them back in file order.
The weights of the final steps are `model.ckpt-best` in `output_dir`, else its latest
checkpoint, else `--init_checkpoint` (which must then hold the task head, e.g. an MNLI
fine-tuning run to predict AX with).
"""

from __future__ import annotations

import abc
import dataclasses
import math
import os
import tempfile

import numpy as np
import tensorflow as tf
from absl import logging

from albert.checkpoints import training_format
from albert.data import features as feature_lib
from albert.data import record_damage
from albert.fileio import is_remote
from albert.metrics import with_original_names, write_eval_results
from albert.tasks import FineTuningError
from albert.tasks.feature_files import FeatureFile, write_features_file
from albert.tasks.weights import earlier_evaluation, load_final_weights, load_finetuning_weights
from albert.training import checkpointing, loop, predict, pruning
from albert.training.inputs import fit_batch_size, per_replica_batch_size, pipeline_seed
from albert.training.run_lock import output_dir_lock
from albert.training.strategy import (
    check_same_step,
    check_shared_dir,
    is_chief,
    worker_barrier,
)
from albert.training.summaries import ScalarWriter
from albert.training.task import TrainingTask

TRAIN, EVAL, PREDICT = "train", "eval", "predict"
# A cap on the shuffle buffer of the training data: tasks up to this size (CoLA, MRPC,
# RTE, STS-B, WNLI) are shuffled whole; larger ones through a window this big, which also
# bounds the iterator state saved with every checkpoint.
SHUFFLE_BUFFER_SIZE = 10000


# Where the engine writes features a task holds in memory, under the run's output_dir.
FEATURES_DIR = "features"


# The original README's settings for large and xlarge v2 models that diverge or stay at chance.
V2_ADVICE = "the original README's --learning_rate=1e-5 with --albert_dropout_prob=0"


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
        ...     def load_features(self, role): return my_reader(role)  # (dataset, count, path)
        ...     def loss(self, outputs, features, normalizers): ...   # (loss, sums)
        ...     def metric_results(self, sums): ...
        ...     def evaluate_predictions(self, predictions): ...      # {"accuracy": ...}
        ...     def write_predictions(self, predictions, output_dir): ...
        >>> engine.run(MyTask(config, 32, 8, 8, 128), strategy, options, optimizer_fn)
    """

    model_inputs = ("input_ids", "input_mask", "segment_ids")
    prediction_keys = ()
    kept_features = ()
    # Where features held in memory are written for the input hosts to read: `run` sets
    # `output_dir/features`; None (a task used outside `run`): a local temporary directory.
    feature_dir = None
    # The class names of the head's outputs in class-id order (a GLUE task's): an HF
    # classifier read from --init_checkpoint is put in this order (`load_finetuning_weights`).
    head_labels = ()
    # The original README's fix for its v2 models' divergence in fine-tuning (on RACE).
    divergence_advice = f"; for large or xlarge v2 models, {V2_ADVICE}"

    def __init__(
        self, config, train_batch_size, eval_batch_size, predict_batch_size, max_seq_length
    ):
        self.config = config
        self.batch_sizes = {
            TRAIN: train_batch_size,
            EVAL: eval_batch_size,
            PREDICT: predict_batch_size,
        }
        self.tokens_per_example = max_seq_length
        self._features = {}
        self._datasets = {}  # role -> the dataset `load_features` gave
        self._predictors = {}
        # Metrics of every checkpoint the training loop evaluated in this process, by step.
        self.evaluations = {}
        # EVAL predictions of the evaluated checkpoints that can be the final weights (the
        # best and the latest), by step; and those of the last `evaluate`, until recorded.
        self.eval_predictions = {}
        self._last_eval_predictions = None
        # The eval metrics (with `global_step`) of the weights that predict and export use,
        # once `run` has them; e.g. SQuAD 2.0 predicts with the null threshold tuned there.
        self.final_evaluation = None
        # The run's output_dir, and (checkpoint path, global step or None) of the weights
        # that evaluate, predict and export use, once `run` has loaded them.
        self.output_dir = None
        self.final_weights = None

    # --- What a task supplies --------------------------------------------------------

    @abc.abstractmethod
    def load_features(self, role):
        """(unbatched `tf.data.Dataset` of feature dicts, number of elements, the feature
        cache file the dataset reads, or None when the features are in memory) for a role.

        Every element holds `is_real_example` (1) and the `model_inputs`. The dataset is
        read on the client only (for its element spec, and to write features held in
        memory to a file); the input hosts read the file."""

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

    def eval_results_entries(self, metrics):
        """Ours, and the original fine-tuning scripts' names of the same values
        (`eval_accuracy`, `eval_loss`, `matthew_corr`, `MSE`)."""
        return with_original_names(metrics)

    def check_export(self):
        """Raises FineTuningError when `export_saved_model` cannot write this task's
        SavedModel; `run` calls it before training, so a bad --export_dir costs no run."""
        raise FineTuningError(f"{type(self).__name__} has no SavedModel export; drop --export_dir.")

    def export_saved_model(self, model, export_dir):
        """Writes a serving SavedModel of `model`; returns its directory."""
        self.check_export()

    # --- Data ------------------------------------------------------------------------

    @property
    def eval_batch_size(self):
        """The global eval batch (`albert.training.loop` may round it up to the replicas)."""
        return self.batch_sizes[EVAL]

    @eval_batch_size.setter
    def eval_batch_size(self, value):
        self.batch_sizes[EVAL] = value

    def features(self, role):
        """The `FeatureFile` of a role, loaded (and, when in memory, written) once. Roles
        whose `load_features` give the same dataset (SQuAD's EVAL and PREDICT, both
        --predict_file) share one: its features are written once, not once per role."""
        if role not in self._features:
            dataset, count, path = self.load_features(role)
            self._datasets[role] = dataset
            for other, loaded in list(self._datasets.items()):
                if other != role and loaded is dataset and other in self._features:
                    self._features[role] = self._features[other]
                    return self._features[role]
            if path is None:
                if self.feature_dir is None:
                    self.feature_dir = tempfile.mkdtemp(prefix="albert_features_")
                path = write_features_file(dataset, self.feature_dir, role)
            self._features[role] = FeatureFile(path, count, dataset.element_spec)
        return self._features[role]

    def num_batches(self, role):
        """Global batches of an inference pass over `role` (the last one padded)."""
        return -(-self.features(role).num_examples // self.batch_sizes[role])

    def read_features(self, train, evaluate, predict):
        """Reads (or tokenizes) every split a run needs, so a bad file fails before training."""
        for role, wanted in ((TRAIN, train), (EVAL, evaluate), (PREDICT, predict)):
            if wanted:
                self.features(role)

    def _read(self, role, input_context):
        """This input pipeline's records of `role`: every n-th from its id on, as the task's
        feature dicts. Built on the host that calls `dataset_fn`, from the shared file."""
        source = self.features(role)
        dataset, _ = feature_lib.read_feature_records(
            source.path, input_context.num_input_pipelines, input_context.input_pipeline_id
        )
        spec = source.element_spec

        def reshape(features):
            return {
                name: value
                if value.shape == spec[name].shape
                else tf.reshape(value, spec[name].shape)
                for name, value in features.items()
            }

        # Traced as written: autograph would convert it (and find nothing to convert) at
        # every start.
        reshape = tf.autograph.experimental.do_not_convert(reshape)
        return dataset.map(reshape, num_parallel_calls=tf.data.AUTOTUNE)

    def train_dataset(self, input_context, seed):
        count = self.features(TRAIN).num_examples
        check_train_share(count, input_context.num_input_pipelines)
        dataset = self._read(TRAIN, input_context)
        seed = pipeline_seed(seed, input_context)  # each host its own order of its share
        dataset = dataset.shuffle(min(count, SHUFFLE_BUFFER_SIZE), seed=seed).repeat()
        batch_size = input_context.get_per_replica_batch_size(self.batch_sizes[TRAIN])
        return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    def inference_dataset(self, role, input_context):
        """This pipeline's share of every example of `role`, numbered by file position and
        padded (`is_real_example` 0) to `num_batches(role)` global batches' worth, batched
        per replica: every host yields the same number of full batches (fixed shapes)."""
        count = self.features(role).num_examples
        pipelines = input_context.num_input_pipelines
        pipeline = input_context.input_pipeline_id
        global_batch_size = self.batch_sizes[role]
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        # The records i, i + n, ... of pipeline i of n, then padding up to its share.
        real = len(range(pipeline, count, pipelines))
        share = self.num_batches(role) * global_batch_size // pipelines

        def number(position, features):
            index = position * pipelines + pipeline
            return {**features, predict.EXAMPLE_INDEX: tf.cast(index, tf.int32)}

        number = tf.autograph.experimental.do_not_convert(number)  # traced as written
        dataset = self._read(role, input_context).enumerate().map(number)
        dataset = dataset.concatenate(
            feature_lib.padding_dataset(dataset.element_spec, share - real)
        )
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

    def predict(self, model, strategy, role, steps_per_call=1):
        """Predictions of `model` for every example of `role`, as `evaluate_predictions`
        receives them, `steps_per_call` batches per host call."""
        per_replica_batch_size(
            self.batch_sizes[role], strategy.num_replicas_in_sync, f"{role}_batch_size"
        )
        key = (id(model), id(strategy))
        if key not in self._predictors:
            self._predictors[key] = predict.Predictor(strategy, self._predict_step(model))
        outputs = self._predictors[key].predict(
            lambda context: self.inference_dataset(role, context),
            num_batches=self.num_batches(role),
            steps_per_call=steps_per_call,
            what=f"{role} predictions",
        )
        return predict.real_examples_in_order(outputs)

    def _predict_step(self, model):
        passed = (*self.kept_features, predict.EXAMPLE_INDEX, predict.IS_REAL_EXAMPLE)

        @tf.autograph.experimental.do_not_convert  # no tensor branches: traced as written
        def step(features):
            outputs = model(self._inputs(features), training=False)
            kept = {name: tf.cast(outputs[name], tf.float32) for name in self.prediction_keys}
            kept.update({name: features[name] for name in passed})
            return kept

        return step

    def evaluate(self, model, strategy, steps_per_call=1):
        """The loop's eval hook: exact metrics from a full predict pass over EVAL."""
        predictions = self.predict(model, strategy, EVAL, steps_per_call)
        self._last_eval_predictions = predictions
        metrics = self.evaluate_predictions(predictions)
        warn_if_one_class(self.predicted_classes(predictions))
        return metrics

    def predicted_classes(self, predictions):
        """(predicted, true) class names [N] of a classification task's EVAL predictions, for
        `warn_if_one_class`; None (the default) for a task without classes."""
        return None

    def take_eval_predictions(self):
        """The predictions of the last `evaluate` not yet recorded, or None; forgets them."""
        predictions, self._last_eval_predictions = self._last_eval_predictions, None
        return predictions

    def record_evaluation(self, step, checkpoint_path, metrics):
        """Keeps the loop's metrics of each saved checkpoint, for `run`'s final evaluation,
        and the predictions of those that can be the final weights (the best by
        `best_metric` and the latest), for the predict pass to reuse (`_final_predictions`)."""
        predictions = self.take_eval_predictions()
        if checkpoint_path:
            self.evaluations[step] = dict(metrics)
            if predictions is not None:
                self.eval_predictions[step] = predictions
            kept = {step, self._best_evaluated_step()}
            self.eval_predictions = {s: p for s, p in self.eval_predictions.items() if s in kept}

    def _best_evaluated_step(self):
        """The step of `evaluations` that `keep_best` kept as best: the first with the
        highest `best_metric` (NaN never is), or None."""
        scored = [
            (metrics[self.best_metric], -step)
            for step, metrics in self.evaluations.items()
            if self.best_metric and not math.isnan(metrics.get(self.best_metric, math.nan))
        ]
        return -max(scored)[1] if scored else None

    # --- Weights ---------------------------------------------------------------------

    def load_initial_weights(self, model, path):
        load_finetuning_weights(model, path, labels=self.head_labels)


def check_train_share(num_examples, num_pipelines):
    """Raises FineTuningError when some of the `num_pipelines` input pipelines (one per host
    or worker, each reading records i, i + n, ...) would get none of the `num_examples`
    training examples: an empty share, repeated, yields no batch, and the first training step
    fails with TensorFlow's "End of sequence". Raised on every pipeline, so no worker waits
    in a step for the others."""
    if num_examples < num_pipelines:
        raise FineTuningError(
            f"The training set holds {num_examples} example(s), fewer than the "
            f"{num_pipelines} input pipelines (one per host or worker), each of which needs "
            "one; train on more data, or on fewer hosts or workers."
        )


# --- The run -----------------------------------------------------------------------------


def run_with_flags(task, strategy, options, flag_values):
    """`run` as the fine-tuning scripts call it: the splits the flags ask for are read first,
    then the optimizer, predict and export settings come from the shared flags."""
    from albert.training import flags as training_flags

    if flag_values.export_dir:  # Before the features are read and cached, too.
        check_export_target(task, flag_values.export_dir, options.output_dir)
    use_output_dir(task, options.output_dir)
    # Before the features are read too: a batch the replicas (or the micro-batches of
    # --gradient_accumulation_steps) cannot split fails at once, not after minutes of
    # tokenizing MNLI or SQuAD. `run` checks again; fitted sizes pass unchanged.
    options = fit_batch_sizes(task, strategy.num_replicas_in_sync, options, flag_values.do_predict)
    task.read_features(flag_values.do_train, flag_values.do_eval, flag_values.do_predict)
    # A cache damaged in the middle passes its size check and fails mid-run, naming no file.
    with record_damage.naming_damaged_file(
        lambda: [feature_file.path for feature_file in task._features.values()],
        source="the feature caches",
        remedy="delete {it} and rerun, which rebuilds the feature cache from the task's data",
        error_class=FineTuningError,
    ):
        return run(
            task,
            strategy,
            options,
            training_flags.optimizer_fn_from_flags(flag_values),
            do_predict=flag_values.do_predict,
            export_dir=flag_values.export_dir,
        )


def warn_if_one_class(classes):
    """Warns, in one line, when every evaluated prediction is the same class although the
    labels hold several: the "stuck at chance" failure of large and xlarge v2 models
    fine-tuned at too high a learning rate.

    Args:
        classes: (predicted, true) class names [N], or None.
    """
    if classes is None:
        return
    predicted, labels = (np.unique(names) for names in classes)
    if len(predicted) == 1 and len(labels) > 1:
        logging.warning(
            "Every one of the %d evaluated predictions is class %s, although the labels hold "
            "%d classes: if later evaluations say so too, the model is stuck at chance; lower "
            "--learning_rate (for large or xlarge v2 models, %s).",
            len(classes[0]),
            predicted[0],
            len(labels),
            V2_ADVICE,
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

    Raises:
        InputError: a batch the run uses does not split across the replicas (see
            `fit_batch_sizes`).
        FineTuningError: `export_dir` is set and the task cannot export, or writing it would
            delete other files (`check_export_target`).
    """
    use_output_dir(task, options.output_dir)
    if export_dir:
        check_export_target(task, export_dir, options.output_dir)
    options = fit_batch_sizes(task, strategy.num_replicas_in_sync, options, do_predict)
    with output_dir_lock(options.output_dir, enabled=is_chief(strategy)):
        return _run_locked(task, strategy, options, optimizer_fn, do_predict, export_dir)


def check_in_graph_tokenizer(tokenizer):
    """Raises FineTuningError when the exported SavedModel could not tokenize as `tokenizer`
    does: it tokenizes in-graph with SentencePiece only (every task's `check_export`)."""
    if not tokenizer.spm_model_file:
        raise FineTuningError(
            "--export_dir needs --spm_model_file: the SavedModel tokenizes in-graph with "
            "SentencePiece, which a WordPiece --vocab_file cannot do."
        )


def check_export_target(task, export_dir, output_dir):
    """Raises FineTuningError when `task` cannot export (`check_export`) or writing the
    SavedModel to `export_dir` would delete other files: the export replaces that folder
    whole, so it must not hold `output_dir` (the run's checkpoints and results) and must be
    new, empty or an earlier SavedModel (`albert.export.check_export_dir`)."""
    from albert.export import check_export_dir

    task.check_export()
    export, output = _absolute(export_dir), _absolute(output_dir)
    if output == export or output.startswith(export.rstrip("/") + "/"):
        raise FineTuningError(
            f"--export_dir={export_dir} holds --output_dir={output_dir}, and the export "
            "replaces its folder whole; give the SavedModel a folder of its own (e.g. "
            f"{os.path.join(output_dir, 'export')})."
        )
    try:
        check_export_dir(export_dir)
    except FileExistsError as e:
        raise FineTuningError(f"--{e}") from None


def _absolute(path):
    """`path` made absolute and normalised (a URL such as gs://bucket/x only normalised)."""
    if is_remote(path):
        scheme, rest = path.split("://", 1)
        return f"{scheme}://{os.path.normpath('/' + rest)[1:]}"
    return os.path.normpath(os.path.abspath(path))


def feature_cache_dir(cached_dir, output_dir):
    """Where a fine-tuning script caches its tokenized features: `cached_dir`, else
    `output_dir/features` (the original caches in --output_dir), so a rerun in the same
    --output_dir (resumed, or evaluating or predicting later) reads them instead of
    tokenizing again (minutes for MNLI or SQuAD 2.0's training set)."""
    return cached_dir or os.path.join(output_dir, FEATURES_DIR)


def use_output_dir(task, output_dir):
    """The task's run writes to `output_dir`; features a task holds in memory go to
    `output_dir/features` (shared by every host)."""
    task.output_dir = output_dir
    if task.feature_dir is None:
        task.feature_dir = os.path.join(output_dir, FEATURES_DIR)


def fit_batch_sizes(task, num_replicas, options, do_predict):
    """Checks the batches the run uses against the replicas at start-up; eval and predict
    batches left at their defaults are rounded up to a multiple of them.

    Returns:
        `options`, with the eval batch used.
    """
    sizes = loop.batch_sizes(options, num_replicas)
    if "eval_batch_size" in sizes:
        task.eval_batch_size = sizes["eval_batch_size"]
        options = dataclasses.replace(options, eval_batch_size=sizes["eval_batch_size"])
    if do_predict:
        derive = "predict_batch_size" in options.defaulted_batch_flags
        task.batch_sizes[PREDICT] = fit_batch_size(
            task.batch_sizes[PREDICT], num_replicas, "predict_batch_size", derive
        )
    return options


def _run_locked(task, strategy, options, optimizer_fn, do_predict, export_dir):
    results, eval_predictions = {}, None
    if options.do_train:
        results = loop.run(task, strategy, options, optimizer_fn)
    if not (options.do_eval or do_predict or export_dir):
        return results
    # Every worker evaluates and predicts with the checkpoints it finds in output_dir itself
    # (the state file only: reading a checkpoint back costs its size).
    if not options.do_train:  # training checked it before its first step
        check_shared_dir(strategy, options.output_dir)
    check_same_step(strategy, checkpointing.newest_step(options.output_dir), options.output_dir)
    with strategy.scope():
        model = task.create_model()
    if options.do_eval and not options.do_train:
        _evaluate_saved_checkpoints(task, model, strategy, options)
    path, step = load_final_weights(model, options, task.head_labels)
    task.final_weights = (path, step)
    chief = is_chief(strategy)
    steps_per_call = options.iterations_per_loop
    if options.do_eval:
        # Weights without a step (HF, Keras files) have trained 0 steps here; the original's
        # eval_results.txt always holds an integer, which scripts parse as a number.
        global_step = 0 if step is None else step
        metrics, eval_predictions = _final_metrics(task, model, strategy, step, options)
        results = {"global_step": global_step, **metrics}
        task.final_evaluation = results
        logging.info(
            "Final eval of %s: %s", path, " | ".join(f"{k} {v}" for k, v in results.items())
        )
        if chief:
            entries = task.eval_results_entries({**results, "checkpoint": path})
            write_eval_results(options.output_dir, entries)
            if checkpointing.evaluated_step(options.output_dir) is None:
                _write_eval_point(options.output_dir, metrics, global_step)
    elif do_predict or export_dir:
        # An export alone serves these weights as predictions.json would (SQuAD 2.0's null
        # threshold tuned by their evaluation in an earlier run, else the one an earlier
        # --do_predict of them recorded beside predictions.json).
        task.final_evaluation = earlier_evaluation(options.output_dir, path, step)
    if do_predict:
        predictions = _final_predictions(task, model, strategy, steps_per_call, eval_predictions)
        if chief:
            for written in task.write_predictions(predictions, options.output_dir):
                logging.info("Predictions written to %s.", written)
    if export_dir and chief:
        logging.info("SavedModel written to %s.", task.export_saved_model(model, export_dir))
    return results


def _evaluate_saved_checkpoints(task, model, strategy, options):
    """--do_eval without --do_train, as the original's eval loop: every training checkpoint
    in `output_dir` newer than the last one evaluated is evaluated, oldest first, and the best
    by the task's metric becomes `model.ckpt-best`. So a run trained with --nodo_eval (as
    run_glue.sh does) then evaluated reports and predicts with its best checkpoint, not its
    last; checkpoints evaluated before (during training, or by an earlier run) are skipped.
    Then, as the original, evaluated checkpoints but the two newest and the best are removed
    (`albert.training.pruning`), unless --keep_checkpoint_max=0.
    Returns on every worker once the chief has written those files."""
    evaluated = checkpointing.evaluated_step(options.output_dir)
    # TensorBoard's eval/ curve, as a training run with --do_eval writes it.
    writer = ScalarWriter(os.path.join(options.output_dir, "eval"), enabled=is_chief(strategy))
    saved = checkpointing.saved_checkpoints(options.output_dir)
    for path in saved:
        step = checkpointing.checkpoint_step(path)
        if evaluated is not None and step <= evaluated:
            continue
        training_format.restore_model_weights(model, path)
        metrics = task.evaluate(model, strategy, options.iterations_per_loop)
        task.record_evaluation(step, path, metrics)
        logging.info(
            "eval of %s: %s", path, " | ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))
        )
        writer.write(metrics, step)
        if is_chief(strategy):
            loop.keep_best(task, model, options.output_dir, metrics, path)
            checkpointing.record_evaluated(options.output_dir, step, path)
    writer.close()
    # Every worker has restored its last checkpoint (the predict pass after it is collective).
    # A task without a metric has no best to keep: its final weights are the latest.
    if is_chief(strategy) and options.keep_checkpoint_max and task.best_metric:
        pruning.remove_evaluated_checkpoints(options.output_dir, saved)
    # The final weights are read from what the chief has just written (model.ckpt-best):
    # no worker reads them before it has.
    barrier = worker_barrier(strategy)
    if barrier:
        barrier()


def _write_eval_point(output_dir, metrics, step):
    """The eval/ point of final weights no checkpoint of `output_dir` gave (--do_eval alone on
    --init_checkpoint), as run_pretraining --do_eval writes one; checkpoints evaluated there
    (by training or `_evaluate_saved_checkpoints`) have their points already."""
    writer = ScalarWriter(os.path.join(output_dir, "eval"))
    writer.write(metrics, step)
    writer.close()


def _final_metrics(task, model, strategy, step, options):
    """(The eval metrics of the final weights (global step `step`, loaded in `model`), their
    EVAL predictions or None): those this process computed for that checkpoint (the training
    loop, or the evaluation of the saved checkpoints under --do_eval alone), else a predict
    pass."""
    if step in task.evaluations:
        logging.info("Final eval: the weights of step %d, evaluated earlier in this run.", step)
        return task.evaluations[step], task.eval_predictions.get(step)
    metrics = task.evaluate(model, strategy, options.iterations_per_loop)
    return metrics, task.take_eval_predictions()


def _final_predictions(task, model, strategy, steps_per_call, eval_predictions):
    """The PREDICT predictions of the final weights. When PREDICT reads EVAL's features at
    EVAL's batch size (SQuAD's --predict_file, with --eval_batch_size equal to
    --predict_batch_size), the final evaluation ran these weights over the same batches:
    its predictions are reused instead of a second, identical pass (minutes for a large
    model over SQuAD 2.0's dev set)."""
    same_batches = task.batch_sizes[PREDICT] == task.batch_sizes[EVAL]
    if eval_predictions is not None and same_batches:
        if task.features(PREDICT) is task.features(EVAL):
            logging.info("Predictions: those of the final eval (same weights and features).")
            return eval_predictions
    return task.predict(model, strategy, PREDICT, steps_per_call)
