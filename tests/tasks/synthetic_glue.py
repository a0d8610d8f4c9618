"""Synthetic, learnable GLUE data in the GLUE file layouts, and a tiny config, for the tests.

- SST-2: label 1 exactly when the sentence holds the keyword.
- STS-B: the score is how many times the keyword appears in sentence 2 (0 to 5).
- MNLI (train, dev_matched, dev_mismatched, test_*): contradiction / entailment / neutral for
  0 / 1 / 2 keywords in sentence 2; AX: the MNLI test layout's pairs (index, sentences).
Every word, the keyword included, is a single piece of tests/fixtures/tokenizer/tiny.model,
so a tiny model learns the rules in a few hundred steps.
"""

import json
from pathlib import Path

import numpy as np

from tests.helpers import tiny_config

TESTS = Path(__file__).resolve().parents[1]
SPM_MODEL = str(TESTS / "fixtures" / "tokenizer" / "tiny.model")
KEYWORD = "gold"
WORDS = (
    "came there miles book visitors people cars state current free century movement "
    "form class society groups education thought part means schools common work "
    "large way world love time street space friend women system"
).split()
MNLI_LABELS = ("contradiction", "entailment", "neutral")

# Every word of the data is a piece of the 1000-piece SentencePiece model; every key, as a
# config file holds.
TINY_CONFIG = tiny_config(
    vocab_size=1000,
    embedding_size=16,
    hidden_size=32,
    num_hidden_layers=2,
    num_hidden_groups=1,
    num_attention_heads=2,
    intermediate_size=48,
    inner_group_num=1,
    max_position_embeddings=64,
    type_vocab_size=2,
).to_dict()


def write_config(path, **changes):
    Path(path).write_text(json.dumps({**TINY_CONFIG, **changes}))
    return str(path)


def _sentence(rng, keywords, length=None):
    words = list(rng.choice(WORDS, size=length or int(rng.integers(4, 9))))
    for _ in range(keywords):
        words.insert(int(rng.integers(0, len(words) + 1)), KEYWORD)
    return " ".join(words)


