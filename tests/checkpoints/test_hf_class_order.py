"""An HF classifier's classes (config.json's id2label) against a GLUE task's, with real HF.

HF MNLI models often order their classes entailment, neutral, contradiction (or upper-case),
ours contradiction, entailment, neutral: a head loaded for a GLUE task (--init_checkpoint, to
fine-tune, evaluate or predict; convert_checkpoint --task_name to TF1 or Keras) is put in the
task's order, so it predicts the label strings HF does; HF to HF keeps the file's order. Shape letters: N examples, C classes (3), H hidden.
"""

import csv
import json
import os

import numpy as np
import pytest
from helpers import import_torch_and_transformers

torch, transformers = import_torch_and_transformers()

from test_hf_task_heads import hf_model, hf_outputs, inputs  # noqa: E402

from albert.checkpoints import read_config  # noqa: E402
from albert.convert_checkpoint import OutputFormatError, convert  # noqa: E402
from albert.modeling import AlbertClassifier  # noqa: E402
from albert.tasks.weights import load_finetuning_weights  # noqa: E402

MNLI = ("contradiction", "entailment", "neutral")  # our class ids 0, 1, 2
HF_MNLI = ("entailment", "neutral", "contradiction")  # a common HF order


def hf_classifier(directory, names, seed=2, config=None, **changes):
    """An HF AlbertForSequenceClassification saved in `directory` with `names` as its id2label."""
    id2label = dict(enumerate(names))
    model = hf_model(
        "AlbertForSequenceClassification",
        seed=seed,
        config=config,
        num_labels=len(names),
        id2label=id2label,
        label2id={name: i for i, name in id2label.items()},
        **changes,
    )
    model.save_pretrained(str(directory))
    return model


def loaded(directory, labels):
    """Our classifier with `directory` loaded for a task of `labels`, as --init_checkpoint."""
    model = AlbertClassifier(read_config(str(directory)), num_labels=len(labels))
    assert load_finetuning_weights(model, str(directory), require_head=True, labels=labels)
    return model


def rows_in_task_order(names, labels):
    """The file's class id of each of the task's `labels` (names compared without case)."""
    return [[n.lower() for n in names].index(label) for label in labels]


@pytest.mark.parametrize(
    "names",
    [
        HF_MNLI,
        ("ENTAILMENT", "NEUTRAL", "CONTRADICTION"),
        ("Neutral", "Contradiction", "Entailment"),
    ],
)
def test_a_permuted_head_is_put_in_the_task_order(tmp_path, absl_caplog, names):
    source = hf_classifier(tmp_path, names)
    model = loaded(tmp_path, MNLI)
    features = inputs("AlbertForSequenceClassification")
    theirs = hf_outputs(source, features)["logits"]  # [N, C], the file's order
    ours = np.asarray(model(features)["logits"])  # [N, C], the task's order
    np.testing.assert_allclose(ours, theirs[:, rows_in_task_order(names, MNLI)], atol=1e-5)
    # The same label strings as HF's argmax through HF's id2label.
    assert [MNLI[i] for i in ours.argmax(-1)] == [names[i].lower() for i in theirs.argmax(-1)]
    assert "reordered to the task's (contradiction, entailment, neutral)" in absl_caplog.text


@pytest.mark.parametrize(
    "names, labels, message",
    [
        # HF's defaults: nothing to check the order against.
        (("LABEL_0", "LABEL_1", "LABEL_2"), MNLI, "which say nothing of their order"),
        # Other names (an HF MRPC model into our "0", "1"): no synonyms are guessed.
        (("not_equivalent", "equivalent"), ("0", "1"), "not the task's 0, 1"),
        (("contradiction", "entailment", "other"), MNLI, "not the task's contradiction"),
    ],
)
def test_unmatched_names_keep_the_file_order_with_a_warning(
    tmp_path, absl_caplog, names, labels, message
):
    source = hf_classifier(tmp_path, names)
    model = loaded(tmp_path, labels)
    features = inputs("AlbertForSequenceClassification")
    theirs = hf_outputs(source, features)["logits"]
    np.testing.assert_allclose(np.asarray(model(features)["logits"]), theirs, atol=1e-5)
    warnings = [r.getMessage() for r in absl_caplog.records if r.levelname == "WARNING"]
    [warning] = [w for w in warnings if message in w]
    assert ", ".join(names) in warning and ", ".join(labels) in warning


def test_a_multi_label_head_warns_that_its_probabilities_differ(tmp_path, absl_caplog):
    hf_classifier(tmp_path, HF_MNLI, problem_type="multi_label_classification")
    loaded(tmp_path, MNLI)
    assert "multi_label_classification" in absl_caplog.text and "softmax" in absl_caplog.text


def test_fine_tuning_from_an_hf_model_starts_from_the_task_order(tmp_path):
    """--do_train --init_checkpoint=<HF dir>: the loop's `load_initial_weights` reorders too."""
    from albert.tasks.classification import GlueTask
    from albert.tokenization import FullTokenizer
    from tests.tasks import synthetic_glue as synthetic

    source = hf_classifier(tmp_path, HF_MNLI)
    tokenizer = FullTokenizer(spm_model_file=synthetic.SPM_MODEL)
    task = GlueTask("mnli", str(tmp_path), tokenizer, read_config(str(tmp_path)), 32, 8, 8, 8)
    model = task.create_model()
    task.load_initial_weights(model, str(tmp_path))
    features = inputs("AlbertForSequenceClassification")
    theirs = hf_outputs(source, features)["logits"][:, rows_in_task_order(HF_MNLI, MNLI)]
    np.testing.assert_allclose(np.asarray(model(features)["logits"]), theirs, atol=1e-5)


