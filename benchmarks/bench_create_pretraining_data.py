"""Benchmark create_pretraining_data: instances/s at seq 128 and 512, peak RSS vs corpus size.

A synthetic corpus is built from the real sentences in ../shared/data/corpus (shuffled into
documents, with words swapped between sentences so the text does not repeat exactly), or from
generated words when that folder is absent. A SentencePiece model is trained on it. Each
measurement runs in a fresh process, so its peak RSS is its own: `main` is the writing
process (it imports TensorFlow), `worker` the largest worker process as the workers report it
(getrusage(RUSAGE_SELF) in each). RUSAGE_CHILDREN is also printed but is not the workers':
importing TensorFlow forks a helper process while the parent already holds ~490 MB, and a
forked child's peak counts the parent's pages.

The reference point is the original script's ~700 instances/s at seq 128 (one process).

Usage:
    python benchmarks/bench_create_pretraining_data.py [--megabytes=4] [--num_workers=2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_CORPUS = REPO.parent / "shared" / "data" / "corpus"


def _sentence_pool(rng):
    """Real sentences when the shared corpus is present, else sentences of made-up words."""
    if SHARED_CORPUS.is_dir():
        text = " ".join(
            line
            for path in sorted(SHARED_CORPUS.iterdir())
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("<")
        )
        return [s for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) > 2]
    words = [
        "".join(rng.choice("etaoinshrdlucmfw") for _ in range(rng.randint(1, 9)))
        for _ in range(5000)
    ]
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) + "." for _ in range(2000)
    ]


def make_corpus(path: Path, megabytes: float, seed: int = 0) -> None:
    """Writes documents of 5-40 sentences (one per line, blank line between) up to a size."""
    rng = random.Random(seed)
    pool = _sentence_pool(rng)
    vocabulary = [w for s in pool for w in s.split()]
    target = int(megabytes * 1e6)
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            sentences = []
            for _ in range(rng.randint(5, 40)):
                words = rng.choice(pool).split()
                for _ in range(len(words) // 4):  # Vary the text: swap in words from elsewhere.
                    words[rng.randrange(len(words))] = rng.choice(vocabulary)
                sentences.append(" ".join(words))
            document = "\n".join(sentences) + "\n\n"
            f.write(document)
            written += len(document.encode())


def train_model(directory: Path, corpus_path: Path) -> str:
    import sentencepiece as spm

    prefix = directory / "bench_spm"
    spm.SentencePieceTrainer.train(
        input=str(corpus_path),
        model_prefix=str(prefix),
        vocab_size=8000,
        hard_vocab_limit=False,
        model_type="unigram",
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        input_sentence_size=200000,
        shuffle_input_sentence=True,
        minloglevel=2,
    )
    return str(prefix) + ".model"


def _child(args) -> None:
    """Runs one conversion in this (fresh) process and prints its figures as JSON."""
    from absl import logging

    from albert.data.create_pretraining_data import PretrainingDataConfig, create_pretraining_data
    from albert.data.pretraining import InstanceOptions

    logging.set_verbosity(logging.WARNING)
    config = PretrainingDataConfig(
        input_file=args.input,
        output_file=args.output,
        spm_model_file=args.model,
        num_workers=args.num_workers,
        num_output_shards=4,
        instance=InstanceOptions(
            max_seq_length=args.max_seq_length,
            max_predictions_per_seq=20,
            dupe_factor=args.dupe_factor,
        ),
    )
    summary = create_pretraining_data(config)
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    print(
        json.dumps(
            {
                "instances": summary.instances,
                "seconds": summary.seconds,
                "cpu_seconds": own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime,
                "main_mb": own.ru_maxrss / 1024,  # ru_maxrss is in KiB on Linux.
                "worker_mb": summary.worker_peak_rss_mb,
                "children_mb": children.ru_maxrss / 1024,
            }
        )
    )


def _measure(corpus, model, output, max_seq_length, dupe_factor, num_workers):
    command = [
        sys.executable,
        __file__,
        "--child",
        f"--input={corpus}",
        f"--output={output}",
        f"--model={model}",
        f"--max_seq_length={max_seq_length}",
        f"--dupe_factor={dupe_factor}",
        f"--num_workers={num_workers}",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall"] = time.perf_counter() - start
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=float, default=3.0, help="Small corpus size (MB).")
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--num_workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("input", "output", "model"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    parser.add_argument("--max_seq_length", type=int, default=128, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        small, large = tmp / "small.txt", tmp / "large.txt"
        make_corpus(small, args.megabytes)
        make_corpus(large, 10 * args.megabytes, seed=1)
        model = train_model(tmp, small)
        print(f"{args.num_workers} workers, 4 output shards, max_predictions_per_seq 20")
        print(
            f"{'corpus':>7} {'seq':>4} {'dupe':>4} {'instances':>10} {'inst/s':>7} {'wall s':>7} "
            f"{'CPU s':>6} {'inst/CPU-s':>10} {'main MB':>8} {'worker MB':>9} "
            f"{'CHILDREN MB':>11} {'load':>5}"
        )
        runs = [(small, 128, args.dupe_factor), (large, 128, args.dupe_factor)]
        runs += [(small, 512, args.dupe_factor), (large, 512, args.dupe_factor), (small, 128, 40)]
        results = {}
        for corpus, seq, dupe in runs:
            load = os.getloadavg()[0]
            r = _measure(corpus, model, tmp / "out" / "data", seq, dupe, args.num_workers)
            results[corpus, seq, dupe] = r
            print(
                f"{os.path.getsize(corpus) / 1e6:6.0f}M {seq:4d} {dupe:4d} {r['instances']:10d} "
                f"{r['instances'] / r['seconds']:7.0f} {r['wall']:7.1f} {r['cpu_seconds']:6.1f} "
                f"{r['instances'] / r['cpu_seconds']:10.0f} {r['main_mb']:8.0f} "
                f"{r['worker_mb']:9.0f} {r['children_mb']:11.0f} {load:5.1f}"
            )
        for seq in (128, 512):
            a, b = results[small, seq, args.dupe_factor], results[large, seq, args.dupe_factor]
            rate = (b["instances"] - a["instances"]) / (b["seconds"] - a["seconds"])
            print(f"seq {seq}: steady rate (large - small run, start-up cancels) {rate:.0f} inst/s")
        print(
            "inst/s: instances / seconds inside create_pretraining_data (worker start-up and the\n"
            "TensorFlow import included); wall: the whole process; CPU s: user + system of the\n"
            "process and its workers; inst/CPU-s: instances per CPU second (what one core does\n"
            "when the machine is shared); CHILDREN MB: RUSAGE_CHILDREN (see the docstring); load:\n"
            "1-minute load average before the run."
        )


if __name__ == "__main__":
    main()
