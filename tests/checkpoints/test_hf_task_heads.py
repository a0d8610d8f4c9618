"""HF transformers' fine-tuned ALBERT classes and ours, checked against real HF (torch).

AlbertForSequenceClassification, AlbertForMultipleChoice and AlbertForQuestionAnswering
compute our GLUE, RACE and SQuAD v1.1 heads: their files load with the head, into the task
model whose head they compute, and our task models (and fine-tuning runs, through
convert_checkpoint) export to them. Models are compared in inference mode (no dropout), in
float32. Shape letters: B batch (3), C choices (4), T sequence (7), H hidden (18).
"""

import json
import os
import re

import numpy as np
import pytest
from helpers import import_torch_and_transformers

torch, transformers = import_torch_and_transformers()

from checkpoint_testing import randomize  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from test_convert_checkpoint import main_with_flags  # noqa: E402
from test_convert_fine_tuned import fine_tuning_run  # noqa: E402

from albert.checkpoints import CheckpointError, load_checkpoint, read_config, save_checkpoint  # noqa: E402
from albert.convert_checkpoint import OutputFormatError, convert  # noqa: E402
from albert.modeling import (  # noqa: E402
    AlbertBackbone,
    AlbertClassifier,
    AlbertMultipleChoice,
    AlbertQuestionAnswering,
)
from albert.tasks import FineTuningError  # noqa: E402
from albert.tasks.weights import load_finetuning_weights  # noqa: E402
from tests.helpers import tiny_config  # noqa: E402

TOLERANCE = 1e-5
# HF class -> (how our task model is built from a config, our output -> HF's output).
KINDS = {
    "AlbertForSequenceClassification": (
        lambda config: AlbertClassifier(config, num_labels=3),
        {"logits": "logits"},
    ),
    "AlbertForMultipleChoice": (AlbertMultipleChoice, {"logits": "logits"}),
    "AlbertForQuestionAnswering": (
        AlbertQuestionAnswering,
        {"start_logits": "start_logits", "end_logits": "end_logits"},
    ),
}


def hf_config(config, **changes):
    """The transformers AlbertConfig of our `config` (its tanh GELU is HF's gelu_new)."""
    values = config.to_dict()
    del values["down_scale_factor"]
    values.update(hidden_act={"gelu": "gelu_new"}[values["hidden_act"]], **changes)
    return transformers.AlbertConfig(**values)


def hf_model(architecture, seed=0, config=None, **changes):
    """An HF model of `architecture` on the tiny config (G = 2 groups of 2 inner layers), every
    parameter random (biases and LayerNorm too), in inference mode."""
    config = config or tiny_config()
    # Start and end logits for QA; MNLI's three classes otherwise (unused by multiple choice).
    changes.setdefault("num_labels", 2 if architecture == "AlbertForQuestionAnswering" else 3)
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(hf_config(config, **changes))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model.eval()


def inputs(architecture, seed=0):
    """[B, T] features ([B, C, T] for multiple choice), with padding."""
    rng = np.random.default_rng(seed)
    shape = (3, 4, 7) if architecture == "AlbertForMultipleChoice" else (3, 7)
    mask = np.ones(shape, "int32")
    mask[..., 5:] = 0
    return {
        "input_ids": rng.integers(5, 99, shape).astype("int32"),
        "input_mask": mask,
        "segment_ids": (np.arange(7) >= 3).astype("int32") * np.ones(shape, "int32"),
    }


