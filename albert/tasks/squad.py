"""SQuAD v1.1 and v2.0 fine-tuning (run_squad.py) on the fine-tuning engine.

Model: `AlbertQuestionAnswering`, the v1 span head (start/end logits) or, with
`--version_2_with_negative`, the original's XLNet-style v2 head (start log-probabilities, end
conditioned on the start, answer-class logit). Losses, means over the global batch:

    v1.1   (CE(start) + CE(end)) / 2, softmax cross-entropy over the T positions
    v2.0   (-log p(start) - log p(end | gold start)) / 2 + 0.5 * sigmoid CE(cls, is_impossible)

Roles: TRAIN reads `--train_file`, EVAL and PREDICT both read `--predict_file` (the original
predicts and, when the file has answers, evaluates it). Evaluation post-processes every window
(`albert.data.squad_postprocessing`) and scores with the official SQuAD evaluation
(`albert.metrics.squad`): `exact` and `f1` (v1.1); for v2.0 also the HasAns/NoAns splits and
the best thresholds, with the null threshold tuned on that file (`null_score_diff_threshold`,
the `best_f1_thresh`, by `albert.metrics.squad_threshold`) and `exact`/`f1` reported at it. The best checkpoint is kept by `f1`.
Prediction writes `predictions.json`, `nbest_predictions.json` and (v2.0) `null_odds.json`;
v2.0 answers are nulled above `--null_score_diff_threshold` when given, else above the
threshold tuned by the final evaluation of the weights that predict (this run's, or the one
an earlier run wrote to eval_results.txt for the same checkpoint: train and evaluate on dev,
then predict the test file), else one tuned now when the file has answers, else 0.
`--export_dir` writes a SavedModel of either head (`albert.export_qa`); the v2 one nulls its
answers above the threshold predictions.json used. A run that only exports has nothing to tune
on: it takes the flag's, else the one tuned by an evaluation of the same weights
(eval_results.txt), else the one an earlier --do_predict of them wrote predictions.json with
(tuned then on its --predict_file, or given), which that run records beside it
(`albert.tasks.squad_null_threshold`), else 0 with a warning.

Shape letters: B batch, T max_seq_length, K start_n_top, K' end_n_top.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from absl import flags, logging

from albert.data import squad, squad_postprocessing
from albert.data.squad_features import check_window
from albert.metrics import squad as squad_metrics
from albert.metrics.squad_threshold import tune_null_threshold
from albert.modeling import AlbertBackbone, AlbertQuestionAnswering
from albert.tasks import engine, hyperparameters, squad_null_threshold
from albert.tasks import flags as finetuning_flags
from albert.training import flags as training_flags

V1_KEYS = ("start_logits", "end_logits")
V2_KEYS = (
    "start_top_log_probs",
    "start_top_index",
    "end_top_log_probs",
    "end_top_index",
    "cls_logits",
)
_INDEX_KEYS = ("start_top_index", "end_top_index")


class SquadTask(engine.FineTuningTask):
    """SQuAD v1.1 or v2.0 for the fine-tuning engine.

    Args:
        train_file, predict_file: SQuAD JSON files (None when the role is not used).
        tokenizer: an `albert.tokenization.FullTokenizer`.
        config: the `AlbertConfig`.
        version_2_with_negative: SQuAD 2.0 (unanswerable questions, the v2 head).
        max_seq_length, doc_stride, max_query_length: the windows (`albert.data.squad`).
        train_batch_size, eval_batch_size, predict_batch_size: global batch sizes.
        n_best_size, max_answer_length: post-processing.
        start_n_top, end_n_top: the v2 inference beam.
        null_score_diff_threshold: v2 null threshold for predictions, or None (see module doc).
        classifier_dropout_prob: dropout in the v2 answer-class head.
        cached_dir: directory of the feature cache, or None; or a dict role -> directory
            (the original's separate train and predict feature files).

    Example:
        >>> task = SquadTask("train-v2.0.json", "dev-v2.0.json", tokenizer, config, True)
        >>> engine.run(task, strategy, options, optimizer_fn, do_predict=True)
    """

    kept_features = ("unique_ids",)
    best_metric = "f1"

    def __init__(
        self,
        train_file,
        predict_file,
        tokenizer,
        config,
        version_2_with_negative,
        max_seq_length=384,
        doc_stride=128,
        max_query_length=64,
        train_batch_size=48,
        eval_batch_size=8,
        predict_batch_size=8,
        n_best_size=20,
        max_answer_length=30,
        start_n_top=5,
        end_n_top=5,
        null_score_diff_threshold=None,
        classifier_dropout_prob=0.1,
        cached_dir=None,
    ):
        super().__init__(
            config, train_batch_size, eval_batch_size, predict_batch_size, max_seq_length
        )
        self.files = {
            engine.TRAIN: train_file,
            engine.EVAL: predict_file,
            engine.PREDICT: predict_file,
        }
        self.tokenizer = tokenizer
        self.version_2_with_negative = version_2_with_negative
        self.window = dict(
            max_seq_length=max_seq_length, doc_stride=doc_stride, max_query_length=max_query_length
        )
        self.n_best_size, self.max_answer_length = n_best_size, max_answer_length
        self.start_n_top, self.end_n_top = start_n_top, end_n_top
        self.null_score_diff_threshold = null_score_diff_threshold
        self.prediction_null_threshold = None  # Set by write_predictions (v2).
        self.classifier_dropout_prob = classifier_dropout_prob
        if not isinstance(cached_dir, dict):
            cached_dir = dict.fromkeys((engine.TRAIN, engine.EVAL, engine.PREDICT), cached_dir)
        self.cached_dir = cached_dir
        self.prediction_keys = V2_KEYS if version_2_with_negative else V1_KEYS
        if version_2_with_negative:
            self.model_inputs = ("input_ids", "input_mask", "segment_ids", "p_mask")
        self.metric_names = ("start_correct", "end_correct", "real_examples")
        self.logged_metrics = ("start_accuracy", "end_accuracy")
        self._squad = {}

    def create_model(self):
        backbone = AlbertBackbone(self.config)
        # SQuAD reads the sequence output only: the pooler gets no gradient, and the
        # original's optimizer skips such variables, so it is frozen (kept as loaded).
        backbone.pooler.trainable = False
        return AlbertQuestionAnswering(
            backbone,
            version_2_with_negative=self.version_2_with_negative,
            start_n_top=self.start_n_top,
            end_n_top=self.end_n_top,
            dropout_rate=self.classifier_dropout_prob,
        )

    # --- Data ------------------------------------------------------------------------

    def squad_features(self, role):
        """The `SquadFeatures` of a role's file (EVAL and PREDICT share one load)."""
        is_training = role == engine.TRAIN
        key = (self.files[role], is_training)
        if key not in self._squad:
            if not self.files[role]:
                flag = "--train_file" if is_training else "--predict_file"
                raise engine.FineTuningError(f"{flag} is required to {role}.")
            self._squad[key] = squad.load_features(
                self.files[role],
                self.tokenizer,
                is_training,
                cache_dir=self.cached_dir.get(role),
                version_2_with_negative=self.version_2_with_negative,
                **self.window,
            )
        return self._squad[key]

    def read_features(self, train, evaluate, predict):
        """Eval and predict both read `--predict_file`, with its post-processing metadata."""
        if train:
            self.features(engine.TRAIN)
        if evaluate or predict:
            self.squad_features(engine.PREDICT)

    def load_features(self, role):
        data = self.squad_features(role)
        return data.dataset, data.num_features, data.path

    # --- Loss and training metrics ---------------------------------------------------

    def compute_loss(self, model, features, normalizers, training):
        inputs = self._inputs(features)
        if training and self.version_2_with_negative:
            # The v2 end logits are conditioned on the gold start in training.
            inputs["start_positions"] = features["start_positions"]
        return self.loss(model(inputs, training=training), features, normalizers)

    def loss(self, outputs, features, normalizers):
        weights = tf.cast(features["is_real_example"], tf.float32)  # [B]
        starts = tf.cast(features["start_positions"], tf.int32)  # [B]
        ends = tf.cast(features["end_positions"], tf.int32)  # [B]
        if self.version_2_with_negative:
            start_scores = tf.cast(outputs["start_log_probs"], tf.float32)  # [B, T]
            end_scores = tf.cast(outputs["end_log_probs"], tf.float32)  # [B, T]
            start_loss = -tf.gather(start_scores, starts, batch_dims=1)  # [B]
            end_loss = -tf.gather(end_scores, ends, batch_dims=1)  # [B]
            is_impossible = tf.cast(features["is_impossible"], tf.float32)  # [B]
            cls_loss = tf.nn.sigmoid_cross_entropy_with_logits(
                labels=is_impossible, logits=tf.cast(outputs["cls_logits"], tf.float32)
            )  # [B]
            losses = (start_loss + end_loss) / 2.0 + 0.5 * cls_loss
        else:
            start_scores = tf.cast(outputs["start_logits"], tf.float32)  # [B, T]
            end_scores = tf.cast(outputs["end_logits"], tf.float32)  # [B, T]
            cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits
            losses = (
                cross_entropy(labels=starts, logits=start_scores)
                + cross_entropy(labels=ends, logits=end_scores)
            ) / 2.0  # [B]
        sums = {
            "start_correct": _hits(start_scores, starts, weights),
            "end_correct": _hits(end_scores, ends, weights),
            "real_examples": tf.reduce_sum(weights),
        }
        return tf.reduce_sum(weights * losses) / normalizers["examples"], sums

    def metric_results(self, sums):
        count = max(sums["real_examples"], 1.0)
        return {
            "start_accuracy": sums["start_correct"] / count,
            "end_accuracy": sums["end_correct"] / count,
        }

    # --- Evaluation and predictions --------------------------------------------------

    def answers(self, predictions, role, null_score_diff_threshold=None):
        """(predictions, nbest, null_odds or None) of a role's file from the model outputs."""
        data = self.squad_features(role)
        outputs = {}
        for name in self.prediction_keys:
            values = predictions[name]
            outputs[name] = values.astype(np.int64) if name in _INDEX_KEYS else values
        results = squad_postprocessing.results_by_unique_id(predictions["unique_ids"], outputs)
        settings = dict(n_best_size=self.n_best_size, max_answer_length=self.max_answer_length)
        if not self.version_2_with_negative:
            answers, nbest = squad_postprocessing.compute_predictions_v1(
                data.examples, data.features, results, **settings
            )
            return answers, nbest, None
        return squad_postprocessing.compute_predictions_v2(
            data.examples,
            data.features,
            results,
            null_score_diff_threshold=null_score_diff_threshold,
            **settings,
        )

    def gold_dataset(self, role):
        """The `"data"` list of a role's file, or None when it has no answer to score."""
        return gold_dataset(self.files[role])

    def evaluate_predictions(self, predictions):
        dataset = self.gold_dataset(engine.EVAL)
        if dataset is None:
            raise engine.FineTuningError(
                f"--predict_file={self.files[engine.EVAL]} holds no answers to evaluate "
                "against; drop --do_eval (or pass a dev file)."
            )
        answers, _, null_odds = self.answers(predictions, engine.EVAL)
        if not self.version_2_with_negative:
            return dict(squad_metrics.evaluate_v1(dataset, answers))
        tuned = tune_null_threshold(dataset, answers, null_odds)
        return {**tuned.evaluation, "null_score_diff_threshold": float(tuned.threshold)}

    def null_threshold_for_predictions(self, predictions):
        """The v2 threshold of `write_predictions` (see the module doc): the flag's, else the
        one tuned by the final evaluation of the weights that predict, else one tuned now on
        `predictions` (--predict_file's model outputs; None: nothing to tune on, an export:
        the one predictions.json of these weights was written with), else 0."""
        return self._null_threshold(predictions)[0]

    def _null_threshold(self, predictions):
        """(threshold, how it was chosen) of `null_threshold_for_predictions`."""
        if self.null_score_diff_threshold is not None:
            return self.null_score_diff_threshold, "--null_score_diff_threshold"
        evaluation = self.final_evaluation
        if evaluation is not None and "null_score_diff_threshold" in evaluation:
            step = evaluation.get("global_step")
            logging.info(
                "Null threshold tuned by the evaluation of these weights (global step %s).", step
            )
            threshold = evaluation["null_score_diff_threshold"]
            if predictions is None:  # An export alone: does predictions.json agree?
                squad_null_threshold.warn_if_other_than(self._recorded_threshold(), threshold)
            return threshold, f"tuned by the evaluation of these weights (global step {step})"
        if predictions is None:  # A SavedModel exported without predicting: none to tune on.
            recorded = self._recorded_threshold()
            if recorded is not None and recorded["source"] != squad_null_threshold.UNTUNED:
                threshold = recorded["null_score_diff_threshold"]
                logging.info(
                    "Null threshold %s, as predictions.json of these weights (%s; recorded in %s).",
                    threshold,
                    recorded["source"],
                    recorded["path"],
                )
                return threshold, recorded["source"]
            logging.warning(
                "No null threshold for the SQuAD 2.0 SavedModel (none given, none tuned by an "
                "evaluation of these weights in eval_results.txt or by a --do_predict of them "
                "on a --predict_file with answers): it nulls answers above 0.0; pass "
                "--null_score_diff_threshold, or export in the run that predicts (--do_predict) "
                "or evaluates (--do_eval)."
            )
            return 0.0, squad_null_threshold.UNTUNED
        if self.gold_dataset(engine.PREDICT):
            logging.info("Null threshold tuned on --predict_file (it has answers).")
            threshold = self.evaluate_predictions(predictions)["null_score_diff_threshold"]
            return threshold, "tuned on --predict_file"
        logging.warning(
            "No null threshold tuned (no evaluation of these weights in eval_results.txt, and "
            "the predict file has no answers): using 0.0; pass --null_score_diff_threshold "
            "tuned on dev, or evaluate on dev first (--do_eval) in the same --output_dir."
        )
        return 0.0, squad_null_threshold.UNTUNED

    def _recorded_threshold(self):
        """The record of the threshold predictions.json of the final weights was written with
        (`albert.tasks.squad_null_threshold`), or None."""
        if self.output_dir is None or self.final_weights is None:
            return None
        return squad_null_threshold.read_record(self.output_dir, *self.final_weights)

    def write_predictions(self, predictions, output_dir):
        threshold = None
        if self.version_2_with_negative:
            threshold, source = self._null_threshold(predictions)
            logging.info("SQuAD 2.0 predictions with null_score_diff_threshold=%s.", threshold)
            self.prediction_null_threshold = threshold  # The export's too.
        answers, nbest, null_odds = self.answers(predictions, engine.PREDICT, threshold)
        paths = squad_postprocessing.write_predictions(output_dir, answers, nbest, null_odds)
        if threshold is not None and self.final_weights is not None:
            # For a later run that only exports these weights (`run` calls this on the chief).
            record = squad_null_threshold.write_record(
                output_dir, *self.final_weights, threshold, source
            )
            logging.info("Null threshold of predictions.json recorded in %s.", record)
        return list(paths.values())

    def export_null_threshold(self):
        """The v2 SavedModel's null threshold: predictions.json's when this run wrote it,
        else chosen as for predictions.json, without tuning (no predictions to tune on): the
        flag's, their evaluation's, or the one an earlier run's predictions.json of these
        weights was written with (`albert.tasks.squad_null_threshold`), else 0."""
        if self.prediction_null_threshold is not None:
            return self.prediction_null_threshold
        return self.null_threshold_for_predictions(None)

    def check_export(self):
        engine.check_in_graph_tokenizer(self.tokenizer)

    def export_saved_model(self, model, export_dir):
        from albert.export_qa import export_question_answering

        self.check_export()
        return export_question_answering(
            model,
            self.tokenizer.spm_model_file,
            self.tokenizer.do_lower_case,
            export_dir,
            max_seq_length=self.window["max_seq_length"],
            max_query_length=self.window["max_query_length"],
            max_answer_length=self.max_answer_length,
            n_best_size=self.n_best_size,
            doc_stride=self.window["doc_stride"],
            null_score_diff_threshold=(
                self.export_null_threshold() if self.version_2_with_negative else 0.0
            ),
        )


def gold_dataset(path):
    """The `"data"` list of a SQuAD file, or None when it has no answer to score against.

    Raises:
        SquadDataError: the file is not a SQuAD JSON file (e.g. a predictions.json).
    """
    content = squad_metrics.load_json(path, "SQuAD file")
    try:
        dataset = content["data"]
        has_answers = any(
            qa.get("answers") or qa.get("is_impossible")
            for article in dataset
            for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]
        )
    except (KeyError, TypeError, AttributeError):
        squad.read_squad_examples(path)  # Raises the reader's error, naming the place.
        raise
    return dataset if has_answers else None


