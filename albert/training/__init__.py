"""Training: strategies, the original's optimizers, and one loop for pretraining and fine-tuning.

strategy.py      tpu | mirrored | multi_worker | default, precision, chief / worker roles
optimization.py  LAMB and AdamW with the original's semantics, warmup + polynomial decay
inputs.py        dataset_fn -> per-replica batches (saveable iterator for exact resume)
steps.py         the on-device train / eval loops (all-reduce, clipping, metric sums)
checkpointing.py checkpoints keyed by variable path, resume, best copy
summaries.py     TensorBoard scalars and the console progress line
loop.py          the engine: `run(task, strategy, options, optimizer_fn)`
predict.py       the predict pass over every example (fine-tuning metrics, prediction files)
task.py          `TrainingTask`, what a job supplies (model, data, loss, metrics)
flags.py         flags shared by every script, declared once
"""
