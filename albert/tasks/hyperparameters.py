"""The paper's fine-tuning hyperparameters (ALBERT, appendix table), used as flag defaults.

A fine-tuning flag left unset (None) takes the value of its task's row; a flag given on the
command line always wins. `albert_dropout_prob` is the model's dropout (the config's
`hidden_dropout_prob` and `attention_probs_dropout_prob`); the classifier's own dropout is
0.1 for every task (`--classifier_dropout_prob`).

    task        lr     batch  steps  warmup  max_seq_length  albert dropout
    cola        1e-5   16     5336   320     512             0
    sts-b       2e-5   16     3598   214     512             0
    sst-2       1e-5   32     20935  1256    512             0
    mnli        3e-5   128    10000  1000    512             0
    qnli        1e-5   32     33112  1986    512             0
    qqp         5e-5   128    14000  1000    512             0.1
    rte         3e-5   32     800    200     512             0.1
    mrpc        2e-5   32     800    200     512             0
    wnli        2e-5   16     2000   250     512             0.1
    squad1.1    5e-5   48     3649   365     384             0
    squad2.0    3e-5   48     8144   814     512             0
    race        2e-5   32     12000  1000    512             0.1

`mismnli` and `ax` use the MNLI row (the same model). RACE has a row per model version:
`race_v1` is the paper's, `race_v2` takes lr 1e-5 and no model dropout, as the original README
does for v2 models (v1 settings make them diverge).
"""

from __future__ import annotations

import dataclasses
import math

from absl import logging


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """One row of the paper's table, under the flag names that take it."""

    learning_rate: float
    train_batch_size: int
    num_train_steps: int
    num_warmup_steps: int
    max_seq_length: int
    albert_dropout_prob: float


_ROWS = {
    "cola": Hyperparameters(1e-5, 16, 5336, 320, 512, 0.0),
    "sts-b": Hyperparameters(2e-5, 16, 3598, 214, 512, 0.0),
    "sst-2": Hyperparameters(1e-5, 32, 20935, 1256, 512, 0.0),
    "mnli": Hyperparameters(3e-5, 128, 10000, 1000, 512, 0.0),
    "qnli": Hyperparameters(1e-5, 32, 33112, 1986, 512, 0.0),
    "qqp": Hyperparameters(5e-5, 128, 14000, 1000, 512, 0.1),
    "rte": Hyperparameters(3e-5, 32, 800, 200, 512, 0.1),
    "mrpc": Hyperparameters(2e-5, 32, 800, 200, 512, 0.0),
    "wnli": Hyperparameters(2e-5, 16, 2000, 250, 512, 0.1),
    "squad1.1": Hyperparameters(5e-5, 48, 3649, 365, 384, 0.0),
    "squad2.0": Hyperparameters(3e-5, 48, 8144, 814, 512, 0.0),
    "race": Hyperparameters(2e-5, 32, 12000, 1000, 512, 0.1),
}
PAPER_HYPERPARAMETERS = {
    **_ROWS,
    "mismnli": _ROWS["mnli"],
    "ax": _ROWS["mnli"],
    # RACE by model version (albert.tasks.race.model_version): the paper's row for v1; for v2
    # the original README's command, lr 1e-5, with the v2 configs' dropout of 0 kept.
    "race_v1": _ROWS["race"],
    "race_v2": Hyperparameters(1e-5, 32, 12000, 1000, 512, 0.0),
}
# The original run_squad's `--warmup_proportion` default (the paper's SQuAD rows warm up for
# the same tenth of their steps).
ORIGINAL_WARMUP_PROPORTION = 0.1
# The original fine-tuning scripts' names of the engine's step flags (aliases of them).
_ORIGINAL_NAMES = {"num_train_steps": "train_step", "num_warmup_steps": "warmup_step"}


