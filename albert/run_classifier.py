r"""Fine-tunes ALBERT on a GLUE task; evaluates, predicts the test set, exports a SavedModel.

The flags are the original run_classifier.py's (--train_step and --warmup_step included),
plus --strategy, --mixed_precision, --cached_dir and --export_dir. The learning rate, batch
size, steps, warmup, max_seq_length and model dropout not given on the command line come
from the paper's table for the task. Example (MRPC, then the test predictions):

    python -m albert.run_classifier --task_name=mrpc --data_dir=glue_data \
        --albert_config_file=albert_base/albert_config.json \
        --init_checkpoint=albert_base/model.ckpt-best \
        --spm_model_file=albert_base/30k-clean.model \
        --output_dir=out/mrpc --cached_dir=cache --max_seq_length=128 \
        --do_train --do_eval --do_predict

AX uses an MNLI model: `--task_name=ax --do_predict --init_checkpoint=out/mnli ...`.
Rerunning the same command resumes from the last checkpoint in --output_dir. The same
command runs as `albert-classify` (console script) and, from a clone, `python run_classifier.py`.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from albert import keras_version  # noqa: E402

# An old Keras: one line and exit 2 here, not the traceback of the model's import below.
keras_version.exit_if_too_old()

from absl import flags  # noqa: E402

from albert.tasks import classification  # noqa: E402
from albert.training import flags as training_flags  # noqa: E402

classification.define_classifier_flags()


def main(argv):
    del argv
    classification.run_from_flags(flags.FLAGS)


def run():
    """Console-script entry point (`albert-classify`)."""
    training_flags.run_main(main)


if __name__ == "__main__":
    run()
