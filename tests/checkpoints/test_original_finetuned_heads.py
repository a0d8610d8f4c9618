"""Checkpoints fine-tuned by the original load with their heads, compute the original's
logits, and export back to the same names and values.

The head names and shapes are written out here from the original's classifier_utils.py
(create_model), race_utils.py (create_model) and squad_utils.py (create_v1_model,
create_v2_model), independently of `albert.checkpoints.tf1`; the expected logits are a numpy
transcription of those heads applied to the backbone's outputs. Shape letters: B batch (3),
T sequence (7), H hidden (18).
"""

import numpy as np
import pytest
from checkpoint_testing import random_arrays, read_tf1, reference_tf1_shapes, write_tf1

from albert.checkpoints import load_checkpoint, save_checkpoint
from albert.modeling import (
    AlbertBackbone,
    AlbertClassifier,
    AlbertMultipleChoice,
    AlbertQuestionAnswering,
)
from albert.tasks.engine import load_finetuning_weights
from tests.helpers import tiny_config

H = 18
TOLERANCE = 1e-5


def head_shapes(kind, num_labels=3):
    if kind == "classifier":
        return {"output_weights": (num_labels, H), "output_bias": (num_labels,)}
    if kind == "race":
        return {"output_weights": (1, H), "output_bias": (1,)}
    if kind == "squad_v1":
        return {"cls/squad/output_weights": (2, H), "cls/squad/output_bias": (2,)}
    return {
        "start_logits/dense/kernel": (H, 1),
        "start_logits/dense/bias": (1,),
        "end_logits/dense_0/kernel": (2 * H, H),
        "end_logits/dense_0/bias": (H,),
        "end_logits/LayerNorm/gamma": (H,),
        "end_logits/LayerNorm/beta": (H,),
        "end_logits/dense_1/kernel": (H, 1),
        "end_logits/dense_1/bias": (1,),
        "answer_class/dense_0/kernel": (2 * H, H),
        "answer_class/dense_0/bias": (H,),
        "answer_class/dense_1/kernel": (H, 1),
    }


def build(kind, config):
    if kind == "classifier":
        return AlbertClassifier(config, num_labels=3)
    if kind == "race":
        return AlbertMultipleChoice(config)
    return AlbertQuestionAnswering(config, version_2_with_negative=kind == "squad_v2")


def inputs(kind, seed=0):
    rng = np.random.default_rng(seed)
    shape = (3, 4, 7) if kind == "race" else (3, 7)  # [B, C, T] or [B, T]
    mask = np.ones(shape, "int32")
    mask[..., 5:] = 0
    features = {
        "input_ids": rng.integers(5, 99, shape).astype("int32"),
        "input_mask": mask,
        "segment_ids": (np.arange(7) >= 3).astype("int32") * np.ones(shape, "int32"),
    }
    if kind == "squad_v2":
        # Two masked positions leave 5 = n_top candidates, so no -1e30 enters the top k.
        p_mask = np.zeros(shape, "int32")
        p_mask[:, 1] = 1
        p_mask[:, 6] = 1
        features["p_mask"] = p_mask
    return features


def log_softmax(x):
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def layer_norm(x, gamma, beta, epsilon=1e-12):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def top_k(x, k):
    index = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, index, -1), index


def original_end_log_probs(w, h, start, p_mask):
    """The original's v2 end log-probabilities [T] of one window (h [T, H], p_mask [T]),
    conditioned on the start at position `start`."""
    h_start = np.broadcast_to(h[start], h.shape)  # [T, H]
    x = np.concatenate([h, h_start], -1) @ w["end_logits/dense_0/kernel"]
    x = np.tanh(x + w["end_logits/dense_0/bias"])
    x = layer_norm(x, w["end_logits/LayerNorm/gamma"], w["end_logits/LayerNorm/beta"])
    end = (x @ w["end_logits/dense_1/kernel"])[:, 0] + w["end_logits/dense_1/bias"]
    return log_softmax(end * (1 - p_mask) - 1e30 * p_mask)


