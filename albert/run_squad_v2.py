r"""Fine-tunes ALBERT on SQuAD 2.0: `albert.run_squad` with --version_2_with_negative on.

The original's `python -m albert.run_squad_v2` module path; every flag is run_squad's (see
albert/run_squad.py), and --version_2_with_negative is fixed to True (a warning says so when
the command line sets it off). Example:

    python -m albert.run_squad_v2 \
        --train_file=squad/train-v2.0.json --predict_file=squad/dev-v2.0.json \
        --albert_config_file=albert_base/albert_config.json \
        --init_checkpoint=albert_base/model.ckpt-best \
        --spm_model_file=albert_base/30k-clean.model \
        --output_dir=out/squad2 --cached_dir=cache --max_seq_length=384 \
        --do_train --do_eval --do_predict
"""

from albert import run_squad
from albert.training import flags as training_flags

main = run_squad.main_for_version(True)


def run():
    """Console-script style entry point (`python -m albert.run_squad_v2`)."""
    training_flags.run_main(main)


if __name__ == "__main__":
    run()