def test_run_classifier_predicts_and_evaluates_hf_labels_with_an_hf_class_order(tmp_path):
    """--init_checkpoint=<an HF MNLI model ordered entailment, neutral, contradiction>
    --do_eval --do_predict: the submission holds HF's label strings, test_results.tsv HF's
    probabilities in our class order, and the dev accuracy is HF's."""
    from albert.config import AlbertConfig
    from albert.data import glue
    from albert.tasks import classification
    from albert.tokenization import FullTokenizer
    from tests.tasks import synthetic_glue as synthetic

    config = AlbertConfig.from_dict(synthetic.TINY_CONFIG)
    data_dir = synthetic.write_mnli(tmp_path / "glue", num_train=3, num_dev=20, num_test=11)
    tokenizer = FullTokenizer(spm_model_file=synthetic.SPM_MODEL, do_lower_case=True)

    def split(name):
        examples = glue.read_examples("mnli", data_dir, name)
        features = glue.convert_examples_to_features(examples, "mnli", 32, tokenizer)
        keys = ("input_ids", "input_mask", "segment_ids")
        return examples, {k: np.array([f[k] for f in features]) for k in keys}

    source = hf_classifier(tmp_path / "hf", HF_MNLI, config=config)
    # Centre the logits on the dev set, so the classes predicted vary by example.
    dev_examples, dev = split("dev")
    with torch.no_grad():
        pooled = source.albert(
            **{
                name: torch.tensor(dev[key], dtype=torch.long)
                for name, key in [
                    ("input_ids", "input_ids"),
                    ("attention_mask", "input_mask"),
                    ("token_type_ids", "segment_ids"),
                ]
            }
        ).pooler_output  # [N, H]
        source.classifier.bias.copy_(-source.classifier.weight @ pooled.mean(0))
    source.save_pretrained(str(tmp_path / "hf"))
    metrics, _ = synthetic.run_classifier(
        "--task_name=mnli",
        f"--data_dir={data_dir}",
        f"--output_dir={tmp_path / 'out'}",
        f"--init_checkpoint={tmp_path / 'hf'}",
        "--max_seq_length=32",
        "--eval_batch_size=8",
        "--predict_batch_size=4",
        "--do_eval",
        "--do_predict",
    )
    _, test = split("test")
    logits = hf_outputs(source, test)["logits"]  # [N, C], HF's order
    predicted = [HF_MNLI[i] for i in logits.argmax(-1)]
    assert len(set(predicted)) > 1, predicted
    with open(tmp_path / "out" / "MNLI-m.tsv", encoding="utf-8") as f:
        assert [row[1] for row in csv.reader(f, delimiter="\t")][1:] == predicted
    probabilities = classification.softmax(logits)[:, rows_in_task_order(HF_MNLI, MNLI)]
    written = np.loadtxt(os.path.join(tmp_path / "out", "test_results.tsv"), delimiter="\t")
    np.testing.assert_allclose(written, probabilities, atol=1e-5)
    dev_predicted = [HF_MNLI[i] for i in hf_outputs(source, dev)["logits"].argmax(-1)]
    accuracy = np.mean([p == e.label for p, e in zip(dev_predicted, dev_examples, strict=True)])
    assert 0 < accuracy < 1
    assert metrics["accuracy"] == pytest.approx(accuracy)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("output_format", ["tf1", "keras"])
def test_hf_to_tf1_or_keras_with_a_task_writes_the_task_order(tmp_path, absl_caplog, output_format):
    names = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")
    source = hf_classifier(tmp_path / "hf", names)
    convert(str(tmp_path / "hf"), str(tmp_path / "out"), output_format, task_name="mnli")
    assert "holds no names" not in absl_caplog.text
    convert(str(tmp_path / "hf"), str(tmp_path / "as_is"), output_format)
    # Without the task the names are lost: say so, and how to keep the order.
    assert "ENTAILMENT, NEUTRAL, CONTRADICTION (in class-id order); " in absl_caplog.text
    assert "Pass --task_name" in absl_caplog.text
    features = inputs("AlbertForSequenceClassification")
    theirs = hf_outputs(source, features)["logits"]
    for directory, rows in [("out", rows_in_task_order(names, MNLI)), ("as_is", [0, 1, 2])]:
        model = AlbertClassifier(read_config(str(tmp_path / "hf")), num_labels=3)
        load_finetuning_weights(model, str(tmp_path / directory), require_head=True)
        ours = np.asarray(model(features)["logits"])
        np.testing.assert_allclose(ours, theirs[:, rows], atol=1e-5, err_msg=directory)
    with pytest.raises(OutputFormatError, match="not the 2-output classifier head of"):
        convert(str(tmp_path / "hf"), str(tmp_path / "mrpc"), output_format, task_name="mrpc")


def test_hf_to_hf_with_a_task_keeps_the_file_order_and_names(tmp_path):
    hf_classifier(tmp_path / "hf", HF_MNLI)
    convert(str(tmp_path / "hf"), str(tmp_path / "again"), "hf", task_name="mnli")
    before, after = (read_json(tmp_path / d / "config.json") for d in ("hf", "again"))
    assert (
        after["id2label"]
        == before["id2label"]
        == {"0": "entailment", "1": "neutral", "2": "contradiction"}
    )
    assert after["label2id"] == before["label2id"]
    from safetensors.numpy import load_file

    original, written = (
        load_file(str(tmp_path / d / "model.safetensors")) for d in ("hf", "again")
    )
    np.testing.assert_array_equal(written["classifier.weight"], original["classifier.weight"])