def _write(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join(header)] + ["\t".join(str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_sst2(directory, num_train=400, num_dev=96, num_test=37, seed=0):
    """SST-2 layout under directory/SST-2; returns directory (the --data_dir)."""
    rng = np.random.default_rng(seed)
    folder = Path(directory) / "SST-2"

    def rows(count):
        labels = rng.integers(0, 2, size=count)
        return [(_sentence(rng, int(label)), int(label)) for label in labels]

    _write(folder / "train.tsv", ["sentence", "label"], rows(num_train))
    _write(folder / "dev.tsv", ["sentence", "label"], rows(num_dev))
    test = [(i, sentence) for i, (sentence, _) in enumerate(rows(num_test))]
    _write(folder / "test.tsv", ["index", "sentence"], test)
    return str(directory)


def write_stsb(directory, num_train=400, num_dev=96, num_test=23, seed=1):
    """STS-B layout (10 columns, score last) under directory/STS-B."""
    rng = np.random.default_rng(seed)
    folder = Path(directory) / "STS-B"
    header = [
        "index",
        "genre",
        "filename",
        "year",
        "old_index",
        "source1",
        "source2",
        "sentence1",
        "sentence2",
        "score",
    ]

    def rows(count, with_score=True):
        result = []
        for i in range(count):
            score = int(rng.integers(0, 6))
            row = [
                i,
                "main-news",
                "x",
                "2012",
                i,
                "none",
                "none",
                _sentence(rng, 0),
                _sentence(rng, score, length=4),
            ]
            result.append(row + [f"{score:.3f}"] if with_score else row)
        return result

    _write(folder / "train.tsv", header, rows(num_train))
    _write(folder / "dev.tsv", header, rows(num_dev))
    _write(folder / "test.tsv", header[:-1], rows(num_test, with_score=False))
    return str(directory)


def write_mnli(directory, num_train=120, num_dev=30, num_test=17, num_ax=13, seed=2):
    """MNLI (matched and mismatched) under directory/MNLI, AX under directory/diagnostic."""
    rng = np.random.default_rng(seed)
    folder = Path(directory) / "MNLI"
    fields = [
        "index",
        "promptID",
        "pairID",
        "genre",
        "sentence1_binary_parse",
        "sentence2_binary_parse",
        "sentence1_parse",
        "sentence2_parse",
        "sentence1",
        "sentence2",
    ]

    def pair(i, label):
        return [i, 0, 0, "fiction", "-", "-", "-", "-", _sentence(rng, 0), _sentence(rng, label)]

    def labelled(count):
        labels = rng.integers(0, 3, size=count)
        return [pair(i, int(k)) + [MNLI_LABELS[k], MNLI_LABELS[k]] for i, k in enumerate(labels)]

    _write(folder / "train.tsv", fields + ["label1", "gold_label"], labelled(num_train))
    for kind in ("matched", "mismatched"):
        _write(folder / f"dev_{kind}.tsv", fields + ["label1", "gold_label"], labelled(num_dev))
        test = [pair(i, int(rng.integers(0, 3))) for i in range(num_test)]
        _write(folder / f"test_{kind}.tsv", fields, test)
    ax = [(i, _sentence(rng, 0), _sentence(rng, int(rng.integers(0, 3)))) for i in range(num_ax)]
    _write(Path(directory) / "diagnostic" / "AX.tsv", ["index", "sentence1", "sentence2"], ax)
    return str(directory)


def run_classifier(*args):
    """run_classifier.py in this process: parses `args` into private FlagValues and runs.

    Returns:
        (final eval metrics, the parsed FlagValues).
    """
    from absl import flags

    from albert.tasks import classification

    flag_values = flags.FlagValues()
    classification.define_classifier_flags(flag_values)
    flag_values(["run_classifier.py", f"--spm_model_file={SPM_MODEL}", *args])
    return classification.run_from_flags(flag_values), flag_values


def tiny_run_flags(data_dir, output_dir, config, task_name):
    """Flags of a small, fast run (every hyperparameter given, so none is from the table)."""
    return [
        f"--task_name={task_name}",
        f"--data_dir={data_dir}",
        f"--output_dir={output_dir}",
        f"--albert_config_file={config}",
        "--max_seq_length=32",
        "--train_batch_size=16",
        "--eval_batch_size=10",
        "--predict_batch_size=7",
        "--learning_rate=1e-3",
        "--warmup_step=10",
        "--albert_dropout_prob=0",
        "--iterations_per_loop=25",
    ]


def brief_run_options(output_dir, do_eval=True):
    """The engine's options of a brief run: 6 steps of 8, a checkpoint every 3, dev in
    batches of 6."""
    from albert.training import loop

    return loop.RunOptions(
        output_dir=str(output_dir),
        num_train_steps=6,
        train_batch_size=8,
        eval_batch_size=6,
        do_eval=do_eval,
        save_checkpoints_steps=3,
        iterations_per_loop=3,
        seed=3,
    )


def brief_engine_run(strategy, data_dir, output_dir):
    """6 SST-2 steps through the engine under `strategy`, eval and predict; no dropout (the
    replicas of a strategy draw other masks than one device).

    Returns:
        (final eval metrics, test probabilities [N, 2]).
    """
    from albert.config import AlbertConfig
    from albert.tasks import classification, engine
    from albert.tokenization import FullTokenizer
    from albert.training.optimization import create_optimizer

    tokenizer = FullTokenizer(spm_model_file=SPM_MODEL)
    config = AlbertConfig.from_dict(TINY_CONFIG)
    task = classification.GlueTask(
        "sst-2", data_dir, tokenizer, config, 32, 8, 6, 4, classifier_dropout_prob=0.0
    )
    options = brief_run_options(output_dir)

    def optimizer_fn(global_step):
        return create_optimizer(
            "adamw", 1e-3, 6, num_warmup_steps=2, global_step=global_step, aggregate_gradients=False
        )

    metrics = engine.run(task, strategy, options, optimizer_fn, do_predict=True)
    return metrics, np.loadtxt(Path(output_dir) / "test_results.tsv", delimiter="\t")
