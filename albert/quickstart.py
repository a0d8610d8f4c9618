"""Quickstart: pretrain a tiny ALBERT on this machine in minutes, with nothing to download.

    make quickstart        (or: python -m albert.quickstart --output_dir=/tmp/albert_quickstart)

1. Corpus: the docstrings of Python's standard library, read from its source files with `ast`
   (nothing is imported or executed), one sentence per line, one docstring per document; the
   docstrings of every 20th source file are held out for evaluation.
2. Vocabulary: `python -m albert.data.vocab` trains a small SentencePiece model.
3. Data: `python -m albert.create_pretraining_data` writes masked-LM + sentence-order
   TFRecords.
4. Pretraining: `python -m albert.run_pretraining` trains a tiny ALBERT on the CPU, evaluating
   on the held-out records; point TensorBoard at the printed directory to watch it.

Each step runs the project's own command-line tool, as a user would, from the installed
package (`albert-quickstart` after `pip install .`) or a clone alike. A smoke run in a minute:
`--num_train_steps=12 --max_corpus_chars=600000`.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import site
import subprocess
import sys
import sysconfig
import time

from absl import app, flags

from albert.fileio import is_remote

# The folder holding this `albert` package: a clone, or site-packages when installed.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Stdlib folders whose docstrings are tests, demos or vendored code rather than prose.
_SKIPPED_DIRS = {
    "test",
    "tests",
    "idlelib",
    "site-packages",
    "lib2to3",
    "turtledemo",
    "__pycache__",
    "ensurepip",
    "dist-packages",
}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
HELD_OUT_EVERY = 20

# A tiny ALBERT: factorized embeddings (E < H) and one shared layer group, as the paper's.
TINY_CONFIG = {
    "vocab_size": 3000,
    "embedding_size": 32,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_hidden_groups": 1,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "inner_group_num": 1,
    "down_scale_factor": 1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 128,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Data and training settings (tests/training/test_learning.py checks that they learn:
    sentence order is picked up after ~300 steps, so the rate stays up: poly_power 0)."""

    vocab_size: int = TINY_CONFIG["vocab_size"]
    max_seq_length: int = 64
    max_predictions_per_seq: int = 10
    dupe_factor: int = 4
    train_batch_size: int = 64
    num_train_steps: int = 600
    num_warmup_steps: int = 100
    learning_rate: float = 1.8e-3
    optimizer: str = "adamw"
    poly_power: float = 0.0


def stdlib_sources():
    """Sorted paths of the standard library's .py files (tests and demos left out)."""
    root = sysconfig.get_paths()["stdlib"]
    paths = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(
            d for d in subdirectories if d not in _SKIPPED_DIRS and not d.startswith("config-")
        )
        paths.extend(os.path.join(directory, f) for f in sorted(files) if f.endswith(".py"))
    return paths


def docstring_sentences(docstring):
    """The prose sentences of a docstring: code, doctests and indented blocks are dropped."""
    sentences = []
    for paragraph in re.split(r"\n\s*\n", docstring):
        lines = [line for line in paragraph.splitlines() if line.strip()]
        if not lines or any(line.startswith((" ", "\t", ">>>", "...")) for line in lines):
            continue
        text = " ".join(line.strip() for line in lines)
        sentences.extend(s for s in _SENTENCE_END.split(text) if len(s.split()) >= 3)
    return sentences


def file_documents(path):
    """The documents of one source file: each docstring with at least two prose sentences,
    in source order (a docstring's sentences keep their order, which is what SOP learns)."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    nodes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    documents = []
    for node in ast.walk(tree):
        if isinstance(node, nodes) and (docstring := ast.get_docstring(node)):
            sentences = docstring_sentences(docstring)
            if len(sentences) >= 2:
                documents.append(sentences)
    return documents


def build_corpus(output_dir, max_chars=None, held_out_every=HELD_OUT_EVERY):
    """Writes corpus_train.txt and corpus_eval.txt; returns their paths.

    Args:
        output_dir: where to write.
        max_chars: stop after about this many characters (None: every docstring).
        held_out_every: the docstrings of every n-th source file go to corpus_eval.txt.
    """
    paths = [os.path.join(output_dir, f"corpus_{part}.txt") for part in ("train", "eval")]
    total = 0
    with (
        open(paths[0], "w", encoding="utf-8") as train,
        open(paths[1], "w", encoding="utf-8") as held_out,
    ):
        for index, source in enumerate(stdlib_sources()):
            for sentences in file_documents(source):
                text = "\n".join(sentences) + "\n\n"
                (held_out if index % held_out_every == 0 else train).write(text)
                total += len(text)
            if max_chars and total >= max_chars:
                break
    return paths


class StepError(Exception):
    """A step's command failed; it has printed its own error above."""


def _module_command(module, *args):
    return [sys.executable, "-m", module, *args]


