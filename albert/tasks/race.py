"""RACE fine-tuning (run_race.py) on the fine-tuning engine.

Model: `AlbertMultipleChoice`: each of the C=4 inputs `[CLS] article [SEP] question+option
[SEP]` -> pooled output -> dropout -> dense 1; softmax over the choices. Loss: softmax
cross-entropy of the right option, mean over the global batch.

Roles: TRAIN, EVAL and PREDICT read the train, dev and test splits under `--data_dir`
(`RACE/{split}/{middle,high}/*.txt`), both levels or one (`--middle_only`, `--high_only`).
Evaluation reports `accuracy` (kept as the best checkpoint's metric), `middle_accuracy`,
`high_accuracy` and the example counts. Prediction writes `predictions.json` (example id ->
"A".."D") and `predict_results.txt` (the original's name) with the test split's accuracies
(RACE's test set has answers). Both results files also give `accuracy` under the original's
name, `eval_accuracy`. `--export_dir` writes a SavedModel that takes the raw article,
question and options (`albert.export_race`).

Shape letters: B batch, C choices (4), T max_seq_length.
"""

from __future__ import annotations

import os
import re

import numpy as np
import tensorflow as tf
from absl import flags, logging

from albert import fileio
from albert.data import race
from albert.metrics import format_eval_results
from albert.modeling import AlbertBackbone, AlbertMultipleChoice
from albert.tasks import engine
from albert.tasks import flags as finetuning_flags
from albert.training import flags as training_flags

SPLITS = {engine.TRAIN: "train", engine.EVAL: "dev", engine.PREDICT: "test"}
PREDICTIONS_FILE = "predictions.json"
PREDICT_RESULTS_FILE = "predict_results.txt"  # the original run_race.py's name


