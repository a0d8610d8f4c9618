"""Text files -> globally shuffled, sharded pretraining TFRecords: streaming, parallel, reproducible.

The work is split into units: blocks of whole documents of one input file, about
`UNIT_CHARS` characters each (see `albert.data.corpus`). The main process streams the input
and hands units to worker processes; a worker tokenizes each document once, makes
`dupe_factor` passes over the unit (each pass masked as one batch), encodes the records and
draws each instance's shuffle key. Then, as the original's global shuffle but in bounded
memory (`albert.data.shuffle`):

- Scatter: the main process appends each (key, record) to a temporary bucket file chosen by
  the key (buckets are sized from the corpus so one fits in memory: `bucket_bytes`).
- Gather: each output shard is its buckets, each sorted by key, written to a hidden temporary
  name; when every shard is complete they are renamed to their final names together.

So every window of every shard is a random sample of the corpus (with one output file too),
and the bytes depend only on the flags and the seed: not on --num_workers, the bucket count or
the engine (`albert.data.beam_pipeline` runs the same code on Apache Beam, for corpora beyond
one machine).

- Unit u of input file f draws from generators seeded with (random_seed, f as given, u), so a
  unit's instances do not depend on the other files.
- Memory is bounded by the units in flight (2 per worker), the scatter buffer and one bucket,
  never by the corpus: documents are streamed, and the random "other document" of SOP / NSP
  comes from the same unit. The temporary bucket files take about the output's size on disk.
- A failed or killed run leaves existing outputs as they were: nothing is written under a
  final name before every shard is complete. Shards of an earlier run with another shard
  count are an error (or deleted with `delete_stale_shards`), so a glob never mixes two runs.

Only the main process imports TensorFlow (for `tf.io.TFRecordWriter`); workers encode records
with `albert.data.example_proto`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import concurrent.futures.process
import dataclasses
import glob
import hashlib
import multiprocessing
import os
import random
import resource
import shutil
import socket
import tempfile
import time

import numpy as np
from absl import logging

from albert import fileio
from albert.data import corpus, shuffle
from albert.data.example_proto import ExampleEncoder
from albert.data.masking import MaskingVocabulary
from albert.data.pretraining import (
    InstanceOptions,
    PieceIds,
    create_instance_batches,
    tokenize_document,
)
from albert.errors import AlbertError
from albert.progress import Progress
from albert.tokenization import FullTokenizer, casing_mismatch


class PretrainingDataError(AlbertError):
    """Flags or input files that cannot produce pretraining data."""


@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig:
    """Everything `create_pretraining_data` needs; the flags of the top-level script.

    Attributes:
        input_file: comma-separated paths or globs of text files.
        output_file: comma-separated output paths; or one prefix with `num_output_shards`.
        spm_model_file, vocab_file, do_lower_case: the tokenizer (SentencePiece model, or a
            WordPiece vocab.txt when no model is given).
        do_permutation: the original's permutation LM option; not supported.
        random_seed: seeds every unit's generators.
        num_workers: worker processes; None for every available core.
        num_output_shards: write this many files `{output_file}-{i:05d}-of-{n:05d}`.
        instance: the flags that shape instances.
        unit_chars: characters per unit of work.
        progress_seconds: seconds between progress lines.
        temp_dir: a local folder for the shuffle's bucket files (default: a hidden folder
            beside the first output when it is local, else the system's temporary folder).
        bucket_bytes: the most a bucket should hold, which bounds the memory of the gather.
        delete_stale_shards: delete shards of an earlier run with another shard count
            (otherwise they are an error).
        beam_pipeline_options: run on Apache Beam with these comma-separated `name=value`
            options (see `albert.data.beam_pipeline`) instead of local worker processes.
    """

    input_file: str
    output_file: str
    spm_model_file: str | None = None
    vocab_file: str | None = None
    do_lower_case: bool = True
    do_permutation: bool = False
    random_seed: int = 12345
    num_workers: int | None = None
    num_output_shards: int | None = None
    instance: InstanceOptions = InstanceOptions()
    unit_chars: int = corpus.UNIT_CHARS
    progress_seconds: float = 30.0
    temp_dir: str | None = None
    bucket_bytes: int = shuffle.DEFAULT_BUCKET_BYTES
    delete_stale_shards: bool = False
    beam_pipeline_options: str | None = None


@dataclasses.dataclass
class Summary:
    """Counts of one run (corpus counts come from `albert.data.corpus.CorpusStats`)."""

    corpus: corpus.CorpusStats = dataclasses.field(default_factory=corpus.CorpusStats)
    documents_used: int = 0
    documents_skipped: int = 0  # Fewer than two sentences with tokens.
    tokens: int = 0
    instances: int = 0
    label_ones: int = 0  # Swapped (SOP) or random B (NSP).
    masked_tokens: int = 0
    worker_peak_rss_mb: float = 0.0  # The largest worker's peak resident memory.
    seconds: float = 0.0
    shuffle_seconds: float = 0.0  # The gather: reading, sorting and writing the buckets.
    buckets: int = 0
    output_files: list = dataclasses.field(default_factory=list)

    def add_unit(self, counts: dict) -> None:
        """Adds one unit's counts (the peak memory is a maximum, the rest are sums)."""
        for key, value in counts.items():
            combine = max if key == "worker_peak_rss_mb" else sum
            setattr(self, key, combine((getattr(self, key), value)))

    def lines(self) -> list:
        """Human-readable summary lines."""
        c = self.corpus
        rate = self.instances / max(self.seconds, 1e-9)
        return [
            f"Read {c.files} files ({c.empty_files} empty), {c.lines} lines, {c.documents} documents.",
            f"Used {self.documents_used} documents ({self.tokens} tokens); skipped "
            f"{self.documents_skipped} with fewer than 2 sentences.",
            f"Invalid UTF-8 lines (replaced with U+FFFD): {c.invalid_utf8_lines}; overlong lines "
            f"cut: {c.long_lines}; overlong documents cut: {c.long_documents}; lines with CR "
            f"line endings inside (read as one line; convert with tr '\\r' '\\n'): {c.cr_lines}.",
            f"Wrote {self.instances} instances to {len(self.output_files)} files in "
            f"{self.seconds:.1f} s ({rate:.0f} instances/s); label 1 (swapped or random B): "
            f"{self.label_ones}; masked tokens: {self.masked_tokens}.",
            f"Global shuffle: {self.buckets} buckets, gathered in {self.shuffle_seconds:.1f} s.",
            "Peak memory: "
            + (
                f"largest worker {self.worker_peak_rss_mb:.0f} MB, "
                if self.worker_peak_rss_mb
                else ""
            )
            + f"this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB.",
        ]