def original_head(kind, w, backbone_outputs, features, n_top=5):
    """The original's head on the backbone's outputs, in numpy (inference)."""
    pooled = backbone_outputs["pooled_output"].astype("float64")  # [B(*C), H]
    h = backbone_outputs["sequence_output"].astype("float64")  # [B, T, H]
    if kind == "classifier":
        return {"logits": pooled @ w["output_weights"].T + w["output_bias"]}
    if kind == "race":  # one logit per choice, reshaped to [B, C]
        return {"logits": (pooled @ w["output_weights"].T + w["output_bias"]).reshape(3, 4)}
    if kind == "squad_v1":
        logits = h @ w["cls/squad/output_weights"].T + w["cls/squad/output_bias"]  # [B, T, 2]
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
    p_mask = features["p_mask"].astype("float64")
    start = (h @ w["start_logits/dense/kernel"])[..., 0] + w["start_logits/dense/bias"]
    start = start * (1 - p_mask) - 1e30 * p_mask  # [B, T]
    start_log_probs = log_softmax(start)
    start_top_log_probs, start_top_index = top_k(start_log_probs, n_top)  # [B, K]
    end_top_log_probs, end_top_index = [], []
    for b in range(h.shape[0]):
        for k in range(n_top):
            end_log_probs = original_end_log_probs(w, h[b], start_top_index[b, k], p_mask[b])
            values, index = top_k(end_log_probs, n_top)
            end_top_log_probs.append(values)
            end_top_index.append(index)
    start_p = np.exp(start_log_probs)  # softmax of the masked start logits
    start_feature = np.einsum("bt,bth->bh", start_p, h)
    answer = np.concatenate([start_feature, h[:, 0]], -1) @ w["answer_class/dense_0/kernel"]
    answer = np.tanh(answer + w["answer_class/dense_0/bias"])
    return {
        "start_top_log_probs": start_top_log_probs,
        "start_top_index": start_top_index,
        "end_top_log_probs": np.reshape(end_top_log_probs, (3, n_top * n_top)),
        "end_top_index": np.reshape(end_top_index, (3, n_top * n_top)),
        "cls_logits": (answer @ w["answer_class/dense_1/kernel"])[:, 0],
    }


KINDS = ["classifier", "race", "squad_v1", "squad_v2"]


@pytest.mark.parametrize("kind", KINDS)
def test_original_fine_tuned_checkpoint_round_trip(tmp_path, kind):
    config = tiny_config()
    shapes = {**reference_tf1_shapes(config, heads=False), **head_shapes(kind)}
    arrays = random_arrays(shapes, seed=KINDS.index(kind))
    for name in arrays:
        if name.endswith("/gamma"):
            # Near 1, so that positions stay apart (a gamma near 0 collapses them, and the
            # SQuAD v2 beam would then compare ties).
            arrays[name] = (1.0 + 0.5 * arrays[name]).astype("float32")
    write_tf1(tmp_path / "original" / "model.ckpt-best", arrays)

    model = build(kind, config)
    result = load_checkpoint(model, str(tmp_path / "original"))
    assert result.initialised == []
    assert sorted(result.loaded) == sorted(shapes)
    assert load_finetuning_weights(model, str(tmp_path / "original"), require_head=True)

    features = inputs(kind)
    outputs = {k: np.asarray(v) for k, v in model(features, training=False).items()}
    flat = {k: v.reshape(-1, 7) for k, v in features.items()} if kind == "race" else features
    backbone_outputs = {k: np.asarray(v) for k, v in model.backbone(flat).items()}
    expected = original_head(kind, arrays, backbone_outputs, features)
    assert sorted(outputs) == sorted(expected)
    for name, value in expected.items():
        if name.endswith("_index"):
            np.testing.assert_array_equal(outputs[name], value, err_msg=name)
        else:
            difference = np.max(np.abs(outputs[name] - value))
            assert difference <= TOLERANCE, (name, difference)

    save_checkpoint(model, str(tmp_path / "exported"), "tf1")
    written = read_tf1(tmp_path / "exported" / "model.ckpt")
    assert sorted(written) == sorted(arrays)
    for name, value in arrays.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)