class RaceTask(engine.FineTuningTask):
    """RACE for the fine-tuning engine.

    Args:
        data_dir: the directory holding `RACE/` (or `RACE` itself).
        tokenizer: an `albert.tokenization.FullTokenizer`.
        config: the `AlbertConfig`.
        max_seq_length: T.
        max_qa_length: question+option tokens kept (the last ones).
        train_batch_size, eval_batch_size, predict_batch_size: global batch sizes.
        high_only, middle_only: read one level only.
        classifier_dropout_prob: dropout on the pooled output.
        cached_dir: directory of the feature cache, or None; or a dict role -> directory
            (the original's separate train, eval and predict files).

    Example:
        >>> task = RaceTask("data", tokenizer, config, 512, 128, 32, 8, 8)
        >>> engine.run(task, strategy, options, optimizer_fn, do_predict=True)
    """

    prediction_keys = ("logits",)
    kept_features = ("label_ids",)
    best_metric = "accuracy"
    metric_names = ("correct", "real_examples")
    logged_metrics = ("accuracy",)

    def __init__(
        self,
        data_dir,
        tokenizer,
        config,
        max_seq_length,
        max_qa_length,
        train_batch_size,
        eval_batch_size,
        predict_batch_size,
        high_only=False,
        middle_only=False,
        classifier_dropout_prob=0.1,
        cached_dir=None,
    ):
        super().__init__(
            config, train_batch_size, eval_batch_size, predict_batch_size, max_seq_length
        )
        self.levels = race.race_levels(high_only, middle_only)
        self.tokens_per_example = race.NUM_CHOICES * max_seq_length
        self.data_dir = data_dir
        self.tokenizer = tokenizer
        self.max_seq_length, self.max_qa_length = max_seq_length, max_qa_length
        self.high_only, self.middle_only = high_only, middle_only
        self.classifier_dropout_prob = classifier_dropout_prob
        if not isinstance(cached_dir, dict):
            cached_dir = dict.fromkeys(SPLITS, cached_dir)
        self.cached_dir = cached_dir
        self._race = {}

    def create_model(self):
        return AlbertMultipleChoice(AlbertBackbone(self.config), self.classifier_dropout_prob)

    def race_features(self, role):
        """The `RaceFeatures` of a role's split, loaded once."""
        if role not in self._race:
            self._race[role] = race.load_features(
                self.data_dir,
                SPLITS[role],
                self.tokenizer,
                self.max_seq_length,
                self.max_qa_length,
                self.high_only,
                self.middle_only,
                self.cached_dir.get(role),
            )
        return self._race[role]

    def load_features(self, role):
        data = self.race_features(role)
        return data.dataset, data.num_examples, data.path

    # --- Loss and training metrics ---------------------------------------------------

    def loss(self, outputs, features, normalizers):
        logits = tf.cast(outputs["logits"], tf.float32)  # [B, C]
        labels = tf.cast(features["label_ids"], tf.int32)  # [B]
        weights = tf.cast(features["is_real_example"], tf.float32)  # [B]
        errors = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        hits = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
        sums = {"correct": tf.reduce_sum(weights * hits), "real_examples": tf.reduce_sum(weights)}
        return tf.reduce_sum(weights * errors) / normalizers["examples"], sums

    def metric_results(self, sums):
        return {"accuracy": sums["correct"] / max(sums["real_examples"], 1.0)}

    # --- Evaluation and predictions --------------------------------------------------

    def evaluate_predictions(self, predictions):
        examples = self.race_features(engine.EVAL).examples
        return race.accuracy_by_level(examples, predictions["logits"])

    def predicted_classes(self, predictions):
        examples = self.race_features(engine.EVAL).examples
        letters = np.asarray(list(race.ANSWER_LETTERS))
        predicted = np.argmax(predictions["logits"], axis=-1)  # [N]
        return letters[predicted], letters[[example.label for example in examples]]

    def write_predictions(self, predictions, output_dir):
        examples = self.race_features(engine.PREDICT).examples
        path = os.path.join(output_dir, PREDICTIONS_FILE)
        race.write_predictions(path, examples, predictions["logits"])
        results_path = os.path.join(output_dir, PREDICT_RESULTS_FILE)
        results = race.accuracy_by_level(examples, predictions["logits"])
        fileio.write_text(results_path, format_eval_results(self.eval_results_entries(results)))
        return [path, results_path]

    # --- SavedModel ------------------------------------------------------------------

    def check_export(self):
        engine.check_in_graph_tokenizer(self.tokenizer)

    def export_saved_model(self, model, export_dir):
        from albert.export_race import export_multiple_choice

        self.check_export()
        return export_multiple_choice(
            model,
            self.tokenizer.spm_model_file,
            self.tokenizer.do_lower_case,
            self.max_seq_length,
            self.max_qa_length,
            export_dir,
        )


# --- run_race.py -------------------------------------------------------------------------


def define_race_flags(flag_values=flags.FLAGS):
    """Every run_race.py flag: the fine-tuning flags plus the original's RACE flags."""
    finetuning_flags.define_finetuning_flags(
        flag_values,
        aliases=("train_step", "warmup_step", "dropout_prob", "num_keep_checkpoint"),
        save_checkpoints_steps=100,
    )
    define = [
        (
            flags.DEFINE_string,
            "data_dir",
            None,
            "Directory holding RACE/{train,dev,test}/{middle,high}/*.txt.",
        ),
        (flags.DEFINE_bool, "high_only", False, "Read the high-school questions only."),
        (flags.DEFINE_bool, "middle_only", False, "Read the middle-school questions only."),
        (flags.DEFINE_integer, "max_qa_length", 128, "Question+option tokens kept (the last)."),
        (flags.DEFINE_string, "task_name", "race", "The task; only race (the original's one)."),
        (
            flags.DEFINE_string,
            "train_file",
            None,
            "The original's preprocessed train TFRecord: its directory becomes the feature cache "
            "(TFRecords named by data and settings; see --cached_dir).",
        ),
        (
            flags.DEFINE_string,
            "eval_file",
            None,
            "The original's preprocessed dev TFRecord: its directory is the dev feature cache.",
        ),
        (
            flags.DEFINE_string,
            "predict_file",
            None,
            "The original's preprocessed test TFRecord: its directory is the test feature cache.",
        ),
    ]
    training_flags.define_rows(define, flag_values)
    for name in ("do_train", "do_eval"):
        flag_values[name].help += training_flags.EXPLICIT_DO
    flags.DEFINE_enum(
        "model_version",
        "auto",
        ["auto", "v1", "v2"],
        "v1 or v2 ALBERT, for the defaults: v2 models take --learning_rate=1e-5 and no model "
        "dropout (the original README: v1 settings make v2 models diverge), v1 the paper's "
        "2e-5 and 0.1. auto: v2 when the --albert_config_file, --init_checkpoint or "
        "--albert_hub_module_handle path has a v2 component (albert_base_v2/...), else v1.",
        flag_values=flag_values,
    )


