r"""Pretrains ALBERT (masked LM + sentence order) on TFRecords from create_pretraining_data.

The flags and defaults are the original's, plus --strategy, --mixed_precision and
--jit_compile. --albert_config_file takes a path or the name of a published config shipped
with the package (albert_base_v2, base_v2, ...). Example (one machine, its GPUs or CPU):

    python -m albert.run_pretraining --albert_config_file=albert_base_v2 \
        --input_file=data/*.tfrecord --output_dir=out --do_train --do_eval \
        --train_batch_size=256 --max_seq_length=128 --num_train_steps=10000

Resuming is automatic: rerun the same command and training continues from the last
checkpoint in --output_dir. The same command runs as `albert-pretrain` (console script) and,
from a clone, `python run_pretraining.py`.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from albert import keras_version  # noqa: E402

# An old Keras: one line and exit 2 here, not the traceback of the model's import below.
keras_version.exit_if_too_old()

from absl import flags, logging  # noqa: E402

from albert.tasks import pretraining  # noqa: E402
from albert.training import flags as training_flags  # noqa: E402

training_flags.define_pretraining_flags()


def main(argv):
    del argv
    if flags.FLAGS.masked_lm_budget:
        logging.warning(
            "--masked_lm_budget=%s has no effect: the original never finished online masking; "
            "the masked positions come from create_pretraining_data.",
            flags.FLAGS.masked_lm_budget,
        )
    pretraining.run_from_flags(flags.FLAGS)


def run():
    """Console-script entry point (`albert-pretrain`)."""
    training_flags.run_main(main)


if __name__ == "__main__":
    run()
