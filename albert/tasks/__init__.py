"""The jobs on the training loop: pretraining, and fine-tuning tasks on one engine.

pretraining.py      the MLM + SOP job behind run_pretraining.py (`PretrainingTask`)
engine.py           `FineTuningTask` (the interface) and `run` (train, eval, predict, export)
weights.py          the weights a fine-tuning run starts from and ends with
feature_files.py    feature files every input host reads (the engine's input on a pod)
classification.py   GLUE: every task, classification and STS-B regression (run_classifier.py)
glue_submission.py  GLUE's test-set files: test_results.tsv and the server's submission file
squad.py            SQuAD 1.1 and 2.0 (run_squad.py)
race.py             RACE, multiple choice (run_race.py)
flags.py            flags shared by the fine-tuning scripts, declared once, and
                    `setup_from_flags`: checks, table defaults, tokenizer, config, strategy
hyperparameters.py  the paper's per-task hyperparameters, the defaults of unset flags
"""

from albert.errors import AlbertError


class FineTuningError(AlbertError):
    """Weights or flags that cannot give the requested fine-tuning result."""
