"""Creates ALBERT pretraining TFRecords (masked LM + sentence order) from text.

Input: one sentence per line with a blank line between documents, or WikiExtractor output.
The flags and defaults are the original `create_pretraining_data.py`'s (its --parallel and
--input_file_mode are accepted with no effect), plus --num_workers,
--num_output_shards, the shuffle's --temp_dir / --shuffle_bucket_mb / --delete_stale_shards,
and --beam_pipeline_options. Every instance of the corpus is shuffled globally, as the
original does in memory, here in bounded memory; see albert/data/create_pretraining_data.py
for the design and albert/data/beam_pipeline.py for running it on a cluster.

Example:
    python -m albert.create_pretraining_data --input_file='wiki/*/wiki_*,books.txt' \
        --output_file=data/pretrain --num_output_shards=16 --spm_model_file=30k-clean.model \
        --max_seq_length=512 --dupe_factor=40

The same on Apache Beam (Dataflow, Flink, Spark; the DirectRunner on one machine):
    ... --beam_pipeline_options="runner=DirectRunner,direct_num_workers=2"
"""

from absl import flags, logging

from albert.data.create_pretraining_data import (
    PretrainingDataConfig,
    create_pretraining_data,
)
from albert.data.pretraining import InstanceOptions
from albert.training import flags as training_flags

flags.DEFINE_string("input_file", None, "Comma-separated text files or globs.")
flags.DEFINE_string(
    "output_file",
    None,
    "Comma-separated output TFRecord files (or a prefix with --num_output_shards).",
)
flags.DEFINE_string("spm_model_file", None, "SentencePiece model (30k-clean.model).")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt, used when no --spm_model_file.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input text.")
flags.DEFINE_bool("do_whole_word_mask", True, "Mask whole words rather than single pieces.")
flags.DEFINE_bool("do_permutation", False, "The original's permutation option (not supported).")
flags.DEFINE_bool("favor_shorter_ngram", True, "p(n) proportional to 1/n (else reversed).")
flags.DEFINE_bool("random_next_sentence", False, "BERT's NSP negatives instead of SOP.")
flags.DEFINE_integer("max_seq_length", 512, "Tokens per instance, with [CLS] and 2 [SEP].")
flags.DEFINE_integer("ngram", 3, "Longest n-gram of words to mask.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Most masked tokens per instance.")
flags.DEFINE_integer("random_seed", 12345, "Seed of every draw.")
flags.DEFINE_integer("dupe_factor", 40, "Passes over the input, each masked differently.")
flags.DEFINE_float("masked_lm_prob", 0.15, "Fraction of tokens to mask.")
flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.")
flags.DEFINE_integer("num_workers", None, "Worker processes (default: every available core).")
flags.DEFINE_integer("num_output_shards", None, "Write this many files named from --output_file.")
flags.DEFINE_string(
    "temp_dir",
    None,
    "Local folder for the global shuffle's bucket files (about the output's size; gs:// with "
    "--beam_pipeline_options only). Default: a hidden folder beside the output, or the "
    "system's temporary folder for gs:// outputs.",
)
flags.DEFINE_integer(
    "shuffle_bucket_mb", 64, "Most MB one shuffle bucket holds: bounds the memory of the shuffle."
)
flags.DEFINE_bool(
    "delete_stale_shards",
    False,
    "Delete shards of an earlier run with another --num_output_shards (otherwise an error).",
)
flags.DEFINE_string(
    "beam_pipeline_options",
    None,
    "Run on Apache Beam with these comma-separated name=value options, e.g. "
    '"runner=DirectRunner,direct_num_workers=2" or "runner=DataflowRunner,project=P,'
    'region=R,temp_location=gs://..."; same output bytes as the default local processes.',
)
flags.DEFINE_enum(
    "input_file_mode",
    "r",
    ["r", "rb"],
    "The original's mode for opening inputs; both read UTF-8 text here (kept for its commands).",
)

flags.DEFINE_bool(
    "parallel",
    False,
    "The original's option to process each input file in its own process (into the output "
    "file at the same position); accepted, no effect: every run here reads its inputs with "
    "--num_workers processes and shuffles all instances together (kept for its commands).",
)

FLAGS = flags.FLAGS


def main(argv):
    del argv
    # A missing flag is one line and exit 2, as in the training scripts (absl's own check
    # prints a multi-line FATAL block).
    training_flags.require(FLAGS, "input_file", "output_file")
    config = PretrainingDataConfig(
        input_file=FLAGS.input_file,
        output_file=FLAGS.output_file,
        spm_model_file=FLAGS.spm_model_file,
        vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case,
        do_permutation=FLAGS.do_permutation,
        random_seed=FLAGS.random_seed,
        num_workers=FLAGS.num_workers,
        num_output_shards=FLAGS.num_output_shards,
        temp_dir=FLAGS.temp_dir,
        bucket_bytes=FLAGS.shuffle_bucket_mb << 20,
        delete_stale_shards=FLAGS.delete_stale_shards,
        beam_pipeline_options=FLAGS.beam_pipeline_options,
        instance=InstanceOptions(
            max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            masked_lm_prob=FLAGS.masked_lm_prob,
            short_seq_prob=FLAGS.short_seq_prob,
            ngram=FLAGS.ngram,
            favor_shorter_ngram=FLAGS.favor_shorter_ngram,
            do_whole_word_mask=FLAGS.do_whole_word_mask,
            random_next_sentence=FLAGS.random_next_sentence,
            dupe_factor=FLAGS.dupe_factor,
        ),
    )
    logging.set_verbosity(logging.INFO)
    create_pretraining_data(config)


def run():
    """Console-script entry point (`albert-create-data`): errors print as one line."""
    training_flags.run_main(main)


if __name__ == "__main__":
    run()
