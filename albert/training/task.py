"""What a job (pretraining, a GLUE task, SQuAD, RACE) supplies to the generic training loop.

The loop owns the strategy, the distributed steps, the optimizer, checkpoints, evaluation and
summaries; a task owns its model, its data, its loss and its metrics. A task never sees the
number of replicas directly: the loop all-reduces the task's `loss_normalizers` (for example
the number of examples, or the sum of MLM weights) before calling `compute_loss`, so a task
that divides its local loss numerator by those global totals gets a loss whose sum over
replicas is the loss of the global batch on one device.
"""

from __future__ import annotations

import abc
import os


class TrainingTask(abc.ABC):
    """The interface between a job and `albert.training.loop`.

    Attributes:
        metric_names: names of the sums `compute_loss` returns (summed over replicas and
            steps by the loop, then turned into metrics by `metric_results`).
        best_metric: metric whose highest value marks the best checkpoint, or None.
        tokens_per_example: tokens one example holds (for the tokens/s summary).
        logged_metrics: metrics shown on the console progress line.
        eval_batch_size: the global eval batch; the loop sets it to the batch it checked
            against the replicas (rounded up when the flag was left at its default).

    A task evaluated by the loop's eval steps (the default `evaluate`) supplies
    `eval_dataset(input_context, num_steps)`: for every input pipeline, exactly `num_steps`
    full per-replica batches for each of its replicas, padded with examples that weigh 0
    in the task's sums when the data runs out, so every replica of every host runs every
    step with a full batch (TPU needs static shapes and equal step counts).
    """

    metric_names: tuple = ()
    logged_metrics: tuple = ()
    best_metric: str | None = None
    tokens_per_example: int = 0

    @abc.abstractmethod
    def create_model(self):
        """Builds the Keras model (called inside the strategy's scope)."""

    def load_initial_weights(self, model, path):
        """Loads `--init_checkpoint` into `model`: a training checkpoint of ours (model weights
        only; the step restarts), or whatever `albert.load_checkpoint` reads (TF1, HF, Keras)."""
        from albert.checkpoints import load_any

        load_any(model, path)

    def prepare_output_dir(self, output_dir):
        """Writes files the run's checkpoints need beside them (called once, on the chief)."""
        del output_dir  # nothing by default

    def save_best(self, model, checkpoint_path, best_prefix):
        """Keeps the current weights, saved at `checkpoint_path`, as `best_prefix`.

        The default copies the training checkpoint (restorable with
        `albert.checkpoints.training_format.restore_model_weights` or as `--init_checkpoint`).
        """
        from albert.checkpoints import training_format

        training_format.copy_checkpoint(checkpoint_path, best_prefix)

    def evaluate(self, model, strategy, steps_per_call=1):
        """Eval metrics the task computes itself, or None (the default) for the loop's eval
        steps over `eval_dataset`. Tasks whose metrics need every prediction (Spearman's
        correlation, SQuAD's F1) override it, running up to `steps_per_call` batches per
        host call (`--iterations_per_loop`)."""
        del model, strategy, steps_per_call
        return None

    def export(self, model, output_dir):
        """Writes the final weights; the default is the Keras format that
        `python -m albert.convert_checkpoint --input=<output_dir>` reads."""
        from albert.checkpoints import save_checkpoint

        if "://" not in output_dir:
            return save_checkpoint(model, output_dir, "keras")
        import tempfile

        import tensorflow as tf

        from albert import fileio

        # Keras writes local files; copy them to gs:// (or any tf.io.gfile path), each under
        # a temporary name renamed when complete.
        with tempfile.TemporaryDirectory() as local:
            written = save_checkpoint(model, local, "keras")
            for name in tf.io.gfile.listdir(local):
                with fileio.atomic_path(f"{output_dir.rstrip('/')}/{name}") as temporary:
                    tf.io.gfile.copy(f"{local}/{name}", temporary, overwrite=True)
        return f"{output_dir.rstrip('/')}/{os.path.basename(written)}"