def _run(command, title, cwd):
    """Runs one step's command in `cwd`, importing the same `albert` as this process."""
    print(f"\n== {title}\n$ {' '.join(command)}", flush=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")  # CPU-only machines log CUDA probing
    installed = {os.path.realpath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if os.path.realpath(PACKAGE_ROOT) not in installed:  # A clone: put it first on the path.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
    if subprocess.run(command, env=env, cwd=cwd).returncode:
        raise StepError(title)


def create_records(output_dir, corpus_paths, spm_model, recipe):
    """Runs albert.create_pretraining_data on each corpus file; returns the record paths."""
    outputs = []
    for corpus_path, part in zip(corpus_paths, ("train", "eval"), strict=True):
        output = os.path.join(output_dir, f"{part}.tfrecord")
        _run(
            _module_command(
                "albert.create_pretraining_data",
                f"--input_file={corpus_path}",
                f"--output_file={output}",
                f"--spm_model_file={spm_model}",
                f"--max_seq_length={recipe.max_seq_length}",
                f"--max_predictions_per_seq={recipe.max_predictions_per_seq}",
                f"--dupe_factor={recipe.dupe_factor}",
            ),
            f"Pretraining records ({part})",
            output_dir,
        )
        outputs.append(output)
    return outputs


def pretraining_command(config, train, held_out, model_dir, recipe):
    steps = recipe.num_train_steps
    return _module_command(
        "albert.run_pretraining",
        f"--albert_config_file={config}",
        f"--input_file={train}",
        f"--eval_input_file={held_out}",
        f"--output_dir={model_dir}",
        "--do_train",
        "--do_eval",
        f"--train_batch_size={recipe.train_batch_size}",
        "--eval_batch_size=256",
        f"--max_seq_length={recipe.max_seq_length}",
        f"--max_predictions_per_seq={recipe.max_predictions_per_seq}",
        f"--num_train_steps={steps}",
        # A sixth of the steps at most (the recipe's 100 of 600): a short smoke run's rate
        # still peaks, and run_pretraining has no warmup-beyond-training to warn about.
        f"--num_warmup_steps={min(recipe.num_warmup_steps, steps // 6)}",
        f"--learning_rate={recipe.learning_rate}",
        f"--optimizer={recipe.optimizer}",
        f"--poly_power={recipe.poly_power}",
        f"--save_checkpoints_steps={max(1, steps // 3)}",
        f"--iterations_per_loop={max(1, steps // 12)}",
        "--max_eval_steps=40",
    )


FLAGS = flags.FLAGS
flags.DEFINE_string(
    "output_dir", "/tmp/albert_quickstart", "Everything is written here (a local folder)."
)
flags.DEFINE_integer("num_train_steps", Recipe.num_train_steps, "Pretraining steps.", lower_bound=1)
flags.DEFINE_integer(
    "max_corpus_chars",
    None,
    "Stop reading docstrings after about this many characters (default: the whole standard "
    "library); 600000 makes a smoke run.",
    lower_bound=1,
)


def main(argv):
    del argv
    start = time.time()
    if is_remote(FLAGS.output_dir):  # abspath would make a local "gs:" folder of it
        print(
            f"quickstart: error: --output_dir must be a local folder, not {FLAGS.output_dir!r} "
            "(the quickstart builds its corpus and vocabulary on this machine).",
            file=sys.stderr,
        )
        sys.exit(2)  # A usage error, as every entry point's.
    recipe = Recipe(num_train_steps=FLAGS.num_train_steps)
    out = os.path.abspath(FLAGS.output_dir)
    os.makedirs(out, exist_ok=True)
    print(f"== Corpus: docstrings of the Python {sys.version.split()[0]} standard library")
    corpus = build_corpus(out, max_chars=FLAGS.max_corpus_chars)
    prefix = os.path.join(out, "spm")
    try:
        _run(
            _module_command(
                "albert.data.vocab",
                f"--input_file={corpus[0]}",
                f"--model_prefix={prefix}",
                f"--vocab_size={recipe.vocab_size}",
            ),
            "Vocabulary",
            out,
        )
        train, held_out = create_records(out, corpus, prefix + ".model", recipe)
        config = os.path.join(out, "albert_config.json")
        with open(config, "w", encoding="utf-8") as f:
            json.dump(TINY_CONFIG, f, indent=2, sort_keys=True)
        model_dir = os.path.join(out, "pretrain")
        _run(pretraining_command(config, train, held_out, model_dir, recipe), "Pretraining", out)
    except StepError as e:  # One line: the step printed its own error above.
        sys.exit(f"quickstart: error: the step '{e}' failed; see its output above.")
    print(f"\nDone in {time.time() - start:.0f} s. Held-out results: {model_dir}/eval_results.txt")
    print(f"Watch the curves with:\n    tensorboard --logdir={model_dir}")


def run():
    """Console-script entry point (`albert-quickstart`)."""
    app.run(main)


if __name__ == "__main__":
    run()