def test_pretrained_checkpoint_leaves_the_head_initialised_and_heads_skip_a_backbone(tmp_path):
    config = tiny_config()
    write_tf1(tmp_path / "pretrained" / "model.ckpt", random_arrays(reference_tf1_shapes(config)))
    classifier = AlbertClassifier(config, num_labels=3)
    result = load_checkpoint(classifier, str(tmp_path / "pretrained"))
    assert sorted(result.initialised) == sorted(w.path for w in classifier.classifier.weights)
    # A fine-tuned SQuAD v2 checkpoint into a bare backbone: the head names are skipped.
    shapes = {**reference_tf1_shapes(config, heads=False), **head_shapes("squad_v2")}
    write_tf1(tmp_path / "squad" / "model.ckpt", random_arrays(shapes))
    result = load_checkpoint(AlbertBackbone(config), str(tmp_path / "squad"))
    assert sorted(result.ignored) == sorted(head_shapes("squad_v2"))
    # ... and into a classifier, whose head it does not hold: left initialised, not mixed in.
    result = load_checkpoint(AlbertClassifier(config, num_labels=3), str(tmp_path / "squad"))
    assert sorted(result.ignored) == sorted(head_shapes("squad_v2"))
    assert len(result.initialised) == 2


def test_checkpoint_fine_tuned_on_a_tf_hub_module_loads_with_its_head(tmp_path):
    """The original's --albert_hub_module_handle: the module's variables (its unused MLM and
    SOP heads too) under `module/`, the task head and `global_step` outside it, Adam slots on
    the trained variables."""
    from albert.checkpoints.stored_model import stored_task_head

    config = tiny_config()
    module = random_arrays(reference_tf1_shapes(config))
    head = random_arrays(head_shapes("classifier"), seed=1)
    stored = {"module/" + name: value for name, value in module.items()}
    for name, value in list(stored.items()) + list(head.items()):
        if not name.startswith("module/cls/"):  # no gradient reaches the module's heads
            stored[name + "/adam_m"] = stored[name + "/adam_v"] = np.zeros_like(value)
    stored.update(head, global_step=np.array(300, np.int64))
    write_tf1(tmp_path / "model.ckpt-300", stored)

    assert stored_task_head(str(tmp_path), "tf1") == ("classifier", 3)
    model = AlbertClassifier(config, num_labels=3)
    result = load_checkpoint(model, str(tmp_path))
    assert result.initialised == []
    np.testing.assert_array_equal(model.classifier.output_weights.numpy(), head["output_weights"])
    np.testing.assert_array_equal(
        model.backbone.embeddings.word_embeddings.numpy(),
        module["bert/embeddings/word_embeddings"],
    )


def test_squad_v2_training_conditions_the_end_on_the_gold_start(tmp_path):
    # In training the original's end logits take h at the gold start (start_positions), not
    # the beam's: each row's end log-probabilities are those of its own gold start.
    config = tiny_config()
    shapes = {**reference_tf1_shapes(config, heads=False), **head_shapes("squad_v2")}
    arrays = random_arrays(shapes, seed=7)
    for name in arrays:
        if name.endswith("/gamma"):
            arrays[name] = (1.0 + 0.5 * arrays[name]).astype("float32")
    write_tf1(tmp_path / "original" / "model.ckpt-best", arrays)
    model = build("squad_v2", config)
    load_checkpoint(model, str(tmp_path / "original"))
    features = inputs("squad_v2")
    sequence_output = model.backbone(features)["sequence_output"]  # [B, T, H]
    gold_starts = np.array([3, 0, 5], "int32")  # [B]: a different start in each row
    outputs = model.qa_head(sequence_output, features["p_mask"], gold_starts, training=False)
    h = np.asarray(sequence_output).astype("float64")
    p_mask = features["p_mask"].astype("float64")
    for b, start in enumerate(gold_starts):
        expected = original_end_log_probs(arrays, h[b], start, p_mask[b])
        got = np.asarray(outputs["end_log_probs"][b])
        real = p_mask[b] == 0  # masked positions are -1e30 - log Z in both
        difference = np.max(np.abs(got[real] - expected[real]))
        assert difference <= TOLERANCE, (b, difference)
        assert np.all(got[~real] < -1e29)