def hf_outputs(model, features):
    with torch.no_grad():
        outputs = model(
            input_ids=torch.tensor(features["input_ids"], dtype=torch.long),
            attention_mask=torch.tensor(features["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(features["segment_ids"], dtype=torch.long),
        )
    return {name: value.numpy() for name, value in outputs.items()}


def max_differences(ours, theirs, names):
    return {
        name: float(np.max(np.abs(np.asarray(ours[name]) - theirs[hf_name])))
        for name, hf_name in names.items()
    }


@pytest.mark.parametrize("architecture", list(KINDS))
def test_an_hf_fine_tuned_file_loads_with_its_head_and_gives_hf_logits(tmp_path, architecture):
    source = hf_model(architecture)
    source.save_pretrained(str(tmp_path))
    build, names = KINDS[architecture]
    model = build(read_config(str(tmp_path)))
    result = load_checkpoint(model, str(tmp_path))
    # AlbertForQuestionAnswering has no pooler (HF builds it with add_pooling_layer=False).
    no_pooler = architecture == "AlbertForQuestionAnswering"
    assert sorted(result.initialised) == (["pooler/bias", "pooler/kernel"] if no_pooler else [])
    assert result.ignored == []
    features = inputs(architecture)
    differences = max_differences(model(features), hf_outputs(source, features), names)
    assert all(d <= TOLERANCE for d in differences.values()), differences
    # What --init_checkpoint=<HF directory> does before --do_predict without training.
    assert load_finetuning_weights(build(model.config), str(tmp_path), require_head=True)


@pytest.mark.parametrize(
    "architecture, build",
    [
        # Its `classifier` is applied to every position, not to the pooled output.
        ("AlbertForTokenClassification", lambda config: AlbertClassifier(config, num_labels=3)),
        # A one-label regression head is not a multiple-choice one (nor the reverse).
        ("AlbertForSequenceClassification", AlbertMultipleChoice),
        ("AlbertForMultipleChoice", lambda config: AlbertClassifier(config, num_labels=1)),
        # HF has no class with SQuAD 2.0's XLNet-style head.
        ("AlbertForQuestionAnswering", lambda c: AlbertQuestionAnswering(c, True)),
        ("AlbertForQuestionAnswering", lambda config: AlbertClassifier(config, num_labels=2)),
        ("AlbertForSequenceClassification", AlbertBackbone),
    ],
)
def test_a_head_of_another_class_is_left_out_with_a_warning(tmp_path, caplog, architecture, build):
    changes = {"num_labels": 1} if architecture == "AlbertForSequenceClassification" else {}
    hf_model(architecture, **changes).save_pretrained(str(tmp_path))
    model = build(read_config(str(tmp_path)))
    before = [w.numpy() for w in model.weights]
    result = load_checkpoint(model, str(tmp_path))
    head_names = ["qa_outputs.bias", "qa_outputs.weight"]
    if architecture != "AlbertForQuestionAnswering":
        head_names = ["classifier.bias", "classifier.weight"]
    assert result.ignored == head_names
    assert "is not read into an " + type(model).__name__ in caplog.text
    if not isinstance(model, AlbertBackbone):
        for weight, value in zip(model.weights, before, strict=True):
            if weight.path in result.initialised:
                np.testing.assert_array_equal(weight.numpy(), value)
        with pytest.raises(FineTuningError, match="holds no .* head of this shape"):
            load_finetuning_weights(model, str(tmp_path), require_head=True)


def test_a_head_of_another_shape_starts_from_its_initial_values(tmp_path, caplog):
    """3 labels (MNLI) into a 2-label classifier: the encoder loads, the head stays as it was
    (as a training checkpoint's head of another shape does), and predicting refuses."""
    hf_model("AlbertForSequenceClassification").save_pretrained(str(tmp_path))
    model = AlbertClassifier(read_config(str(tmp_path)), num_labels=2)
    before = model.classifier.output_weights.numpy()
    result = load_checkpoint(model, str(tmp_path))
    assert sorted(result.initialised) == ["classifier/output_bias", "classifier/output_weights"]
    assert result.ignored == ["classifier.bias", "classifier.weight"]
    np.testing.assert_array_equal(model.classifier.output_weights.numpy(), before)
    assert "classifier.weight (3, 18)" in caplog.text and "does not fit" in caplog.text
    assert not load_finetuning_weights(model, str(tmp_path))
    with pytest.raises(FineTuningError, match="holds no AlbertClassifier head of this shape"):
        load_finetuning_weights(model, str(tmp_path), require_head=True)


def test_a_head_without_architectures_is_left_out(tmp_path):
    """`classifier` alone does not tell a sequence, token or multiple-choice head apart."""
    hf_model("AlbertForSequenceClassification").save_pretrained(str(tmp_path))
    path = tmp_path / "config.json"
    values = json.loads(path.read_text())
    del values["architectures"]
    path.write_text(json.dumps(values))
    model = AlbertClassifier(read_config(str(tmp_path)), num_labels=3)
    result = load_checkpoint(model, str(tmp_path))
    assert result.ignored == ["classifier.bias", "classifier.weight"]
    assert len(result.initialised) == 2


def test_run_classifier_predicts_with_an_hf_sequence_classification_model(tmp_path):
    """--init_checkpoint=<an HF AlbertForSequenceClassification directory> --do_predict, no
    training and no --albert_config_file: test_results.tsv holds HF's probabilities."""
    from albert.config import AlbertConfig
    from albert.data import glue
    from albert.tasks import classification
    from albert.tokenization import FullTokenizer
    from tests.tasks import synthetic_glue as synthetic

    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    source = hf_model("AlbertForSequenceClassification", config=config)
    source.save_pretrained(str(tmp_path / "hf"))
    data_dir = synthetic.write_mnli(tmp_path / "glue", num_train=3, num_dev=3, num_test=11)
    synthetic.run_classifier(
        "--task_name=mnli",
        f"--data_dir={data_dir}",
        f"--output_dir={tmp_path / 'out'}",
        f"--init_checkpoint={tmp_path / 'hf'}",
        "--max_seq_length=32",
        "--predict_batch_size=4",
        "--do_predict",
    )
    examples = glue.read_examples("mnli", data_dir, "test")
    tokenizer = FullTokenizer(spm_model_file=synthetic.SPM_MODEL, do_lower_case=True)
    features = glue.convert_examples_to_features(examples, "mnli", 32, tokenizer)
    batch = {
        k: np.array([f[k] for f in features]) for k in ("input_ids", "input_mask", "segment_ids")
    }
    expected = classification.softmax(hf_outputs(source, batch)["logits"])
    written = np.loadtxt(os.path.join(tmp_path / "out", "test_results.tsv"), delimiter="\t")
    assert np.max(np.abs(written - expected)) < 1e-5


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def hf_from_pretrained(architecture, directory):
    """HF's model of `directory`, checking that HF found every tensor it needs and no other."""
    model, info = getattr(transformers, architecture).from_pretrained(
        str(directory), output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return model.eval()


@pytest.mark.parametrize("architecture", list(KINDS))
def test_our_task_model_exports_as_its_hf_class_with_our_logits(tmp_path, architecture):
    build, names = KINDS[architecture]
    model = randomize(build(tiny_config()))
    save_checkpoint(model, str(tmp_path), "hf")
    exported = hf_from_pretrained(architecture, tmp_path)
    features = inputs(architecture)
    differences = max_differences(model(features), hf_outputs(exported, features), names)
    assert all(d <= TOLERANCE for d in differences.values()), differences
    config = read_json(tmp_path / "config.json")
    assert config["architectures"] == [architecture]
    tensors = load_file(str(tmp_path / "model.safetensors"))
    # HF's AlbertForQuestionAnswering has no pooler; the others read it.
    has_pooler = architecture != "AlbertForQuestionAnswering"
    assert ("albert.pooler.weight" in tensors) == has_pooler
    if architecture == "AlbertForSequenceClassification":
        np.testing.assert_array_equal(
            tensors["classifier.weight"], model.classifier.output_weights.numpy()
        )  # [num_labels, H], as ours
        assert config["num_labels"] == 3 and config["problem_type"] == "single_label_classification"
        assert config["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
        assert config["label2id"] == {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2}
    if architecture == "AlbertForQuestionAnswering":
        assert config["num_labels"] == 2 and "problem_type" not in config


def test_a_regression_head_exports_with_its_problem_type_and_labels(tmp_path):
    model = randomize(AlbertClassifier(tiny_config(), num_labels=1))
    save_checkpoint(model, str(tmp_path / "sts"), "hf")
    config = read_json(tmp_path / "sts" / "config.json")
    assert config["problem_type"] == "regression" and config["id2label"] == {"0": "LABEL_0"}
    assert hf_from_pretrained("AlbertForSequenceClassification", tmp_path / "sts").num_labels == 1
    from albert.checkpoints import hf

    hf.save(AlbertClassifier(tiny_config(), 2), str(tmp_path / "named"), labels=["no", "yes"])
    assert read_json(tmp_path / "named" / "config.json")["label2id"] == {"no": 0, "yes": 1}
    with pytest.raises(CheckpointError, match="1 label names .* 2 distinct outputs"):
        hf.save(AlbertClassifier(tiny_config(), 2), str(tmp_path / "bad"), labels=["yes"])
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("architecture", list(KINDS))
def test_hf_to_ours_to_hf_keeps_every_tensor_and_the_labels(tmp_path, architecture):
    changes = {}
    if architecture == "AlbertForSequenceClassification":
        changes = {
            "id2label": {0: "neg", 1: "mid", 2: "pos"},
            "label2id": {"neg": 0, "mid": 1, "pos": 2},
            "problem_type": "multi_label_classification",
        }
    hf_model(architecture, **changes).save_pretrained(str(tmp_path / "hf"))
    convert(str(tmp_path / "hf"), str(tmp_path / "ours"), "keras")
    convert(str(tmp_path / "ours"), str(tmp_path / "tf1"), "tf1")
    convert(str(tmp_path / "hf"), str(tmp_path / "again"), "hf")
    original = load_file(str(tmp_path / "hf" / "model.safetensors"))
    tensors = load_file(str(tmp_path / "again" / "model.safetensors"))
    assert sorted(tensors) == sorted(original)
    for name, value in original.items():
        np.testing.assert_array_equal(tensors[name], value, err_msg=name)
    # As HF reads them (HF leaves out keys at their defaults, e.g. two labels for QA).
    before, after = (
        transformers.AlbertConfig.from_pretrained(tmp_path / d) for d in ("hf", "again")
    )
    # AlbertForMultipleChoice's labels mean nothing (its head is [1, H] whatever they are).
    keys = ["architectures", "id2label", "label2id", "problem_type", "num_labels"]
    for key in keys[:1] if architecture == "AlbertForMultipleChoice" else keys:
        assert getattr(after, key) == getattr(before, key), key
    # The Keras and TF1 copies hold the head too (under the original's names in TF1).
    build, _ = KINDS[architecture]
    model = build(read_config(str(tmp_path / "hf")))
    assert load_finetuning_weights(model, str(tmp_path / "tf1"), require_head=True)
    head = "qa_outputs" if architecture == "AlbertForQuestionAnswering" else "classifier"
    np.testing.assert_array_equal(model.weights[-2].numpy(), original[f"{head}.weight"])


@pytest.mark.parametrize(
    "kind, task_name, architecture, labels",
    [
        (
            "classifier",
            "mnli",
            "AlbertForSequenceClassification",
            ["contradiction", "entailment", "neutral"],
        ),
        ("classifier", None, "AlbertForSequenceClassification", ["LABEL_0", "LABEL_1", "LABEL_2"]),
        ("race", "race", "AlbertForMultipleChoice", None),
        ("squad_v1", None, "AlbertForQuestionAnswering", ["LABEL_0", "LABEL_1"]),
    ],
)
def test_a_fine_tuning_run_converts_to_hf(tmp_path, kind, task_name, architecture, labels):
    model = fine_tuning_run(tmp_path / "run", kind)
    convert(str(tmp_path / "run"), str(tmp_path / "hf"), "hf", task_name=task_name)
    exported = hf_from_pretrained(architecture, tmp_path / "hf")
    features = inputs(architecture)
    _, names = KINDS[architecture]
    differences = max_differences(model(features), hf_outputs(exported, features), names)
    assert all(d <= TOLERANCE for d in differences.values()), differences
    config = read_json(tmp_path / "hf" / "config.json")
    assert config["architectures"] == [architecture]
    if labels:
        assert [config["id2label"][str(i)] for i in range(len(labels))] == labels
        assert config["label2id"] == {label: i for i, label in enumerate(labels)}


def test_a_one_label_run_needs_its_task_for_hf(tmp_path, capsys):
    """RACE's head and STS-B's are the same [1, H] weights; only the task tells the class."""
    fine_tuning_run(tmp_path / "run", "race")
    with pytest.raises(OutputFormatError, match="pass --task_name=sts-b .* or --task_name=race"):
        convert(str(tmp_path / "run"), str(tmp_path / "hf"), "hf")
    convert(str(tmp_path / "run"), str(tmp_path / "sts"), "hf", task_name="STS-B")
    config = read_json(tmp_path / "sts" / "config.json")
    assert config["architectures"] == ["AlbertForSequenceClassification"]
    assert config["problem_type"] == "regression"
    flags = [f"--input={tmp_path / 'run'}", f"--output={tmp_path / 'x'}", "--output_format=hf"]
    for task_name, message in [
        ("mnli", "holds a one-output classifier head .*, not the 3-output classifier head of"),
        ("squad", "Unknown --task_name='squad'.* \\(or race\\)"),
    ]:
        capsys.readouterr()
        assert main_with_flags(*flags, f"--task_name={task_name}") == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert len(lines) == 1, lines
        assert re.search(message, lines[0]), lines
    assert not (tmp_path / "x").exists()
