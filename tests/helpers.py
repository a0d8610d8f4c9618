"""Helpers shared by tests: a tiny ALBERT config, a tiny SentencePiece model trained with the
project's own code, free ports, summary tags, the original optimizers' update in numpy, and
torch with transformers for the tests that check against real HF."""

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

# Built-in training text: cased words, digits with commas, accents, the user symbols.
TINY_TEXT = """\
The quick brown fox jumps over the lazy dog.
A tiny model needs a tiny corpus (with some punctuation) - and numbers like 1,000 or 25,500.
She said "hello" to the dog, then the fox ran away.
In 1990, the town had 12,000 people; in 2000, it had 15,000.
Prices are £5 or €7 – cheaper than before.
Tokens, pieces and words: the model learns them from text like this.

A second document starts here.
It talks about rivers, mountains and the sea.
The river flows to the sea, and the sea is large.
Mountains are high; rivers are long; the sea is deep.
Winter brings snow, summer brings heat, and autumn brings falling leaves.
Children play football in the park while their parents watch from benches.
The library keeps old maps, rare books and letters written by famous explorers.
Scientists measured temperature, pressure and humidity every hour for 365 days.
A violin, a piano and a trumpet played together at the concert yesterday evening.

Third document: cooking.
Chop the onions, fry them in butter, then add garlic, tomatoes and fresh basil.
Bake the bread at 220 degrees for 35 minutes until the crust turns golden brown.
Vegetables, fruit, cheese and olive oil were sold at the market every Saturday.
"""

# The tests' ALBERT, sizes deliberately uneven so that a swapped axis fails: V=99, E=10 != H=18
# (3 heads of 6), I=37, 16 positions, 3 token types; 4 layers over 2 groups of 2 inner blocks.
# tests/fixtures/hf_grouped has these sizes (tests/fixtures/make_hf_fixtures.py).
TINY_CONFIG = dict(
    vocab_size=99,
    embedding_size=10,
    hidden_size=18,
    num_attention_heads=3,
    intermediate_size=37,
    num_hidden_layers=4,
    num_hidden_groups=2,
    inner_group_num=2,
    max_position_embeddings=16,
    type_vocab_size=3,
)


def tiny_config(**overrides):
    """The tiny `AlbertConfig` (`TINY_CONFIG`) with `overrides`; other keys take the defaults.

    Example:
        >>> tiny_config(num_hidden_groups=1).to_dict()  # every key, for an albert_config.json
    """
    from albert.config import AlbertConfig

    return AlbertConfig(**{**TINY_CONFIG, **overrides})


_CACHE = {}


def train_tiny_spm(tmp_path, vocab_size=99, do_lower_case=False):
    """Trains (once per session and settings) a tiny SentencePiece model; returns its path.

    The model has the original ALBERT layout: `<pad>`=0, `<unk>`=1, `[CLS]`=2, `[SEP]`=3,
    `[MASK]`=4, then the user symbols. Trained on `TINY_TEXT` with
    `albert.data.vocab.train_vocab`; later calls copy the cached bytes into `tmp_path`.

    Args:
        tmp_path: directory to write `tiny_spm.model` (and `.vocab`) into.
        vocab_size: number of pieces (this text allows at most 199).
        do_lower_case: lower-case the training text.

    Returns:
        str path of `tmp_path/tiny_spm.model`.
    """
    from albert.data.vocab import train_vocab

    key = (vocab_size, do_lower_case)
    os.makedirs(tmp_path, exist_ok=True)
    prefix = os.path.join(str(tmp_path), "tiny_spm")
    if key not in _CACHE:
        text_path = prefix + "_text.txt"
        with open(text_path, "w", encoding="utf-8") as f:
            f.write(TINY_TEXT)
        train_vocab(
            text_path, prefix, vocab_size=vocab_size, do_lower_case=do_lower_case, num_threads=1
        )
        with open(prefix + ".model", "rb") as f, open(prefix + ".vocab", "rb") as g:
            _CACHE[key] = (f.read(), g.read())
    else:
        model, vocab = _CACHE[key]
        with open(prefix + ".model", "wb") as f, open(prefix + ".vocab", "wb") as g:
            f.write(model)
            g.write(vocab)
    return prefix + ".model"


def free_ports(count):
    """`count` loopback ports free right now (for local workers and in-process servers)."""
    import socket

    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def scalar_tags(directory):
    """The tags of every summary value in the event files directly under `directory`."""
    import tensorflow as tf

    tags = set()
    for path in Path(directory).glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            tags.update(value.tag for value in event.summary.value)
    return tags


def original_optimizer_update(w, g, m, v, lr, decay, adapt, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    """One step of the original's update, line by line, in numpy: no bias correction.

    `adapt=False` is optimization.py, AdamWeightDecayOptimizer.apply_gradients; `adapt=True`
    adds the trust ratio of lamb_optimizer.py, LAMBOptimizer.apply_gradients (1 when either
    norm is 0). `decay` and `adapt` say whether the variable escapes the exclusion lists.

    Returns:
        (new weight, new m, new v).
    """
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g * g
    update = m / (np.sqrt(v) + eps)
    if decay:
        update = update + wd * w
    ratio = 1.0
    if adapt:
        w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
        ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
    return w - ratio * lr * update, m, v


def write_training_checkpoint(model, directory, step, max_to_keep=3):
    """What the training loop writes at `step`: model, optimizer and global step as
    model.ckpt-<step>, and the `checkpoint` state file (keeping `max_to_keep`, 0 all).
    Returns the prefix."""
    import tensorflow as tf

    from albert.training import checkpointing
    from albert.training.optimization import create_optimizer

    global_step = tf.Variable(step, dtype=tf.int64)
    optimizer, _ = create_optimizer("adamw", 1e-3, 10, global_step=global_step)
    optimizer.build(model.trainable_variables)
    saver = checkpointing.TrainingCheckpoints(
        str(directory), str(directory), model, optimizer, global_step, max_to_keep
    )
    return saver.save(step)


def run_without_albert(script, *args, cwd):
    """Runs the Python `script` with `args` in a fresh process that can import TensorFlow and
    tensorflow-text but not this project (no PATH, run outside the clone), as a serving
    machine loads a SavedModel; returns the JSON object its last output line prints."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# Loads triton's extension after TensorFlow's, as a test that imports transformers' ALBERT
# module (which loads triton where it is installed) does after the suite has loaded TensorFlow.
TRITON_AFTER_TENSORFLOW = "import tensorflow, triton"


def import_torch_and_transformers(probe=TRITON_AFTER_TENSORFLOW):
    """torch and transformers, or a skip of the calling test module (call it at module level):
    where either is not installed, and where triton, which a CUDA build of torch installs,
    crashes a process that has loaded TensorFlow (TensorFlow 2.21 beside triton 3.8: a
    segfault in triton's extension, which would take down the pytest worker and every test
    left on it). The CPU wheel of torch has no triton and no such crash. `probe`: the Python
    code run in a fresh process to see whether it crashes (a test substitutes its own)."""
    import pytest

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if importlib.util.find_spec("triton") is not None:
        signal_number = _probe_signal(probe)
        if signal_number:
            pytest.skip(
                f"triton crashes a process that has loaded TensorFlow (signal {signal_number} "
                "in a probe): install torch's CPU wheel (pip install torch --index-url "
                "https://download.pytorch.org/whl/cpu), which comes without triton",
                allow_module_level=True,
            )
    return torch, transformers


@functools.cache
def _probe_signal(probe):
    """The signal that killed a fresh Python process running `probe`, or 0."""
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    return max(0, -result.returncode)