_V2_COMPONENT = re.compile(r"(^|[^a-z0-9])v2([^a-z0-9]|$)")


def model_version(flag_values):
    """ "v1" or "v2" from --model_version, or from the model's paths when it is auto."""
    if flag_values.model_version != "auto":
        return flag_values.model_version
    paths = (
        flag_values.albert_config_file,
        flag_values.init_checkpoint,
        flag_values.albert_hub_module_handle,
    )
    version = "v2" if any(p and _V2_COMPONENT.search(p.lower()) for p in paths) else "v1"
    logging.info(
        "RACE defaults for an ALBERT %s model (from the model's paths; --model_version to set).",
        version,
    )
    return version


def check_race_flags(flag_values):
    """Raises FlagError unless --max_qa_length leaves room for the 3 special tokens."""
    limit = flag_values.max_seq_length - 3
    if not 1 <= flag_values.max_qa_length <= limit:
        raise training_flags.FlagError(
            f"--max_qa_length={flag_values.max_qa_length} must be in [1, {limit}] "
            f"(--max_seq_length={flag_values.max_seq_length} - 3 special tokens)."
        )


def race_task_key(flag_values):
    """Checks the RACE flags as given; returns the table row of the model's version.

    Raises:
        FlagError, RaceDataError: --task_name other than race, no --data_dir, or both
            --high_only and --middle_only.
    """
    if flag_values.task_name.lower() != "race":
        raise training_flags.FlagError(
            f"--task_name={flag_values.task_name} is not a RACE task; run_race runs race only."
        )
    training_flags.require(flag_values, "data_dir")
    race.race_levels(flag_values.high_only, flag_values.middle_only)
    return f"race_{model_version(flag_values)}"


def run_from_flags(flag_values):
    """run_race.py: flags -> strategy, task, engine. Returns the final eval metrics.

    Raises:
        FlagError, RaceDataError, TokenizerError, CheckpointError...: user errors, each one
            sentence naming the flag or file.
    """
    setup = finetuning_flags.setup_from_flags(flag_values, race_task_key, check_race_flags)
    task = RaceTask(
        flag_values.data_dir,
        setup.tokenizer,
        setup.config,
        max_seq_length=flag_values.max_seq_length,
        max_qa_length=flag_values.max_qa_length,
        train_batch_size=flag_values.train_batch_size,
        eval_batch_size=flag_values.eval_batch_size,
        predict_batch_size=flag_values.predict_batch_size,
        high_only=flag_values.high_only,
        middle_only=flag_values.middle_only,
        classifier_dropout_prob=flag_values.classifier_dropout_prob,
        cached_dir={
            role: finetuning_flags.feature_file_directory(flag_values, (name,))
            or engine.feature_cache_dir(flag_values.cached_dir, flag_values.output_dir)
            for role, name in (
                (engine.TRAIN, "train_file"),
                (engine.EVAL, "eval_file"),
                (engine.PREDICT, "predict_file"),
            )
        },
    )
    return engine.run_with_flags(task, setup.strategy, setup.options, flag_values)