def expand_input_files(input_file: str) -> list:
    """Comma-separated paths / globs -> sorted unique files (each pattern's matches in order)."""
    files = []
    for pattern in (p.strip() for p in input_file.split(",")):
        if not pattern:
            continue
        matched = corpus.glob_files(pattern)
        if not matched:
            raise PretrainingDataError(f"--input_file pattern {pattern!r} matches no file.")
        files.extend(m for m in matched if m not in files)
    if not files:
        raise PretrainingDataError("--input_file is empty; pass text files or globs.")
    return files


def output_paths(output_file: str, num_output_shards: int | None) -> list:
    """The output files: the comma list, or `num_output_shards` names from one prefix."""
    paths = [p.strip() for p in output_file.split(",") if p.strip()]
    if not paths:
        raise PretrainingDataError("--output_file is empty; pass a path for the TFRecords.")
    if num_output_shards is None:
        # Two shards written to one path would lose one of them.
        seen = set()
        for path in paths:
            if os.path.abspath(path) in seen:
                raise PretrainingDataError(f"--output_file names {path} twice; list each once.")
            seen.add(os.path.abspath(path))
        return paths
    if num_output_shards < 1:
        raise PretrainingDataError(f"--num_output_shards must be >= 1; got {num_output_shards}.")
    if len(paths) > 1:
        raise PretrainingDataError(
            "Pass either several --output_file paths or --num_output_shards, not both."
        )
    n = num_output_shards
    return [f"{paths[0]}-{i:05d}-of-{n:05d}" for i in range(n)]


