"""The pretraining job: masked LM + sentence order, losses and metrics as the original.

    masked_lm_loss          = sum(w * CE) / (sum(w) + 1e-5)   over the masked positions
    sentence_order_loss     = mean CE over the (real) examples
    loss                    = masked_lm_loss + sentence_order_loss

Both are over the GLOBAL batch: each replica divides its local numerator by the global
denominator (summed across replicas by the loop), so the gradients summed across replicas are
those of one device with the whole batch. Metrics (`masked_lm_accuracy`, `masked_lm_loss`,
`sentence_order_accuracy`, `sentence_order_loss`) are weighted by `masked_lm_weights` as the
original's `tf.metrics` calls are; the sentence-order ones by `is_real_example`, which is 0
only for the padding records that fill the last eval batches (`albert.data.records`), so
evaluation over padded batches counts each real record once. Eval `loss` is
`masked_lm_loss + sentence_order_loss` over the whole eval set.
"""

from __future__ import annotations

import os
import re
import tempfile

from albert.checkpoints import CheckpointError, tf1, training_format
from albert.config import AlbertConfig
from albert.data import record_damage, records
from albert.modeling import AlbertPretrainer
from albert.modeling.losses import loss_normalizers, pretraining_loss
from albert.training import checkpointing, loop
from albert.training import flags as flags_lib
from albert.training.inputs import pipeline_seed
from albert.training.task import TrainingTask

MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
METRIC_SUMS = (
    "masked_lm_loss_sum",
    "masked_lm_correct",
    "masked_lm_weight",
    "sentence_order_loss_sum",
    "sentence_order_correct",
    "sentence_order_examples",
)


def pretraining_metrics(sums):
    """The original's four eval metrics from accumulated sums."""

    def ratio(numerator, denominator):
        return sums[numerator] / sums[denominator] if sums[denominator] else 0.0

    metrics = {
        "masked_lm_accuracy": ratio("masked_lm_correct", "masked_lm_weight"),
        "masked_lm_loss": ratio("masked_lm_loss_sum", "masked_lm_weight"),
        "sentence_order_accuracy": ratio("sentence_order_correct", "sentence_order_examples"),
        "sentence_order_loss": ratio("sentence_order_loss_sum", "sentence_order_examples"),
    }
    metrics["loss"] = metrics["masked_lm_loss"] + metrics["sentence_order_loss"]
    return metrics


class PretrainingTask(TrainingTask):
    """ALBERT pretraining on the original's TFRecords.

    Args:
        config: an `AlbertConfig`.
        input_file: training records, comma-separated globs.
        eval_input_file: eval records (default: `input_file`).
        train_batch_size, eval_batch_size: global batch sizes.
        max_seq_length, max_predictions_per_seq: as the records were written.
        init_from_group0: initialise every layer group from group 0 of the init checkpoint.
    """

    metric_names = METRIC_SUMS
    best_metric = "masked_lm_accuracy"
    logged_metrics = (
        "masked_lm_loss",
        "masked_lm_accuracy",
        "sentence_order_loss",
        "sentence_order_accuracy",
    )

    def __init__(
        self,
        config,
        input_file,
        train_batch_size,
        eval_batch_size,
        max_seq_length,
        max_predictions_per_seq,
        eval_input_file=None,
        init_from_group0=False,
    ):
        self.config = config
        self.input_files = records.expand_file_patterns(input_file)
        self.eval_files = records.expand_file_patterns(eval_input_file or input_file)
        self.train_batch_size = train_batch_size
        self.eval_batch_size = eval_batch_size
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        self.init_from_group0 = init_from_group0
        self.tokens_per_example = max_seq_length

    def create_model(self):
        return AlbertPretrainer(self.config)

    def _dataset(
        self, files, global_batch_size, input_context, is_training, seed=None, eval_steps=None
    ):
        return records.pretraining_dataset(
            files,
            input_context.get_per_replica_batch_size(global_batch_size),
            self.max_seq_length,
            self.max_predictions_per_seq,
            is_training=is_training,
            input_context=input_context,
            seed=seed,
            eval_steps=eval_steps,
            vocab_size=self.config.vocab_size,
            type_vocab_size=self.config.type_vocab_size,
        )

    def train_dataset(self, input_context, seed):
        seed = pipeline_seed(seed, input_context)  # each host its own order of shared files
        return self._dataset(self.input_files, self.train_batch_size, input_context, True, seed)

    def eval_dataset(self, input_context, num_steps):
        return self._dataset(
            self.eval_files, self.eval_batch_size, input_context, False, eval_steps=num_steps
        )

    def loss_normalizers(self, features):
        return loss_normalizers(features)

    def compute_loss(self, model, features, normalizers, training):
        inputs = {name: features[name] for name in MODEL_INPUTS}
        outputs = model(inputs, training=training, masked_positions_only=True)
        return pretraining_loss(outputs["mlm_logits"], outputs["sop_logits"], features, normalizers)

    def metric_results(self, sums):
        return pretraining_metrics(sums)

    def load_initial_weights(self, model, path):
        if not self.init_from_group0:
            return super().load_initial_weights(model, path)
        source = AlbertPretrainer(self.config.replace(num_hidden_groups=1))
        super().load_initial_weights(source, path)
        copy_from_group0(source, model)

    def save_best(self, model, checkpoint_path, best_prefix):
        """`model.ckpt-best` in the original's TF1 names, like a released model: the original
        code, `albert.load_checkpoint` and the converter all read it. Sharing modes TF1 names
        cannot express keep a copy of the training checkpoint instead."""
        step = checkpointing.checkpoint_step(checkpoint_path)
        with tempfile.TemporaryDirectory() as directory:
            try:
                prefix = tf1.save(
                    model, directory, prefix_name=os.path.basename(best_prefix), global_step=step
                )
            except CheckpointError:
                return super().save_best(model, checkpoint_path, best_prefix)
            training_format.copy_checkpoint(prefix, best_prefix)


