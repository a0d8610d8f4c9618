"""SQuAD predict features: tokenizing against reloading the feature cache (`--cached_dir`).

    python benchmarks/bench_squad_cache.py [--copies=333] [--repeats=3]

The predict file is ../shared/data/squad/dev-v2.0.json (14 real questions over 4 paragraphs)
copied `--copies` times with new question ids (333 copies: ~13k windows), read with a tiny
SentencePiece model trained as the tests train theirs, at the original's window settings
(seq 384, stride 128, query 64). Each row is `albert.data.squad.load_features` as the predict
path calls it: without a cache (tokenizing), with an empty cache (tokenizing and writing), and
with the cache written (reloading); the fastest of `--repeats` runs of each, and the reload's
speed-up over tokenizing. The reloaded features are checked equal to the tokenized ones.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_SQUAD = REPO.parent / "shared" / "data" / "squad" / "dev-v2.0.json"
SETTINGS = dict(max_seq_length=384, doc_stride=128, max_query_length=64)


def predict_file(directory, copies):
    """The shared dev sample, its paragraphs repeated `copies` times; returns its path."""
    data = json.loads(SHARED_SQUAD.read_text(encoding="utf-8"))
    paragraphs = [
        {"context": p["context"], "qas": [{**qa, "id": f"{qa['id']}-{copy}"} for qa in p["qas"]]}
        for copy in range(copies)
        for article in data["data"]
        for p in article["paragraphs"]
    ]
    path = os.path.join(directory, "dev.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "v2.0", "data": [{"title": "copies", "paragraphs": paragraphs}]}, f)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=333)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not SHARED_SQUAD.is_file():
        sys.exit(f"{SHARED_SQUAD} is not present.")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory() as directory:
        measure(directory, args)


def measure(directory, args):
    """Prints the rows of the module doc, measured in `directory`."""
    from albert.data import squad
    from albert.tokenization import FullTokenizer
    from tests.helpers import train_tiny_spm

    path = predict_file(directory, args.copies)
    tokenizer = FullTokenizer(spm_model_file=train_tiny_spm(directory, 150, True))

    def load(cache_dir):
        start = time.perf_counter()
        data = squad.load_features(path, tokenizer, False, cache_dir=cache_dir, **SETTINGS)
        return time.perf_counter() - start, data

    times = {"tokenize": [], "tokenize+write": [], "reload": []}
    for repeat in range(args.repeats):
        seconds, fresh = load(None)
        times["tokenize"].append(seconds)
        cache_dir = os.path.join(directory, f"cache{repeat}")
        times["tokenize+write"].append(load(cache_dir)[0])
        seconds, reloaded = load(cache_dir)
        assert reloaded.from_cache and reloaded.features == fresh.features
        times["reload"].append(seconds)
    best = {name: min(values) for name, values in times.items()}
    print(f"{reloaded.num_features} windows of {len(reloaded.examples)} questions")
    for name, seconds in best.items():
        print(f"{name:>15}: {seconds:6.2f} s")
    print(f"reload is {best['tokenize'] / best['reload']:.1f}x faster than tokenizing")


if __name__ == "__main__":
    main()
