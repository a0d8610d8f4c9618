"""The jobs on the training loop: pretraining, and fine-tuning tasks on one engine.

pretraining.py      the MLM + SOP job behind run_pretraining.py (`PretrainingTask`)
engine.py           `FineTuningTask` (the interface) and `run` (train, eval, predict, export)
classification.py   GLUE: every task, classification and STS-B regression (run_classifier.py)
squad.py            SQuAD 1.1 and 2.0 (run_squad.py)
race.py             RACE, multiple choice (run_race.py)
flags.py            flags shared by the fine-tuning scripts, declared once
hyperparameters.py  the paper's per-task hyperparameters, the defaults of unset flags
"""