def copy_from_group0(source, target):
    """Sets every `group_<g>_` weight of `target` from `group_0_` of `source` (same paths
    otherwise), as the original's `--init_from_group0`."""
    by_path = {w.path: w for w in source.weights}
    for weight in target.weights:
        # `\b`: the layer group only, never the `inner_group_<i>_` that follows it.
        path = re.sub(r"\bgroup_\d+_", "group_0_", weight.path)
        weight.assign(by_path[path])


def run_from_flags(flag_values):
    """run_pretraining.py: flags -> strategy, task, loop. Returns the last eval metrics."""
    flags_lib.require(flag_values, "albert_config_file", "input_file", "output_dir")
    config = AlbertConfig.from_json_file(flag_values.albert_config_file)
    if flag_values.max_seq_length > config.max_position_embeddings:
        raise flags_lib.FlagError(
            f"--max_seq_length={flag_values.max_seq_length} exceeds the config's "
            f"max_position_embeddings={config.max_position_embeddings}."
        )
    options = flags_lib.run_options_from_flags(
        flag_values, max_eval_steps=flag_values.max_eval_steps
    )
    # MultiWorkerMirroredStrategy must exist before any other TensorFlow op runs.
    strategy, _, _ = flags_lib.strategy_from_flags(flag_values)
    task = PretrainingTask(
        config,
        flag_values.input_file,
        train_batch_size=flag_values.train_batch_size,
        eval_batch_size=flag_values.eval_batch_size,
        max_seq_length=flag_values.max_seq_length,
        max_predictions_per_seq=flag_values.max_predictions_per_seq,
        eval_input_file=flag_values.eval_input_file,
        init_from_group0=flag_values.init_from_group0,
    )
    # Fail on mismatched records now, in one sentence, not inside the input pipeline.
    shapes = (flag_values.max_seq_length, flag_values.max_predictions_per_seq)
    if options.do_train:
        records.check_record_shapes(task.input_files, *shapes)
    if options.do_eval:
        records.check_record_shapes(task.eval_files, *shapes)
    read = (task.input_files if options.do_train else []) + (
        task.eval_files if options.do_eval else []
    )
    evaluated_apart = flag_values.eval_input_file and options.do_eval
    flags = "--input_file" + (" (or --eval_input_file)" if evaluated_apart else "")
    # tf.data's error names no file: after a damaged record stops the run, find it.
    with record_damage.naming_damaged_file(
        list(dict.fromkeys(read)),
        source=flags,
        remedy=f"remove {{it}} from {flags} or rebuild {{it}} with create_pretraining_data",
        error_class=records.RecordError,
    ):
        return loop.run(task, strategy, options, flags_lib.optimizer_fn_from_flags(flag_values))