def _hits(scores, positions, weights):
    """Weighted count of rows whose argmax is the gold position."""
    predicted = tf.argmax(scores, axis=-1, output_type=tf.int32)  # [B]
    return tf.reduce_sum(weights * tf.cast(tf.equal(predicted, positions), tf.float32))


# --- run_squad.py ------------------------------------------------------------------------


def define_squad_flags(flag_values=flags.FLAGS):
    """Every run_squad.py flag: the fine-tuning flags plus the original's SQuAD flags."""
    finetuning_flags.define_finetuning_flags(
        flag_values, aliases=("train_step", "warmup_step", "dropout_prob")
    )
    define = [
        (flags.DEFINE_string, "train_file", None, "SQuAD JSON to train on (train-v1.1.json)."),
        (
            flags.DEFINE_string,
            "predict_file",
            None,
            "SQuAD JSON to predict and, when it has answers, evaluate (dev-v1.1.json).",
        ),
        (
            flags.DEFINE_bool,
            "version_2_with_negative",
            False,
            "SQuAD 2.0: unanswerable questions, the v2 head and null_odds.json.",
        ),
        (flags.DEFINE_integer, "doc_stride", 128, "Tokens between the starts of two windows."),
        (flags.DEFINE_integer, "max_query_length", 64, "Question tokens kept (the first ones)."),
        (flags.DEFINE_integer, "n_best_size", 20, "Answers per question in nbest_predictions."),
        (flags.DEFINE_integer, "max_answer_length", 30, "Longest answer, in tokens."),
        (flags.DEFINE_integer, "start_n_top", 5, "v2.0 beam: start positions tried."),
        (flags.DEFINE_integer, "end_n_top", 5, "v2.0 beam: end positions per start."),
        (
            flags.DEFINE_float,
            "null_score_diff_threshold",
            None,
            "v2.0: predict no answer above this null score. Default: the threshold tuned on "
            "--predict_file when it has answers, else 0.",
        ),
        (
            flags.DEFINE_float,
            "num_train_epochs",
            None,
            "Train for this many passes over --train_file's questions: --num_train_steps = "
            "int(questions / train_batch_size * epochs), as the original. Default: the paper's "
            "steps (--num_train_steps).",
        ),
        (
            flags.DEFINE_float,
            "warmup_proportion",
            None,
            "Warm up for this fraction of the training steps (--num_warmup_steps = "
            "int(steps * proportion)). Default: 0.1 with --num_train_epochs (the original's "
            "default), else the paper's warmup steps.",
        ),
        (
            flags.DEFINE_string,
            "train_feature_file",
            None,
            "The original's training feature file: its directory becomes the feature cache "
            "(TFRecords named by data and settings; see --cached_dir).",
        ),
        (
            flags.DEFINE_string,
            "predict_feature_file",
            None,
            "The original's predict feature file: its directory becomes the predict feature "
            "cache (see --train_feature_file).",
        ),
        (
            flags.DEFINE_string,
            "predict_feature_left_file",
            None,
            "The original's pickle of predict-side features: never written or read (pickles are "
            "unsafe); its directory is the predict feature cache when --predict_feature_file is "
            "not given.",
        ),
        (
            flags.DEFINE_bool,
            "use_einsum",
            True,
            "Accepted for the original's commands; no effect: the Keras layers choose their own "
            "kernels, and a TFLite export is not offered here.",
        ),
    ]
    training_flags.define_rows(define, flag_values)