def validate(config: PretrainingDataConfig) -> tuple:
    """Checks the flags and files; returns (input files, output files)."""
    if config.do_permutation:
        raise PretrainingDataError(
            "--do_permutation is not supported (the released ALBERT models were trained "
            "without it); leave it False."
        )
    if config.num_workers is not None and config.num_workers < 1:
        raise PretrainingDataError(f"--num_workers must be >= 1; got {config.num_workers}.")
    if config.bucket_bytes < 1 << 20:
        raise PretrainingDataError(
            f"--shuffle_bucket_mb must be >= 1; got {config.bucket_bytes / (1 << 20):g}."
        )
    if config.temp_dir and fileio.is_remote(config.temp_dir) and not config.beam_pipeline_options:
        # The local engine appends to bucket files with `open`: a gs:// folder would become a
        # local folder named "gs:" in the working directory, holding the output's size.
        # Left out, the buckets go where `_bucket_parent` puts them for this output.
        first_output = config.output_file.split(",")[0].strip()
        default = (
            "the system's temporary folder"
            if fileio.is_remote(first_output)
            else "a hidden folder beside --output_file"
        )
        raise PretrainingDataError(
            f"--temp_dir must be a local folder without --beam_pipeline_options; got "
            f"{config.temp_dir!r} (leave it out to put the bucket files in {default})."
        )
    config.instance.validate()
    inputs = expand_input_files(config.input_file)
    for path in inputs:
        try:
            corpus.check_text_file(path)
        except corpus.CorpusError as e:
            raise PretrainingDataError(str(e)) from None
    outputs = output_paths(config.output_file, config.num_output_shards)
    clashes = {os.path.abspath(p) for p in inputs} & {os.path.abspath(p) for p in outputs}
    if clashes:
        raise PretrainingDataError(f"--output_file {sorted(clashes)[0]!r} is also an input file.")
    return inputs, outputs


def stale_shards(output_file: str, outputs: list) -> list:
    """Files named like shards of `output_file` (`prefix-NNNNN-of-NNNNN`) that are not ours."""
    import tensorflow as tf

    prefix = output_file.split(",")[0].strip()
    pattern = f"{prefix}-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]"
    return sorted(set(tf.io.gfile.glob(pattern)) - set(outputs))


def _check_stale_shards(config, outputs):
    """Shards of an earlier run with another count would be globbed with ours: refuse them."""
    if config.num_output_shards is None:
        return []
    stale = stale_shards(config.output_file, outputs)
    if stale and not config.delete_stale_shards:
        raise PretrainingDataError(
            f"--output_file {config.output_file!r} already has {len(stale)} shards of an "
            f"earlier run with another --num_output_shards (e.g. {stale[0]}); a glob would "
            "train on both. Delete them, or pass --delete_stale_shards."
        )
    return stale


