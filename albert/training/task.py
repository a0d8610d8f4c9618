"""What a job (pretraining, a GLUE task, SQuAD, RACE) supplies to the generic training loop.

The loop owns the strategy, the distributed steps, the optimizer, checkpoints, evaluation and
summaries; a task owns its model, its data, its loss and its metrics. A task never sees the
number of replicas directly: the loop all-reduces the task's `loss_normalizers` (for example
the number of examples, or the sum of MLM weights) before calling `compute_loss`, so a task
that divides its local loss numerator by those global totals gets a loss whose sum over
replicas is the loss of the global batch on one device.

`TrainingTask` declares every hook the loop (`loop.py`, `steps.py`) calls, in the order of a
run: `create_model`, `load_initial_weights`, `prepare_output_dir`, `train_dataset`,
`loss_normalizers` and `compute_loss` (every step), `metric_results`, `evaluate` or
`eval_dataset`, `save_best`, `export`. The three every task must supply are abstract; the
others have a default, as in TF Model Garden's `official/core/base_task.py`.
"""

from __future__ import annotations

import abc

from albert.checkpoints import training_format


class TrainingTask(abc.ABC):
    """The interface between a job and `albert.training.loop`.

    Attributes:
        config: the model's `AlbertConfig`, written beside the checkpoints by the default
            `prepare_output_dir`; None for a model without one.
        metric_names: names of the sums `compute_loss` returns (summed over replicas and
            steps by the loop, then turned into metrics by `metric_results`).
        logged_metrics: metrics shown on the console progress line.
        best_metric: metric whose highest value marks the best checkpoint, or None.
        tokens_per_example: tokens one example holds (for the tokens/s summary).
        eval_batch_size: the global eval batch; the loop sets it to the batch it checked
            against the replicas (rounded up when the flag was left at its default).
        divergence_advice: what else to try, appended to the message of a diverged run
            (`albert.training.divergence`), starting with "; "; empty for none.

    A task evaluated by the loop's eval steps (the default `evaluate`) supplies
    `eval_dataset(input_context, num_steps)`: for every input pipeline, exactly `num_steps`
    full per-replica batches for each of its replicas, padded with examples that weigh 0
    in the task's sums when the data runs out, so every replica of every host runs every
    step with a full batch (TPU needs static shapes and equal step counts).

    Example (the shape of a task; `albert.tasks.pretraining.PretrainingTask` is a full one):
        >>> class MyTask(TrainingTask):
        ...     metric_names = ("correct", "examples")
        ...     def create_model(self): return AlbertClassifier(AlbertBackbone(config), 2)
        ...     def train_dataset(self, input_context, seed): ...   # per-replica batches
        ...     def loss_normalizers(self, features): return {"examples": ...}
        ...     def compute_loss(self, model, features, normalizers, training): ...
        ...     def metric_results(self, sums): return {"accuracy": ...}
        >>> loop.run(MyTask(), strategy, options, optimizer_fn)
    """

    config = None
    metric_names: tuple = ()
    logged_metrics: tuple = ()
    best_metric: str | None = None
    tokens_per_example: int = 0
    eval_batch_size: int | None = None
    divergence_advice: str = ""

    # --- Model and weights -------------------------------------------------------------

    @abc.abstractmethod
    def create_model(self):
        """Builds the Keras model (called inside the strategy's scope).

        Returns:
            A `keras.Model`; its weights are what checkpoints hold, keyed by variable path.
        """

    def load_initial_weights(self, model, path):
        """Loads `--init_checkpoint` into `model` when the run has no checkpoint to resume.

        The default reads a training checkpoint of ours (model weights only; the step
        restarts) or whatever `albert.load_checkpoint` reads (TF1, HF, Keras), through
        `albert.checkpoints.load_any`.

        Args:
            model: the model `create_model` built.
            path: the `--init_checkpoint` flag.

        Raises:
            albert.checkpoints.CheckpointError: no checkpoint at `path`, or one that does not
                fit `model`.
        """
        from albert.checkpoints import load_any

        load_any(model, path)

    def prepare_output_dir(self, output_dir):
        """Writes files the run's checkpoints need beside them (called once, on the chief).

        The loop calls it after resuming or initialising, so a rerun refused for a
        mismatched checkpoint leaves `output_dir` as it was. The default writes `config`, when
        the task has one, as `albert_config.json`, as in the released tarballs:
        `--init_checkpoint=<output_dir>` and `albert.convert_checkpoint` read it back.

        Args:
            output_dir: the run's directory.
        """
        if self.config is not None:
            training_format.write_config(self.config, output_dir)

    # --- Data --------------------------------------------------------------------------

    def train_dataset(self, input_context, seed):
        """The training data of one input pipeline (needed by a run with `do_train`).

        Args:
            input_context: the `tf.distribute.InputContext` of the pipeline.
            seed: the shuffle seed (`--seed`, or a new one when the saved input position of
                a resumed run is lost); give each pipeline its own order of it with
                `albert.training.inputs.pipeline_seed`.

        Returns:
            An endless `tf.data.Dataset` of per-replica batches of feature dicts.
        """
        raise NotImplementedError(f"{type(self).__name__} supplies no train_dataset.")

    def eval_dataset(self, input_context, num_steps):
        """The eval data of one input pipeline, for the loop's eval steps (see the class doc).

        Only called when `evaluate` returns None (the default).

        Args:
            input_context: the `tf.distribute.InputContext` of the pipeline.
            num_steps: the full per-replica batches to yield for each replica (padded).

        Returns:
            A finite `tf.data.Dataset` of per-replica batches of feature dicts. Padding
            comes after the pipeline's real records: the loop stops at the first global
            batch whose `loss_normalizers` "examples" (the real examples) sum to 0.
        """
        raise NotImplementedError(
            f"{type(self).__name__} supplies no eval_dataset; supply it or override evaluate."
        )

    # --- Loss and metrics (inside the distributed step) --------------------------------

    @abc.abstractmethod
    def loss_normalizers(self, features):
        """This replica's share of the global-batch denominators of the loss.

        Args:
            features: this replica's batch.

        Returns:
            Dict of name -> float scalar; the loop sums each over the replicas and passes the
            totals to `compute_loss` as `normalizers`.
        """

    @abc.abstractmethod
    def compute_loss(self, model, features, normalizers, training):
        """The local share of the global-batch loss, and the local metric sums.

        Args:
            model: the task's model.
            features: this replica's batch.
            normalizers: `loss_normalizers` summed over the global batch.
            training: whether the model runs in training mode (dropout).

        Returns:
            (loss, sums): the float scalar whose sum over replicas is the global-batch loss,
            and a dict of the `metric_names` summed over this replica's batch.
        """

    def metric_results(self, sums):
        """Training and eval scalars from the summed `metric_names`.

        Args:
            sums: dict of floats, each of the `metric_names` summed over replicas and steps,
                plus the loop's own (`examples`, `loss`, ...).

        Returns:
            A new dict of metric name -> float; the default has none (the loop reports the
            loss itself). An eval `loss` here replaces the loop's mean of the steps' losses.
        """
        del sums
        return {}

    # --- Evaluation and outputs --------------------------------------------------------

    def evaluate(self, model, strategy, steps_per_call=1):
        """Eval metrics the task computes itself, or None for the loop's eval steps.

        The default returns None: the loop runs its eval steps over `eval_dataset`. Tasks
        whose metrics need every prediction (Spearman's correlation, SQuAD's F1) override it.

        Args:
            model: the model with the weights to evaluate.
            strategy: the `tf.distribute.Strategy` it was built under.
            steps_per_call: batches per host call (`--iterations_per_loop`).

        Returns:
            Dict of metric name -> float (holding `best_metric`), or None.
        """
        del model, strategy, steps_per_call
        return None

    def eval_results_entries(self, metrics):
        """The `key = value` entries of `eval_results.txt` for `metrics` (an evaluation's,
        with `global_step`); the default writes them as they are."""
        return metrics

    def save_best(self, model, checkpoint_path, best_prefix):
        """Keeps the current weights, saved at `checkpoint_path`, as `best_prefix`.

        The default copies the training checkpoint (restorable with
        `albert.checkpoints.training_format.restore_model_weights` or as `--init_checkpoint`).

        Args:
            model: the model, holding the weights saved at `checkpoint_path`.
            checkpoint_path: the training checkpoint just evaluated.
            best_prefix: the prefix to write (`output_dir/model.ckpt-best`).
        """
        del model
        training_format.copy_checkpoint(checkpoint_path, best_prefix)

    def record_evaluation(self, step, checkpoint_path, metrics):
        """Called by the loop after each evaluation, on every worker; the default keeps nothing.

        Args:
            step: the global step of the evaluated weights.
            checkpoint_path: the checkpoint holding them, or None (weights never saved).
            metrics: dict of metric name -> value, as `evaluate` or the eval steps gave them.
        """
        del step, checkpoint_path, metrics

    def export(self, model, output_dir):
        """Writes the final weights at the end of training (on the chief).

        The default is the Keras format that
        `python -m albert.convert_checkpoint --input=<output_dir>` reads.

        Args:
            model: the trained model.
            output_dir: the run's directory (local or a `tf.io.gfile` path such as gs://).

        Returns:
            The path written.
        """
        from albert.checkpoints import save_checkpoint

        return save_checkpoint(model, output_dir, "keras")  # gs:// through a local copy
