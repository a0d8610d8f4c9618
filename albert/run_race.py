r"""Fine-tunes ALBERT on RACE; evaluates on dev, predicts the test split.

The flags are the original run_race.py's (--data_dir, --high_only, --middle_only,
--max_qa_length=128, --train_step, --warmup_step ...), plus the engine's --strategy,
--mixed_precision, --cached_dir and the rest. Unset learning rate, batch size, steps,
warmup, max_seq_length (512) and model dropout come from the paper's table. Example:

    python -m albert.run_race --data_dir=data \
        --albert_config_file=albert_base/albert_config.json \
        --init_checkpoint=albert_base/model.ckpt-best \
        --spm_model_file=albert_base/30k-clean.model \
        --output_dir=out/race --cached_dir=cache --do_train --do_eval --do_predict

--data_dir holds RACE/{train,dev,test}/{middle,high}/*.txt as released. It writes
eval_results.txt (dev accuracy overall, middle and high), predictions.json (test id ->
"A".."D") and predict_results.txt (test accuracies, the original's file name). The same
command runs as `albert-race` (console script) and, from a clone, `python run_race.py`.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from albert import keras_version  # noqa: E402

# An old Keras: one line and exit 2 here, not the traceback of the model's import below.
keras_version.exit_if_too_old()

from absl import flags  # noqa: E402

from albert.tasks import race  # noqa: E402
from albert.training import flags as training_flags  # noqa: E402

race.define_race_flags()


def main(argv):
    del argv
    race.run_from_flags(flags.FLAGS)


def run():
    """Console-script entry point (`albert-race`)."""
    training_flags.run_main(main)


if __name__ == "__main__":
    run()
