r"""Converts an ALBERT checkpoint between the TF1, HF transformers and Keras formats.

The input format is detected. The config comes from `--albert_config_file`, or else from the
checkpoint (an HF directory's `config.json`, an `albert_config.json` beside a TF1 or Keras
checkpoint). A checkpoint without pretraining heads is written without them.

Usage:
    python -m albert.convert_checkpoint --input=albert_base/model.ckpt-best \
        --albert_config_file=albert_base/albert_config.json --output=albert_base_hf \
        --output_format=hf
"""

from __future__ import annotations

import sys

from absl import app, flags, logging

from albert.checkpoints import CheckpointError, load_checkpoint, read_config, save_checkpoint
from albert.config import AlbertConfig, ConfigError
from albert.modeling import AlbertPretrainer

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "albert_config_file",
    None,
    "The model's albert_config.json; optional when the input carries its config.",
)
flags.DEFINE_string(
    "input", None, "A TF1 checkpoint prefix or directory, an HF directory or Keras weights."
)
flags.DEFINE_string("output", None, "The directory to write the converted checkpoint into.")
flags.DEFINE_enum("output_format", None, ["tf1", "hf", "keras"], "The format to write.")


def convert(
    input_path: str, output: str, output_format: str, albert_config_file: str | None = None
) -> str:
    """Reads the checkpoint at `input_path` and writes it to `output` in `output_format`.

    Args:
        input_path: a TF1 prefix or directory, an HF directory or Keras weights.
        output: the directory to write.
        output_format: "tf1", "hf" or "keras".
        albert_config_file: the config; read from the checkpoint when None.

    Returns:
        What was written (see `albert.checkpoints.save_checkpoint`).

    Raises:
        CheckpointError: no checkpoint at `input_path`, no config, or a checkpoint that does
            not fit the config.
        ConfigError: an invalid config file.
    """
    if albert_config_file:
        config = AlbertConfig.from_json_file(albert_config_file)
    else:
        config = read_config(input_path)
        if config is None:
            raise CheckpointError(
                f"{input_path} has no config beside it; pass --albert_config_file."
            )
    model = AlbertPretrainer(config)
    result = load_checkpoint(model, input_path)
    # Heads the input lacks would be written with random values: write the encoder only.
    source = model.backbone if result.initialised else model
    written = save_checkpoint(source, output, output_format)
    logging.info("Wrote %s (%s).", written, output_format)
    return written


def main(argv):
    del argv  # unused
    try:
        convert(FLAGS.input, FLAGS.output, FLAGS.output_format, FLAGS.albert_config_file)
    except (CheckpointError, ConfigError) as e:
        print(f"convert_checkpoint: error: {e}", file=sys.stderr)
        return 1
    return 0


def run():
    """Console-script entry point (`albert-convert`)."""
    flags.mark_flags_as_required(["input", "output", "output_format"])
    app.run(main)


if __name__ == "__main__":
    run()
