r"""Fine-tunes ALBERT on SQuAD v1.1 or v2.0; evaluates, writes predictions, exports.

The flags are the original run_squad.py's (--train_file, --predict_file, --doc_stride,
--max_query_length, --n_best_size, --max_answer_length, --start_n_top, --end_n_top,
--version_2_with_negative, --train_step, --warmup_step ...), plus the engine's --strategy,
--mixed_precision, --cached_dir (replacing the original's --train_feature_file and
--predict_feature_file: the features are cached there as TFRecords, never pickles) and
--export_dir. Unset learning rate, batch size, steps, warmup, max_seq_length and model
dropout come from the paper's table (SQuAD 1.1 or 2.0). Example (SQuAD 2.0):

    python -m albert.run_squad --version_2_with_negative \
        --train_file=squad/train-v2.0.json --predict_file=squad/dev-v2.0.json \
        --albert_config_file=albert_base/albert_config.json \
        --init_checkpoint=albert_base/model.ckpt-best \
        --spm_model_file=albert_base/30k-clean.model \
        --output_dir=out/squad2 --cached_dir=cache --do_train --do_eval --do_predict

It writes predictions.json, nbest_predictions.json and null_odds.json (v2.0), and with
--do_eval eval_results.txt (official EM/F1; v2.0 also HasAns/NoAns, the best thresholds and
the null threshold tuned on --predict_file). The same command runs as `albert-squad` (console
script) and, from a clone, `python run_squad.py`; `albert.run_squad_v1` and
`albert.run_squad_v2` are the original's per-version module names.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from albert import keras_version  # noqa: E402

# An old Keras: one line and exit 2 here, not the traceback of the model's import below.
keras_version.exit_if_too_old()

from absl import flags, logging  # noqa: E402

from albert.data.squad import SquadVersionError  # noqa: E402
from albert.tasks import squad  # noqa: E402
from albert.training import flags as training_flags  # noqa: E402

squad.define_squad_flags()


def main(argv):
    del argv
    squad.run_from_flags(flags.FLAGS)


def main_for_version(version_2_with_negative):
    """`main` with --version_2_with_negative fixed, whatever the command line says.

    The original has one script per SQuAD version (run_squad_v1.py, run_squad_v2.py) and
    neither reads the flag; `albert.run_squad_v1` and `albert.run_squad_v2` use this.

    Args:
        version_2_with_negative: False for SQuAD 1.1, True for SQuAD 2.0.

    Returns:
        A `main(argv)` for `training_flags.run_main`.
    """

    def main_fixed(argv):
        flag = flags.FLAGS["version_2_with_negative"]
        if flag.present and flag.value != version_2_with_negative:
            version = "2.0" if version_2_with_negative else "1.1"
            logging.warning(
                "--version_2_with_negative=%s is ignored: this command is SQuAD %s "
                "(python -m albert.run_squad reads the flag).",
                flag.value,
                version,
            )
        flags.FLAGS.version_2_with_negative = version_2_with_negative
        try:
            main(argv)
        except SquadVersionError as error:
            # The flag is ignored here: name the command that reads SQuAD 2.0 instead.
            raise SquadVersionError(
                error.input_file, "run it with python -m albert.run_squad_v2"
            ) from None

    return main_fixed


def run():
    """Console-script entry point (`albert-squad`)."""
    training_flags.run_main(main)


if __name__ == "__main__":
    run()
