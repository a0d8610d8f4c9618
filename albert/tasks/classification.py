"""GLUE fine-tuning (run_classifier.py): every task, classification and STS-B regression.

Model: pooled output -> dropout -> linear (`AlbertClassifier`), one output for STS-B.
Loss: softmax cross-entropy over the classes; for STS-B the squared error of the score, as
the original. Both are means over the global batch.

Evaluation scores full dev predictions with `albert.metrics.glue.compute_metrics`:
accuracy; CoLA Matthews correlation; MRPC/QQP F1; STS-B Pearson, Spearman and MSE. The
best checkpoint is kept by the task's main metric (Matthews for CoLA, Pearson for STS-B,
accuracy otherwise). `eval_results.txt` holds each metric under its name here and, where
the original wrote it, under the original's too (`eval_accuracy`, `eval_loss`,
`matthew_corr`, `MSE`). Predictions write `test_results.tsv` (class probabilities, or the
score), the GLUE server's file (`CoLA.tsv`, `MNLI-m.tsv`, `AX.tsv`, ...) and the same lines
as `submit_results.tsv`, the original's name (`albert.tasks.glue_submission`). AX has only a test set: predict it with
`--task_name=ax --do_predict --init_checkpoint=<the output_dir of an MNLI run>`.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
from absl import flags

from albert.data import glue
from albert.metrics import glue as glue_metrics
from albert.modeling import AlbertBackbone, AlbertClassifier
from albert.tasks import engine, glue_submission
from albert.tasks import flags as finetuning_flags
from albert.training import flags as training_flags

SPLITS = {engine.TRAIN: "train", engine.EVAL: "dev", engine.PREDICT: "test"}


class GlueTask(engine.FineTuningTask):
    """One GLUE task (`--task_name`) for the fine-tuning engine.

    Args:
        task_name: a GLUE task name (`albert.data.glue.TASKS`).
        data_dir: the GLUE directory or the task's folder in it.
        tokenizer: an `albert.tokenization.FullTokenizer`.
        config: the `AlbertConfig`.
        max_seq_length: T.
        train_batch_size, eval_batch_size, predict_batch_size: global batch sizes.
        classifier_dropout_prob: dropout on the pooled output.
        cached_dir: directory of the feature cache, or None.
        threshold_to_export: a float served with the exported SavedModel's predictions, or
            None.

    Example:
        >>> task = GlueTask("mrpc", "glue", tokenizer, config, 128, 32, 8, 8)
        >>> engine.run(task, strategy, options, optimizer_fn, do_predict=True)
    """

    prediction_keys = ("logits",)
    kept_features = ("label_ids",)

    def __init__(
        self,
        task_name,
        data_dir,
        tokenizer,
        config,
        max_seq_length,
        train_batch_size,
        eval_batch_size,
        predict_batch_size,
        classifier_dropout_prob=0.1,
        cached_dir=None,
        threshold_to_export=None,
    ):
        super().__init__(
            config, train_batch_size, eval_batch_size, predict_batch_size, max_seq_length
        )
        self.glue = glue.get_task(task_name)
        self.head_labels = self.glue.labels
        self.data_dir = data_dir
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.classifier_dropout_prob = classifier_dropout_prob
        self.cached_dir = cached_dir
        self.threshold_to_export = threshold_to_export
        self.best_metric = glue_metrics.main_metric(self.glue.name)
        regression = self.glue.is_regression
        self.metric_names = ("squared_error" if regression else "correct", "real_examples")
        self.logged_metrics = ("mse",) if regression else ("accuracy",)

    def create_model(self):
        return AlbertClassifier(
            AlbertBackbone(self.config), self.glue.num_labels, self.classifier_dropout_prob
        )

    def load_features(self, role):
        cached = glue.load_features(
            self.glue.name,
            self.data_dir,
            SPLITS[role],
            self.tokenizer,
            self.max_seq_length,
            self.cached_dir,
        )
        return cached.dataset, cached.num_examples, cached.path

    # --- Loss and training metrics ---------------------------------------------------

    def loss(self, outputs, features, normalizers):
        logits = outputs["logits"]  # [B, C], float32
        weights = tf.cast(features["is_real_example"], tf.float32)  # [B]
        if self.glue.is_regression:
            errors = tf.square(logits[:, 0] - tf.cast(features["label_ids"], tf.float32))
            sums = {"squared_error": tf.reduce_sum(weights * errors)}
        else:
            labels = tf.cast(features["label_ids"], tf.int32)  # [B]
            errors = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            hits = tf.cast(
                tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32
            )
            sums = {"correct": tf.reduce_sum(weights * hits)}
        sums["real_examples"] = tf.reduce_sum(weights)
        return tf.reduce_sum(weights * errors) / normalizers["examples"], sums

    def metric_results(self, sums):
        count = max(sums["real_examples"], 1.0)
        if self.glue.is_regression:
            return {"mse": sums["squared_error"] / count}
        return {"accuracy": sums["correct"] / count}

    # --- Evaluation and predictions --------------------------------------------------

    def evaluate_predictions(self, predictions):
        logits, labels = predictions["logits"], predictions["label_ids"]  # [N, C], [N]
        metrics = glue_metrics.compute_metrics(self.glue.name, logits, labels)
        metrics["loss"] = mean_loss(logits, labels, self.glue.is_regression)
        return metrics

    def predicted_classes(self, predictions):
        if self.glue.is_regression:
            return None
        names = np.asarray(self.glue.labels)
        predicted = np.argmax(predictions["logits"], axis=-1)  # [N]
        return names[predicted], names[np.asarray(predictions["label_ids"], np.int64)]

    def write_predictions(self, predictions, output_dir):
        logits = predictions["logits"]  # [N, C]
        examples = glue.read_examples(self.glue.name, self.data_dir, "test")
        outputs = logits[:, 0] if self.glue.is_regression else softmax(logits)
        return glue_submission.write_glue_predictions(output_dir, self.glue.name, examples, outputs)

    def check_export(self):
        engine.check_in_graph_tokenizer(self.tokenizer)

    def export_saved_model(self, model, export_dir):
        from albert.export import export_classifier

        self.check_export()
        return export_classifier(
            model,
            self.tokenizer.spm_model_file,
            self.tokenizer.do_lower_case,
            self.max_seq_length,
            self.glue.labels,
            export_dir,
            sentence_pair=self.glue.test_columns.text_b is not None,
            threshold=self.threshold_to_export,
        )


def softmax(logits):
    """Row-wise softmax of [N, C] logits, in float64 for stable probabilities."""
    shifted = np.asarray(logits, np.float64) - np.max(logits, axis=-1, keepdims=True)
    exponentials = np.exp(shifted)
    return exponentials / exponentials.sum(axis=-1, keepdims=True)


def mean_loss(logits, labels, regression):
    """The training loss over a whole split: mean squared error or mean cross-entropy."""
    logits = np.asarray(logits, np.float64)
    if regression:
        return float(np.mean((logits[:, 0] - np.asarray(labels, np.float64)) ** 2))
    shifted = logits - logits.max(axis=-1, keepdims=True)  # log-softmax: finite at any gap
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return float(-np.mean(log_probabilities[np.arange(len(labels)), np.asarray(labels)]))


# --- run_classifier.py -------------------------------------------------------------------


def define_classifier_flags(flag_values=flags.FLAGS):
    """Every run_classifier.py flag: the fine-tuning flags plus --task_name and --data_dir."""
    finetuning_flags.define_finetuning_flags(flag_values)
    flags.DEFINE_string(
        "task_name", None, f"GLUE task: {', '.join(glue.TASKS)}.", flag_values=flag_values
    )
    flags.DEFINE_string(
        "data_dir",
        None,
        "The GLUE data directory (or the task's folder in it).",
        flag_values=flag_values,
    )
    flags.DEFINE_float(
        "threshold_to_export",
        float("nan"),
        "A decision threshold to serve with the --export_dir SavedModel: its signature then "
        "also returns `threshold` (float32 [batch], the same value for every row). NaN: none.",
        flag_values=flag_values,
    )


def glue_task_key(flag_values):
    """Checks the GLUE flags as given; returns the task's canonical name (its table row).

    Raises:
        FlagError, GlueDataError: no or an unknown --task_name, no --data_dir, or AX with
            --do_train / --do_eval.
    """
    training_flags.require(flag_values, "task_name")
    task_name = glue.get_task(flag_values.task_name).name
    training_flags.require(flag_values, "data_dir")
    if task_name == "ax" and (flag_values.do_train or flag_values.do_eval):
        raise training_flags.FlagError(
            "AX has only a test set: pass --do_predict alone, with --init_checkpoint set to "
            "the output_dir of an MNLI run (--task_name=mnli)."
        )
    return task_name


def run_from_flags(flag_values):
    """run_classifier.py: flags -> strategy, task, engine. Returns the final eval metrics.

    Raises:
        FlagError, GlueDataError, TokenizerError, CheckpointError...: user errors, each one
            sentence naming the flag or file.
    """
    setup = finetuning_flags.setup_from_flags(flag_values, glue_task_key)
    task = GlueTask(
        setup.task_key,
        flag_values.data_dir,
        setup.tokenizer,
        setup.config,
        max_seq_length=flag_values.max_seq_length,
        train_batch_size=flag_values.train_batch_size,
        eval_batch_size=flag_values.eval_batch_size,
        predict_batch_size=flag_values.predict_batch_size,
        classifier_dropout_prob=flag_values.classifier_dropout_prob,
        cached_dir=engine.feature_cache_dir(flag_values.cached_dir, flag_values.output_dir),
        threshold_to_export=(
            None if math.isnan(flag_values.threshold_to_export) else flag_values.threshold_to_export
        ),
    )
    return engine.run_with_flags(task, setup.strategy, setup.options, flag_values)