def fill_from_table(flag_values, task_key):
    """Sets every unset (None) flag named in `Hyperparameters` from the task's row.

    Args:
        flag_values: parsed `absl.flags.FlagValues` holding those flags.
        task_key: a key of `PAPER_HYPERPARAMETERS` (e.g. "mrpc", "squad2.0", "race").

    Returns:
        dict of flag name -> value taken from the table (also logged), empty when every flag
        was given.
    """
    row = PAPER_HYPERPARAMETERS[task_key]
    taken = {}
    for field in dataclasses.fields(Hyperparameters):
        if getattr(flag_values, field.name) is None:
            value = getattr(row, field.name)
            setattr(flag_values, field.name, value)
            taken[field.name] = value
    training = getattr(flag_values, "do_train", True)
    # Without training only the sequence length is used: the rest would be noise in the log.
    shown = {n: v for n, v in taken.items() if training or n == "max_seq_length"}
    if shown:
        logging.info(
            "From the paper's hyperparameters for %s: %s (pass a flag to override).",
            task_key,
            ", ".join(
                f"--{_ORIGINAL_NAMES.get(name, name)}={value}" for name, value in shown.items()
            ),
        )
    steps, warmup = flag_values.num_train_steps, flag_values.num_warmup_steps
    table_warmup = "num_warmup_steps" in taken and "num_train_steps" not in taken
    if training and table_warmup and warmup >= steps:
        logging.warning(
            "--warmup_step=%d from the paper's table is not below --train_step=%d: the "
            "learning rate never reaches --learning_rate; pass --warmup_step (at the table's "
            "proportion, --warmup_step=%d for --train_step=%d).",
            warmup,
            steps,
            steps * row.num_warmup_steps // row.num_train_steps,
            steps,
        )
    return taken


def steps_from_epochs(flag_values, task_key, count_train_examples):
    """The original run_squad's `--num_train_epochs` and `--warmup_proportion`, as steps.

    As the original: steps = int(examples / train_batch_size * num_train_epochs) over the
    training file's questions (not its windows), and warmup = int(steps * warmup_proportion),
    with the original's default proportion of 0.1 when epochs are given and no warmup flag is.
    Each sets `--num_train_steps` / `--num_warmup_steps` before the paper's table fills what is
    still unset (the batch size may come from the table).

    Args:
        flag_values: parsed flags with `num_train_epochs` and `warmup_proportion` (None: unset).
        task_key: the task's row of `PAPER_HYPERPARAMETERS`.
        count_train_examples: () -> the number of training examples.

    Raises:
        FlagError: a count given twice (--num_train_steps with --num_train_epochs, or
            --num_warmup_steps with --warmup_proportion), or a value out of range.
    """
    from albert.training.flags import FlagError

    row = PAPER_HYPERPARAMETERS[task_key]
    epochs, proportion = flag_values.num_train_epochs, flag_values.warmup_proportion
    if epochs is not None:
        if flag_values.num_train_steps is not None:
            raise FlagError(
                "Pass --num_train_epochs or --num_train_steps (--train_step), not both."
            )
        if not 0 < epochs < math.inf:  # NaN fails too
            raise FlagError(f"--num_train_epochs must be positive and finite. Received: {epochs}")
        batch_size = flag_values.train_batch_size or row.train_batch_size
        examples = count_train_examples()
        flag_values.num_train_steps = max(1, int(examples / batch_size * epochs))
        logging.info(
            "--num_train_epochs=%s: %d steps (%d examples, batch %d).",
            epochs,
            flag_values.num_train_steps,
            examples,
            batch_size,
        )
    if epochs is not None and proportion is None and flag_values.num_warmup_steps is None:
        # The original's --warmup_proportion default: the table's count of warmup steps
        # belongs to the table's count of training steps, not to the epochs' one.
        proportion = ORIGINAL_WARMUP_PROPORTION
        logging.info(
            "--num_train_epochs without --warmup_proportion or --warmup_step: warming up for "
            "--warmup_proportion=%s of the steps, the original's default.",
            proportion,
        )
    if proportion is not None:
        if flag_values.num_warmup_steps is not None:
            raise FlagError(
                "Pass --warmup_proportion or --num_warmup_steps (--warmup_step), not both."
            )
        if not 0 <= proportion <= 1:
            raise FlagError(f"--warmup_proportion must be in [0, 1]. Received: {proportion}")
        steps = flag_values.num_train_steps or row.num_train_steps
        flag_values.num_warmup_steps = int(steps * proportion)
