"""Benchmark create_pretraining_data: instances/s, the shuffle's cost, order quality, peak RSS.

A synthetic corpus is built from the real sentences in ../shared/data/corpus (shuffled into
documents, with words swapped between sentences so the text does not repeat exactly), or from
generated words when that folder is absent. A SentencePiece model is trained on it. Each
measurement runs in a fresh process, so its peak RSS is its own: `main` is the writing
process (it imports TensorFlow), `worker` the largest worker process as the workers report it
(getrusage(RUSAGE_SELF) in each). RUSAGE_CHILDREN is not used: it is not the workers':
importing TensorFlow forks a helper process while the parent already holds ~490 MB, and a
forked child's peak counts the parent's pages.

The reference point is the original script's steady rate at seq 128 (one process; it cannot
run here, TF 1.15 has no wheel for this Python): ~700 instances/s on a 2-core Zen 3 and
~960/s on a 2-core Zen 5 (avx512_bf16), as measured for the project's issues. The target is
10x that.

Order quality (issue: globally shuffled data): in windows of 256 consecutive records of each
shard of the small seq-128 run, the fraction of record pairs sharing an 8-gram of source
tokens, against a uniformly shuffled copy of the same records (the original's statistics);
within 2x is the target.

Usage:
    python benchmarks/bench_create_pretraining_data.py [--megabytes=3] [--scale=30] [--num_workers=2]
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
    quality = {}
    if args.order_quality:
        import tensorflow as tf  # Only now: worker processes must start without it.

        from albert.data import order_quality

        shards = [
            [order_quality.parse_tokens(r.numpy()) for r in tf.data.TFRecordDataset(p)]
            for p in summary.output_files
        ]
        quality = {
            "window_sharing": order_quality.window_sharing(shards),
            "uniform_sharing": order_quality.uniform_window_sharing(shards),
        }
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
                "shuffle_seconds": summary.shuffle_seconds,
                "buckets": summary.buckets,
                **quality,
            }
        )
    )


def _measure(corpus, model, output, max_seq_length, dupe_factor, num_workers, quality=False):
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
    ] + (["--order_quality"] if quality else [])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall"] = time.perf_counter() - start
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=float, default=3.0, help="Small corpus size (MB).")
    parser.add_argument("--scale", type=float, default=30.0, help="Large corpus / small corpus.")
    parser.add_argument("--order_quality", action="store_true", help=argparse.SUPPRESS)
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
        make_corpus(large, args.scale * args.megabytes, seed=1)
        model = train_model(tmp, small)
        print(f"{args.num_workers} workers, 4 output shards, max_predictions_per_seq 20")
        print(
            f"{'corpus':>7} {'seq':>4} {'dupe':>4} {'instances':>10} {'inst/s':>7} {'wall s':>7} "
            f"{'CPU s':>6} {'inst/CPU-s':>10} {'shuffle s':>9} {'buckets':>7} {'main MB':>8} "
            f"{'worker MB':>9} {'load':>5}"
        )
        runs = [(small, 128, args.dupe_factor), (large, 128, args.dupe_factor)]
        runs += [(small, 512, args.dupe_factor), (large, 512, args.dupe_factor)]
        results = {}
        for corpus, seq, dupe in runs:
            load = os.getloadavg()[0]
            quality = (corpus, seq) == (small, 128)
            r = _measure(corpus, model, tmp / "out" / "data", seq, dupe, args.num_workers, quality)
            results[corpus, seq, dupe] = r
            print(
                f"{os.path.getsize(corpus) / 1e6:6.0f}M {seq:4d} {dupe:4d} {r['instances']:10d} "
                f"{r['instances'] / r['seconds']:7.0f} {r['wall']:7.1f} {r['cpu_seconds']:6.1f} "
                f"{r['instances'] / r['cpu_seconds']:10.0f} {r['shuffle_seconds']:9.1f} "
                f"{r['buckets']:7d} {r['main_mb']:8.0f} {r['worker_mb']:9.0f} {load:5.1f}"
            )
        for seq in (128, 512):
            a, b = results[small, seq, args.dupe_factor], results[large, seq, args.dupe_factor]
            rate = (b["instances"] - a["instances"]) / (b["seconds"] - a["seconds"])
            print(
                f"seq {seq}: steady rate (large - small run, start-up cancels) {rate:.0f} inst/s; "
                f"shuffle gather {100 * b['shuffle_seconds'] / b['seconds']:.0f}% of the large "
                f"run; peak RSS large/small: main {b['main_mb'] / a['main_mb']:.2f}x, "
                f"worker {b['worker_mb'] / a['worker_mb']:.2f}x"
            )
            if seq == 128:
                for cpu, original in (("Zen 3", 700), ("Zen 5", 960)):
                    print(
                        f"  vs the original's ~{original}/s on a 2-core {cpu}: {rate / original:.1f}x"
                    )
        q = results[small, 128, args.dupe_factor]
        print(
            f"order quality (seq 128, {args.dupe_factor} dupes, 4 shards, windows of 256): pairs "
            f"sharing an 8-gram {q['window_sharing']:.4f} vs uniformly shuffled "
            f"{q['uniform_sharing']:.4f} = {q['window_sharing'] / q['uniform_sharing']:.2f}x "
            "(target: within 2x)"
        )
        print(
            "inst/s: instances / seconds inside create_pretraining_data (worker start-up and the\n"
            "TensorFlow import included); wall: the whole process; CPU s: user + system of the\n"
            "process and its workers; inst/CPU-s: instances per CPU second (what one core does\n"
            "when the machine is shared); load:\n"
            "1-minute load average before the run; shuffle s: the gather (reading, sorting and\n"
            "writing the buckets; the scatter's appends are inside inst/s)."
        )


if __name__ == "__main__":
    main()