def available_cores() -> int:
    """The cores this process may run on; the machine's where the OS has no affinity (macOS)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def unit_seed(random_seed: int, path: str, unit_index: int) -> int:
    """A 128-bit seed for one unit of work, from the flag seed, its file and its position."""
    digest = hashlib.sha256(f"{random_seed}\0{path}\0{unit_index}".encode()).digest()
    return int.from_bytes(digest[:16], "little")


class _Worker:
    """Per-process state: the tokenizer and the encoder, built once."""

    def __init__(self, config: PretrainingDataConfig):
        self.config = config
        self.tokenizer = FullTokenizer(
            vocab_file=config.vocab_file,
            do_lower_case=config.do_lower_case,
            spm_model_file=config.spm_model_file,
        )
        self.piece_ids = PieceIds(self.tokenizer)
        self.vocab = MaskingVocabulary(self.tokenizer.vocab, wordpiece=not config.spm_model_file)
        options = config.instance
        self.encoder = ExampleEncoder(
            options.max_seq_length, options.max_predictions_per_seq, self.vocab.size
        )

    def process(self, task):
        """(path, unit index in file, documents as sentence lists) -> (passes, counts).

        Each pass is (shuffle keys uint64 [M], M serialized records).
        """
        path, unit_index, raw_documents = task
        counts = collections.Counter(documents_used=0, documents_skipped=0)
        documents = []
        for sentences in raw_documents:
            document = tokenize_document(sentences, self.tokenizer, self.piece_ids)
            if document is None or len(document.bounds) < 3:
                counts["documents_skipped"] += 1
                continue
            documents.append(document)
            counts["documents_used"] += 1
            counts["tokens"] += len(document.ids)
        seed = unit_seed(self.config.random_seed, path, unit_index)
        rng, np_rng = random.Random(seed), np.random.default_rng(seed)
        passes = []
        for dupe, batch in enumerate(
            create_instance_batches(documents, self.config.instance, self.vocab, rng, np_rng)
        ):
            records = self.encoder.encode_batch(batch)
            keys = shuffle.instance_keys(
                self.config.random_seed, path, unit_index, dupe, len(records)
            )
            passes.append((keys, records))
            counts["instances"] += len(batch.lengths)
            counts["label_ones"] += int(batch.next_sentence_labels.sum())
            counts["masked_tokens"] += len(batch.masked_lm_positions)
        # ru_maxrss is in KiB on Linux.
        counts["worker_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return passes, dict(counts)


_worker = None
_worker_error = None


def _init_worker(config):
    # An initializer that raises kills its process, and the pool starts another that fails the
    # same way, forever: the run would hang. Keep the error; the first unit raises it.
    global _worker, _worker_error
    try:
        _worker = _Worker(config)
    except Exception as error:
        _worker_error = error


def _process_unit(task):
    if _worker_error is not None:
        raise _worker_error
    return _worker.process(task)


class _UnitRunner:
    """Runs units in spawned worker processes (inline for one worker), results in task order.

    Workers are spawned (fresh interpreters): they never carry the TensorFlow that the main
    process imports to write.
    """

    def __init__(self, config, num_workers, worker):
        self.num_workers = num_workers
        self.pool = None
        self.worker = None
        if num_workers == 1:
            self.worker = worker
        else:
            # Spawned, not forked: the parent may already run TensorFlow threads. A process
            # pool of concurrent.futures, not multiprocessing.Pool: a worker that dies (killed
            # for memory) breaks it and fails the run, where a Pool replaced the worker, lost
            # its unit and waited for that unit's result forever.
            self.pool = concurrent.futures.ProcessPoolExecutor(
                num_workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(config,),
            )

    def results(self, tasks):
        """Yields each task's result in task order; at most 2 tasks per worker in flight.

        Raises:
            PretrainingDataError: a worker process ended during a unit.
        """
        if self.worker is not None:
            yield from map(self.worker.process, tasks)
            return
        pending = collections.deque()
        try:
            for task in tasks:
                pending.append(self.pool.submit(_process_unit, task))
                if len(pending) >= 2 * self.num_workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except concurrent.futures.process.BrokenProcessPool:
            raise PretrainingDataError(
                "A worker process ended during a unit of work (killed, most often for lack of "
                f"memory); pass a lower --num_workers (this run had {self.num_workers})."
            ) from None

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def _tasks(input_files, stats, unit_chars):
    for path in input_files:
        for unit_index, documents in enumerate(corpus.read_units(path, stats, unit_chars)):
            yield path, unit_index, documents


def _bucket_parent(config, outputs):
    """Where bucket folders go (see PretrainingDataConfig.temp_dir)."""
    if config.temp_dir:
        return config.temp_dir
    if not fileio.is_remote(outputs[0]):
        return os.path.dirname(os.path.abspath(outputs[0]))
    return tempfile.gettempdir()


def _bucket_directory(config, outputs):
    """A fresh local folder for the bucket files, named after this host and process.

    Folders that killed runs of this host left beside it (their process is gone) are removed,
    and so is one with our own pid: a killed run in a container restarted since (same host
    name, same pid), whose bucket files would otherwise be appended to.
    """
    parent = _bucket_parent(config, outputs)
    os.makedirs(parent, exist_ok=True)
    host = socket.gethostname()
    for leftover in glob.glob(os.path.join(parent, f".albert-shuffle-{glob.escape(host)}-*")):
        pid = leftover.rsplit("-", 1)[-1]
        if pid.isdigit() and (int(pid) == os.getpid() or not fileio.process_is_alive(pid)):
            shutil.rmtree(leftover, ignore_errors=True)
    return os.path.join(parent, f".albert-shuffle-{host}-{os.getpid()}")


def _scatter(config, runner, tasks, bucket_writer, summary, start):
    """Makes every instance and appends it to its bucket; returns the last progress time."""
    last_log = start
    for passes, counts in runner.results(tasks):
        for keys, records in passes:
            bucket_writer.add(keys, records)
        summary.add_unit(counts)
        if time.perf_counter() - last_log >= config.progress_seconds:
            last_log = time.perf_counter()
            _log_progress(summary, last_log - start)
    bucket_writer.flush()


def _gather(bucket_writer, per_shard, outputs, progress_seconds):
    """Writes each shard from its sorted buckets under a temporary name; returns the names."""
    import tensorflow as tf  # Only the writing process needs TensorFlow.

    temporaries = []
    # One output file of a whole dump is gigabytes: a minute or more after the last line.
    total = len(outputs) * per_shard
    progress = Progress("Global shuffle: gathered", total, "buckets", progress_seconds)
    try:
        for shard, path in enumerate(outputs):
            fileio.makedirs_for(path)
            temporaries.append(fileio.temporary_path(path))
            with tf.io.TFRecordWriter(temporaries[-1]) as writer:
                for bucket in range(shard * per_shard, (shard + 1) * per_shard):
                    bucket_path = bucket_writer.path(bucket)
                    for _, record in shuffle.sort_entries(shuffle.read_bucket(bucket_path)):
                        writer.write(record)
                    if os.path.exists(bucket_path):
                        os.remove(bucket_path)  # Disk is freed as the gather goes.
                    progress.update()
            logging.info("Wrote shard %d of %d: %s", shard + 1, len(outputs), path)
    except BaseException:
        for temporary in temporaries:
            fileio.remove_quietly(temporary)
        raise
    return temporaries


def _commit(temporaries, outputs, stale):
    """Renames the complete shards to their final names; deletes stale shards if asked."""
    import tensorflow as tf

    for temporary, path in zip(temporaries, outputs, strict=True):
        tf.io.gfile.rename(temporary, path, overwrite=True)
    for path in stale:
        tf.io.gfile.remove(path)
        logging.info("Deleted stale shard %s.", path)


def create_pretraining_data(config: PretrainingDataConfig) -> Summary:
    """Runs the whole conversion; logs progress and the summary.

    Worker processes are spawned, so a program that calls this must guard its entry point
    with `if __name__ == "__main__":` (the top-level script does).

    Args:
        config: the flags.

    Returns:
        The run's Summary.

    Raises:
        PretrainingDataError: bad flags, no input, or no instance could be made.
        albert.tokenization.TokenizerError: the model or vocab file is missing or unreadable.
    """
    input_files, output_files = validate(config)
    worker = _Worker(config)  # Fails here, once, on a bad model / vocab file.
    mismatch = casing_mismatch(worker.tokenizer)
    if mismatch:
        logging.warning(mismatch)
    summary = Summary(output_files=output_files)
    input_bytes = sum(corpus.file_size(p) for p in input_files)
    per_shard = shuffle.buckets_per_shard(
        input_bytes, config.instance.dupe_factor, len(output_files), config.bucket_bytes
    )
    summary.buckets = per_shard * len(output_files)
    logging.info(
        "Creating pretraining data from %d files (%.1f MB) %s; shuffling through %d buckets.",
        len(input_files),
        input_bytes / 1e6,
        "on Apache Beam"
        if config.beam_pipeline_options
        else f"with {config.num_workers or available_cores()} workers",
        summary.buckets,
    )
    start = time.perf_counter()
    if config.beam_pipeline_options:
        _create_with_beam(config, input_files, output_files, per_shard, summary)
    else:
        _create_locally(config, input_files, output_files, per_shard, summary, worker, start)
    summary.seconds = time.perf_counter() - start
    for line in summary.lines():
        logging.info(line)
    return summary


def _no_instance_error(config):
    return PretrainingDataError(
        f"No instance could be made from --input_file {config.input_file!r}: every document "
        "is empty or has fewer than 2 sentences (expected one sentence per line, a blank line "
        "between documents, or WikiExtractor <doc> blocks)."
    )


def _remove_leftovers(output_files):
    """Deletes the temporary shards that killed runs of either engine left beside the outputs
    (any writer's: two runs writing the same outputs at once would clash anyway)."""
    for path in output_files:
        for leftover in fileio.leftover_temporaries(path):
            fileio.remove_quietly(leftover)


def _create_locally(config, input_files, output_files, per_shard, summary, worker, start):
    """The default engine: worker processes on this machine, buckets on local disk."""
    num_workers = config.num_workers or available_cores()
    tasks = _tasks(input_files, summary.corpus, config.unit_chars)
    runner = _UnitRunner(config, num_workers, worker)
    bucket_directory = None
    try:
        stale = _check_stale_shards(config, output_files)
        _remove_leftovers(output_files)
        bucket_directory = _bucket_directory(config, output_files)
        bucket_writer = shuffle.BucketWriter(bucket_directory, summary.buckets)
        _scatter(config, runner, tasks, bucket_writer, summary, start)
        runner.close()
        if summary.instances == 0:
            raise _no_instance_error(config)
        gather_start = time.perf_counter()
        temporaries = _gather(bucket_writer, per_shard, output_files, config.progress_seconds)
        _commit(temporaries, output_files, stale)
        summary.shuffle_seconds = time.perf_counter() - gather_start
    finally:
        runner.close()
        if bucket_directory:
            shutil.rmtree(bucket_directory, ignore_errors=True)


def _create_with_beam(config, input_files, output_files, per_shard, summary):
    """The Apache Beam engine (`albert.data.beam_pipeline`): same bytes as the local one."""
    try:
        from albert.data import beam_pipeline
    except ImportError as e:
        raise PretrainingDataError(
            f"--beam_pipeline_options needs Apache Beam ({e}); install it with "
            "`pip install apache-beam` (or `pip install .[beam]`)."
        ) from None
    stale = _check_stale_shards(config, output_files)
    _remove_leftovers(output_files)
    counters, temporaries = beam_pipeline.run_pipeline(
        config, input_files, output_files, per_shard, config.beam_pipeline_options
    )
    summary.corpus.files = len(input_files)
    for name in beam_pipeline.CORPUS_COUNTERS:
        setattr(summary.corpus, name, counters.pop(name))
    for name, value in counters.items():
        setattr(summary, name, value)
    try:
        if summary.instances == 0:
            raise _no_instance_error(config)
        import tensorflow as tf

        for temporary in temporaries:
            if not tf.io.gfile.exists(temporary):  # A shard that got no instance.
                tf.io.gfile.GFile(temporary, "wb").close()
        _commit(temporaries, output_files, stale)
    except BaseException:
        for temporary in temporaries:
            fileio.remove_quietly(temporary)
        raise


def _log_progress(summary, seconds):
    logging.info(
        "%d documents (%.0f/s), %d instances (%.0f/s), %.0f s.",
        summary.corpus.documents,
        summary.corpus.documents / seconds,
        summary.instances,
        summary.instances / seconds,
        seconds,
    )