def check_squad_flags(flag_values):
    """Checks the SQuAD flags and files before anything heavy runs.

    Raises:
        FlagError: a count flag is not positive.
        SquadDataError: no room for the context in a window, a question id twice in a file,
            or a SQuAD 2.0 file without --version_2_with_negative. (A --doc_stride beyond the
            window is warned about: the windows then do not overlap, as in the original.)
    """
    training_flags.check_ranges(
        flag_values,
        {
            "positive": (
                "doc_stride",
                "max_query_length",
                "n_best_size",
                "max_answer_length",
                "start_n_top",
                "end_n_top",
                "max_seq_length",
            )
        },
    )
    check_window(flag_values.max_seq_length, flag_values.doc_stride, flag_values.max_query_length)
    v2 = flag_values.version_2_with_negative
    if flag_values.do_train:
        squad.read_squad_examples(flag_values.train_file, v2)
    if flag_values.do_eval or flag_values.do_predict:
        squad.read_squad_examples(flag_values.predict_file, v2)


def squad_task_key(flag_values):
    """Checks the SQuAD flags as given; returns the table row of the SQuAD version.

    As the original, predicting a file that has answers also evaluates it (--do_eval is set),
    and --num_train_epochs / --warmup_proportion become steps before the table fills them.

    Raises:
        FlagError, SquadDataError: a file the run needs is not given or not readable, --do_eval
            of a file without answers, or an epochs or warmup flag given twice or out of range.
    """
    if flag_values.do_train:
        training_flags.require(flag_values, "train_file")
    if flag_values.do_eval or flag_values.do_predict:
        training_flags.require(flag_values, "predict_file")
    v2 = flag_values.version_2_with_negative
    if (
        flag_values.do_predict
        and not flag_values.do_eval
        and gold_dataset(flag_values.predict_file)
    ):
        logging.info("--predict_file has answers: evaluating it too (eval_results.txt).")
        flag_values.do_eval = True
    elif flag_values.do_eval and not gold_dataset(flag_values.predict_file):
        # Refused now, not at the first evaluation after training to a checkpoint.
        raise training_flags.FlagError(
            f"--predict_file={flag_values.predict_file} holds no answers to evaluate against; "
            "drop --do_eval (or pass a dev file)."
        )
    if not flag_values.use_einsum:
        logging.warning("--use_einsum=false has no effect here (it chose TF1 kernels for TFLite).")
    task_key = "squad2.0" if v2 else "squad1.1"
    if flag_values.do_train:
        hyperparameters.steps_from_epochs(
            flag_values,
            task_key,
            lambda: len(squad.read_squad_examples(flag_values.train_file, v2)),
        )
    return task_key


