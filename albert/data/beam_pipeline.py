"""create_pretraining_data on Apache Beam: the same units, instances and shuffle, on a cluster.

`python -m albert.create_pretraining_data ... --beam_pipeline_options="runner=DirectRunner,
direct_num_workers=2"` (the TFDS convention: comma-separated `name=value` Beam options) runs
this pipeline instead of the local worker processes. It makes the same bytes as the local path
for the same flags and seed:

    input files -> units (per file, as `albert.data.corpus.read_units`) -> Reshuffle
      -> instances with their shuffle keys (the local worker's code) -> (bucket, (key, record))
      -> GroupByKey(bucket) -> one sorted TFRecord part file per bucket
      -> GroupByKey(shard) -> the shard: its parts concatenated in bucket order

TFRecord framing is per record, so concatenating sorted parts gives exactly the file the local
path writes record by record. Shards are written under hidden temporary names; the driver
renames them when the pipeline has succeeded, so a failed or cancelled job leaves existing
outputs as they were. Part files go to a hidden folder beside the outputs (or --temp_dir),
which every worker must be able to read: use gs:// outputs on Dataflow.

On Google Cloud (not run here: no cloud access from this project's machines):

    python -m albert.create_pretraining_data --input_file='gs://bucket/text/*' \\
        --output_file=gs://bucket/data/pretrain --num_output_shards=1024 \\
        --spm_model_file=gs://bucket/30k-clean.model ... \\
        --beam_pipeline_options="runner=DataflowRunner,project=my-project,region=us-central1,\\
temp_location=gs://bucket/tmp,requirements_file=requirements.txt"
"""

from __future__ import annotations

import dataclasses
import os

import apache_beam as beam
import tensorflow as tf
from absl import logging
from apache_beam.options.pipeline_options import PipelineOptions

from albert import fileio
from albert.data import corpus, shuffle

# What the readers count (albert.data.corpus.CorpusStats, less `files`), then the instances.
CORPUS_COUNTERS = tuple(
    field.name for field in dataclasses.fields(corpus.CorpusStats) if field.name != "files"
)
_COUNTERS = (
    *CORPUS_COUNTERS,
    "documents_used",
    "documents_skipped",
    "tokens",
    "instances",
    "label_ones",
    "masked_tokens",
)
_NAMESPACE = "albert.create_pretraining_data"


def parse_pipeline_options(text: str) -> list:
    """`"runner=DirectRunner,direct_num_workers=2"` -> `["--runner=DirectRunner", ...]`."""
    return [f"--{item.strip().lstrip('-')}" for item in text.split(",") if item.strip()]


def _read_units(path, unit_chars):
    """One input file -> its units of work (path, index in file, documents)."""
    stats = corpus.CorpusStats()
    for unit_index, documents in enumerate(corpus.read_units(path, stats, unit_chars)):
        yield path, unit_index, documents
    for name in CORPUS_COUNTERS:
        beam.metrics.Metrics.counter(_NAMESPACE, name).inc(getattr(stats, name))


class _MakeInstances(beam.DoFn):
    """A unit -> (bucket, (key, record)) for each of its instances (the local worker's code)."""

    def __init__(self, config, num_buckets):
        self.config = config
        self.num_buckets = num_buckets
        self.worker = None

    def setup(self):
        from albert.data.create_pretraining_data import _Worker

        self.worker = _Worker(self.config)

    def process(self, task):
        passes, counts = self.worker.process(task)
        for name, value in counts.items():
            if name in _COUNTERS:
                beam.metrics.Metrics.counter(_NAMESPACE, name).inc(int(value))
        for keys, records in passes:
            buckets = shuffle.bucket_of(keys, self.num_buckets).tolist()
            for bucket, key, record in zip(buckets, keys.tolist(), records, strict=True):
                yield bucket, (key, record)


def _write_part(bucket_entries, part_directory, per_shard):
    """(bucket, entries) -> (shard, (bucket, part file)): the bucket sorted, as TFRecords."""
    bucket, entries = bucket_entries
    path = os.path.join(part_directory, f"part-{bucket:06d}")
    with tf.io.TFRecordWriter(path) as writer:
        for _, record in shuffle.sort_entries(list(entries)):
            writer.write(record)
    return bucket // per_shard, (bucket, path)


def _write_shard(shard_parts, temporaries):
    """(shard, parts) -> the shard's temporary file: its parts concatenated in bucket order."""
    shard, parts = shard_parts
    with tf.io.gfile.GFile(temporaries[shard], "wb") as out:
        for _, path in sorted(parts):
            with tf.io.gfile.GFile(path, "rb") as part:
                out.write(part.read())
    return shard


def run_pipeline(config, inputs, outputs, per_shard, pipeline_options):
    """Runs the pipeline; returns ({counter: value}, temporary shard paths) on success.

    Shards that got no instance have no temporary file; the caller writes them empty.
    """
    parent = config.temp_dir or os.path.dirname(outputs[0]) or "."
    # `..albert-beam.tmp-<hex>.<pid>.<host>`: the parts of a launcher killed on this host (a
    # copy of the corpus's instances) are removed by the next run (`fileio`).
    parts_name = os.path.join(parent, ".albert-beam")
    fileio.remove_dead_temporaries(parts_name)
    part_directory = fileio.temporary_path(parts_name)
    tf.io.gfile.makedirs(part_directory)
    temporaries = [fileio.temporary_path(path) for path in outputs]
    for path in outputs:
        fileio.makedirs_for(path)
    num_buckets = per_shard * len(outputs)
    options = PipelineOptions(parse_pipeline_options(pipeline_options))
    logging.info("Running the Beam pipeline with options %s.", options.get_all_options(True))
    try:
        pipeline = beam.Pipeline(options=options)
        _ = (
            pipeline
            | "Files" >> beam.Create(inputs)
            | "Units" >> beam.FlatMap(_read_units, config.unit_chars)
            | "Spread" >> beam.Reshuffle()
            | "Instances" >> beam.ParDo(_MakeInstances(config, num_buckets))
            | "ByBucket" >> beam.GroupByKey()
            | "SortBucket" >> beam.Map(_write_part, part_directory, per_shard)
            | "ByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.Map(_write_shard, temporaries)
        )
        result = pipeline.run()
        result.wait_until_finish()
        counters = {name: 0 for name in _COUNTERS}
        for counter in result.metrics().query()["counters"]:
            if counter.key.metric.namespace == _NAMESPACE:
                counters[counter.key.metric.name] += counter.committed or counter.attempted or 0
    except BaseException:
        for temporary in temporaries:
            fileio.remove_quietly(temporary)
        raise
    finally:
        if tf.io.gfile.exists(part_directory):
            tf.io.gfile.rmtree(part_directory)
    return counters, temporaries
