"""Text files -> sharded pretraining TFRecords: streaming, parallel and reproducible.

The work is split into units: blocks of whole documents of one input file, about
`UNIT_CHARS` characters each (see `albert.data.corpus`). The main process streams the input
and hands units to worker processes; a worker tokenizes each document once, makes
`dupe_factor` passes over the unit (each pass shuffled and masked as one batch) and returns
the encoded records. The main process writes them in unit order:

- Unit u of input file f draws from generators seeded with (random_seed, f as given, u), so
  the output files are byte-identical whatever --num_workers is, and a unit's instances do
  not depend on the other files.
- Pass d of the unit with global index g goes to output shard (g * dupe_factor + d) mod the
  number of shards: the shards fill evenly and the dupes of a document spread over shards.
- Memory is bounded by the units in flight (2 per worker), never by the corpus: documents are
  streamed, and the random "other document" of SOP / NSP comes from the same unit.

Only the main process imports TensorFlow (for `tf.io.TFRecordWriter`); workers encode records
with `albert.data.example_proto`.

Fanning out over many machines (a Wikipedia + BookCorpus sized corpus, ~16 GB of text):
    1. Split the text into many files of ~100 MB-1 GB (WikiExtractor already writes
       `AA/wiki_00` ...; `split -C 500M books.txt books_` keeps lines whole). A document never
       spans files. Inputs are read from local disk: copy each machine's slice there first.
    2. Give each machine its own slice of the files and its own output prefix, with the same
       flags and seed everywhere, e.g. on machine K of N (K = 0..N-1):
           FILES=$(ls text/* | awk -v n=$N -v k=$K '(NR - 1) % n == k' | paste -sd, -)
           python create_pretraining_data.py --input_file="$FILES" \\
               --output_file=gs://bucket/data/part-$K --num_output_shards=64 ...
       Each machine uses all its cores (--num_workers defaults to them); outputs may be on
       GCS (tf.io.TFRecordWriter writes there).
    3. Train on every shard: run_pretraining.py --input_file='gs://bucket/data/part-*'.
    A unit's instances depend only on its file path (as given), its position in the file, the
    seed and the flags, so rerunning one machine's slice reproduces its shards exactly.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import hashlib
import multiprocessing
import os
import random
import resource
import time

import numpy as np
from absl import logging

from albert.data import corpus
from albert.data.example_proto import ExampleEncoder
from albert.data.masking import MaskingVocabulary, VocabularyError
from albert.data.pretraining import (
    InstanceOptions,
    InstanceOptionsError,
    PieceIds,
    create_instance_batches,
    tokenize_document,
)
from albert.errors import AlbertError
from albert.tokenization import FullTokenizer, TokenizerError


class PretrainingDataError(AlbertError):
    """Flags or input files that cannot produce pretraining data."""


# Errors that mean the user passed something wrong; scripts print them as one line.
USER_ERRORS = (PretrainingDataError, InstanceOptionsError, VocabularyError, TokenizerError)


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
            f"cut: {c.long_lines}; overlong documents cut: {c.long_documents}.",
            f"Wrote {self.instances} instances to {len(self.output_files)} files in "
            f"{self.seconds:.1f} s ({rate:.0f} instances/s); label 1 (swapped or random B): "
            f"{self.label_ones}; masked tokens: {self.masked_tokens}.",
            f"Peak memory: largest worker {self.worker_peak_rss_mb:.0f} MB, this process "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB.",
        ]


def expand_input_files(input_file: str) -> list:
    """Comma-separated paths / globs -> sorted unique files (each pattern's matches in order)."""
    files = []
    for pattern in (p.strip() for p in input_file.split(",")):
        if not pattern:
            continue
        matched = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
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
    config.instance.validate()
    inputs = expand_input_files(config.input_file)
    outputs = output_paths(config.output_file, config.num_output_shards)
    clashes = {os.path.abspath(p) for p in inputs} & {os.path.abspath(p) for p in outputs}
    if clashes:
        raise PretrainingDataError(f"--output_file {sorted(clashes)[0]!r} is also an input file.")
    return inputs, outputs


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
        """(path, unit index in file, documents as sentence lists) -> (records per pass, counts)."""
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
        for batch in create_instance_batches(
            documents, self.config.instance, self.vocab, rng, np_rng
        ):
            passes.append(self.encoder.encode_batch(batch))
            counts["instances"] += len(batch.lengths)
            counts["label_ones"] += int(batch.next_sentence_labels.sum())
            counts["masked_tokens"] += len(batch.masked_lm_positions)
        # ru_maxrss is in KiB on Linux.
        counts["worker_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return passes, dict(counts)


_worker = None


def _init_worker(config):
    global _worker
    _worker = _Worker(config)


def _process_unit(task):
    return _worker.process(task)


class _UnitRunner:
    """Runs units in spawned worker processes (inline for one worker), results in task order.

    Workers start here, before the main process imports TensorFlow, so they never carry it.
    """

    def __init__(self, config, num_workers, worker):
        self.num_workers = num_workers
        self.pool = None
        self.worker = None
        if num_workers == 1:
            self.worker = worker
        else:
            # Spawned, not forked: the parent may already run TensorFlow threads.
            context = multiprocessing.get_context("spawn")
            self.pool = context.Pool(num_workers, initializer=_init_worker, initargs=(config,))

    def results(self, tasks):
        """Yields each task's result in task order; at most 2 tasks per worker in flight."""
        if self.worker is not None:
            yield from map(self.worker.process, tasks)
            return
        pending = collections.deque()
        for task in tasks:
            pending.append(self.pool.apply_async(_process_unit, (task,)))
            if len(pending) >= 2 * self.num_workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()

    def close(self):
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()


def _tasks(input_files, stats, unit_chars):
    for path in input_files:
        for unit_index, documents in enumerate(corpus.read_units(path, stats, unit_chars)):
            yield path, unit_index, documents


def _open_writers(paths):
    import tensorflow as tf  # Only the writing process needs TensorFlow.

    for path in paths:
        if os.path.dirname(path):
            tf.io.gfile.makedirs(os.path.dirname(path))
    return [tf.io.TFRecordWriter(path) for path in paths]


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
    num_workers = config.num_workers or len(os.sched_getaffinity(0))
    summary = Summary(output_files=output_files)
    logging.info(
        "Creating pretraining data from %d files with %d workers.", len(input_files), num_workers
    )
    start = last_log = time.perf_counter()
    tasks = _tasks(input_files, summary.corpus, config.unit_chars)
    runner = _UnitRunner(config, num_workers, worker)
    writers = []
    try:
        writers = _open_writers(output_files)
        dupe_factor = config.instance.dupe_factor
        for unit_number, (passes, counts) in enumerate(runner.results(tasks)):
            for dupe, records in enumerate(passes):
                writer = writers[(unit_number * dupe_factor + dupe) % len(writers)]
                for record in records:
                    writer.write(record)
            summary.add_unit(counts)
            if time.perf_counter() - last_log >= config.progress_seconds:
                last_log = time.perf_counter()
                _log_progress(summary, last_log - start)
    finally:
        runner.close()
        for writer in writers:
            writer.close()
    summary.seconds = time.perf_counter() - start
    for line in summary.lines():
        logging.info(line)
    if summary.instances == 0:
        raise PretrainingDataError(
            f"No instance could be made from --input_file {config.input_file!r}: every document "
            "is empty or has fewer than 2 sentences (expected one sentence per line, a blank "
            "line between documents, or WikiExtractor <doc> blocks)."
        )
    return summary


def _log_progress(summary, seconds):
    logging.info(
        "%d documents (%.0f/s), %d instances (%.0f/s), %.0f s.",
        summary.corpus.documents,
        summary.corpus.documents / seconds,
        summary.instances,
        summary.instances / seconds,
        seconds,
    )