def run_from_flags(flag_values):
    """run_squad.py: flags -> strategy, task, engine. Returns the final eval metrics.

    Raises:
        FlagError, SquadDataError, TokenizerError, CheckpointError...: user errors, each one
            sentence naming the flag or file.
    """
    setup = finetuning_flags.setup_from_flags(flag_values, squad_task_key, check_squad_flags)
    predict_dir = finetuning_flags.feature_file_directory(
        flag_values, ("predict_feature_file", "predict_feature_left_file")
    )
    train_dir = finetuning_flags.feature_file_directory(flag_values, ("train_feature_file",))
    cache = engine.feature_cache_dir(flag_values.cached_dir, flag_values.output_dir)
    cached_dir = {
        engine.TRAIN: train_dir or cache,
        engine.EVAL: predict_dir or cache,
        engine.PREDICT: predict_dir or cache,
    }
    task = SquadTask(
        flag_values.train_file,
        flag_values.predict_file,
        setup.tokenizer,
        setup.config,
        flag_values.version_2_with_negative,
        max_seq_length=flag_values.max_seq_length,
        doc_stride=flag_values.doc_stride,
        max_query_length=flag_values.max_query_length,
        train_batch_size=flag_values.train_batch_size,
        eval_batch_size=flag_values.eval_batch_size,
        predict_batch_size=flag_values.predict_batch_size,
        n_best_size=flag_values.n_best_size,
        max_answer_length=flag_values.max_answer_length,
        start_n_top=flag_values.start_n_top,
        end_n_top=flag_values.end_n_top,
        null_score_diff_threshold=flag_values.null_score_diff_threshold,
        classifier_dropout_prob=flag_values.classifier_dropout_prob,
        cached_dir=cached_dir,
    )
    return engine.run_with_flags(task, setup.strategy, setup.options, flag_values)
