"""A tiny ALBERT learns from real text: on held-out records its masked-LM loss falls well below
the untrained model's, and its sentence-order predictions beat always answering the majority
label (the records hold more label-1 pairs: a chunk with one segment gets a random B).

The text is the quickstart's (Python standard-library docstrings, present on every Python
install), made into records by the project's own vocabulary and data tools. Sentence order is
learnt late (after ~300 steps here), hence the quickstart's 600 steps of a 2-layer model.
"""

import contextlib
import os

import numpy as np
import pytest
import tensorflow as tf

from albert.config import AlbertConfig
from albert.data import records
from albert.data.create_pretraining_data import PretrainingDataConfig, create_pretraining_data
from albert.data.pretraining import InstanceOptions
from albert.data.vocab import train_vocab
from albert.quickstart import TINY_CONFIG, Recipe, build_corpus
from albert.tasks.pretraining import PretrainingTask
from albert.training import loop
from albert.training.optimization import create_optimizer

# Slow tier: trains the quickstart's model for 600 steps (~1 min).
pytestmark = pytest.mark.slow

RECIPE = Recipe()  # the quickstart's settings
SEQ, PREDICTIONS = RECIPE.max_seq_length, RECIPE.max_predictions_per_seq


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("learning"))
    train_text, eval_text = build_corpus(directory, held_out_every=8)
    spm_model = train_vocab([train_text], os.path.join(directory, "spm"), RECIPE.vocab_size)
    paths = {}
    for name, text in (("train", train_text), ("eval", eval_text)):
        paths[name] = os.path.join(directory, f"{name}.tfrecord")
        options = InstanceOptions(
            max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS, dupe_factor=RECIPE.dupe_factor
        )
        # Relative to the data folder: the tool seeds each input by its path as given, and the
        # absolute path holds pytest's run number (the records would differ from run to run).
        with contextlib.chdir(directory):
            create_pretraining_data(
                PretrainingDataConfig(
                    input_file=os.path.basename(text),
                    output_file=paths[name],
                    spm_model_file=spm_model,
                    num_workers=1,
                    instance=options,
                    progress_seconds=1e9,
                )
            )
    return directory, paths


def _majority_rate(path):
    dataset = records.pretraining_dataset(path, 256, SEQ, PREDICTIONS, is_training=False)
    labels = np.concatenate([b["next_sentence_labels"].numpy().ravel() for b in dataset])
    assert len(labels) >= 256
    return max(labels.mean(), 1 - labels.mean()), len(labels)


def _evaluate_or_train(directory, paths, output, do_train):
    batch, steps = RECIPE.train_batch_size, RECIPE.num_train_steps
    task = PretrainingTask(
        AlbertConfig.from_dict(TINY_CONFIG),
        paths["train"],
        batch,
        256,
        SEQ,
        PREDICTIONS,
        eval_input_file=paths["eval"],
    )
    options = loop.RunOptions(
        output_dir=os.path.join(directory, output),
        num_train_steps=steps,
        train_batch_size=batch,
        eval_batch_size=256,
        do_train=do_train,
        do_eval=True,
        max_eval_steps=40,
        save_checkpoints_steps=steps,
        iterations_per_loop=100,
    )

    def optimizer_fn(global_step):
        return create_optimizer(
            RECIPE.optimizer,
            RECIPE.learning_rate,
            steps,
            num_warmup_steps=RECIPE.num_warmup_steps,
            poly_power=RECIPE.poly_power,
            global_step=global_step,
            aggregate_gradients=False,
        )

    return loop.run(task, tf.distribute.get_strategy(), options, optimizer_fn)


def test_mlm_loss_falls_and_sop_beats_chance_on_held_out_text(data):
    directory, paths = data
    majority, count = _majority_rate(paths["eval"])
    untrained = _evaluate_or_train(directory, paths, "untrained", do_train=False)
    trained = _evaluate_or_train(directory, paths, "trained", do_train=True)
    print(
        f"held-out ({count} examples, majority label {majority:.3f}): untrained {untrained}; "
        f"trained {trained}"
    )
    assert untrained["masked_lm_loss"] > 7.5  # about ln(3000) = 8.0
    assert trained["masked_lm_loss"] < untrained["masked_lm_loss"] - 1.5
    assert trained["masked_lm_accuracy"] > 0.04
    # Sentence order: above the majority label by three standard errors, and a loss below the
    # entropy of the labels (what a model that only learnt the label frequencies reaches).
    margin = 3 * np.sqrt(majority * (1 - majority) / count)
    assert trained["sentence_order_accuracy"] > majority + margin
    entropy = -(majority * np.log(majority) + (1 - majority) * np.log(1 - majority))
    assert trained["sentence_order_loss"] < entropy - 0.02
