r"""Fine-tunes ALBERT on SQuAD 1.1: `albert.run_squad` with --version_2_with_negative off.

The original's `python -m albert.run_squad_v1` module path; every flag is run_squad's (see
albert/run_squad.py), and --version_2_with_negative is fixed to False (a warning says so when
the command line sets it). Example:

    python -m albert.run_squad_v1 \
        --train_file=squad/train-v1.1.json --predict_file=squad/dev-v1.1.json \
        --albert_config_file=albert_base/albert_config.json \
        --init_checkpoint=albert_base/model.ckpt-best \
        --spm_model_file=albert_base/30k-clean.model \
        --output_dir=out/squad1 --cached_dir=cache --max_seq_length=384 \
        --do_train --do_eval --do_predict
"""

from albert import run_squad
from albert.training import flags as training_flags

main = run_squad.main_for_version(False)


def run():
    """Console-script style entry point (`python -m albert.run_squad_v1`)."""
    training_flags.run_main(main)


if __name__ == "__main__":
    run()
