"""SavedModels that take raw strings: the in-graph tokenizer in front of a fine-tuned model.

`export_classifier` writes a SavedModel whose `serving_default` signature takes the raw
sentences of a GLUE-style task and returns what the model predicts:

    inputs   sentence_a  tf.string [batch]
             sentence_b  tf.string [batch]       (pair tasks only)
    outputs  probabilities  float32 [batch, num_labels]   and  label  tf.string [batch]
             or, for regression (STS-B):  score  float32 [batch]
             and, when exported with a threshold (run_classifier --threshold_to_export),
             threshold  float32 [batch]  (the same value in every row, served with every
             prediction as the original does; one per row, because TF Serving's REST row
             format, `{"instances": [...]}`, needs every output to share the batch dimension)

Text goes through `albert.text_ops.InGraphTokenizer` (the same ids as `FullTokenizer`), is
packed as `[CLS] A [SEP] B [SEP]` and cut to `max_seq_length` by the original's rule. The
SentencePiece model is stored inside the SavedModel. Loading needs TensorFlow and
tensorflow-text only (import tensorflow_text first, which registers the SentencePiece op):

    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    serve(sentence_a=tf.constant(["a fine film"]))["probabilities"]
"""

from __future__ import annotations

import tensorflow as tf

from albert import fileio
from albert.text_ops import InGraphTokenizer

SERVING_SIGNATURE = "serving_default"
SAVED_MODEL_FILE = "saved_model.pb"  # in every SavedModel folder


class _ClassifierServing(tf.Module):
    """Raw strings -> in-graph tokenizer -> classifier -> probabilities (or score).

    The Keras model is not an attribute (so the SavedModel does not try to serialise the
    Keras object); its variables are tracked as a plain list, which also reaches weights
    that Keras 3 keeps in Python lists of layers.
    """

    def __init__(self, model, tokenizer, max_seq_length, labels, sentence_pair, threshold=None):
        super().__init__(name="albert_classifier_serving")
        self._threshold = threshold
        self.tokenizer = tokenizer
        self.model_variables = list(model.variables)
        self.labels = tf.constant(list(labels) or [""], tf.string)
        self._regression = not labels
        self._call_model = lambda inputs: model(inputs, training=False)["logits"]
        self._max_seq_length = max_seq_length
        spec = [tf.TensorSpec([None], tf.string, name="sentence_a")]
        if sentence_pair:
            spec.append(tf.TensorSpec([None], tf.string, name="sentence_b"))
            self.serve = tf.function(self._serve_pair, input_signature=spec, autograph=False)
        else:
            self.serve = tf.function(self._serve_single, input_signature=spec, autograph=False)

    def _serve_single(self, sentence_a):
        return self._outputs([utf8_text(sentence_a, "sentence_a")])

    def _serve_pair(self, sentence_a, sentence_b):
        sentences = [utf8_text(sentence_a, "sentence_a"), utf8_text(sentence_b, "sentence_b")]
        return self._outputs(same_rows(sentences, ("sentence_a", "sentence_b")))

    def _outputs(self, sentences):
        segments = [self.tokenizer.tokenize(s) for s in sentences]  # each [B, (P)]
        inputs = self.tokenizer.pack(segments, self._max_seq_length)  # each [B, S]
        if len(segments) == 2:
            # As fine-tuning's features (and the original's): a sentence_b without tokens
            # ("", whitespace) gives `[CLS] A [SEP]`, not `[CLS] A [SEP] [SEP]`.
            single = self.tokenizer.pack(segments[:1], self._max_seq_length)
            has_b = segments[1].row_lengths() > 0  # [B]
            inputs = {k: tf.where(has_b[:, None], v, single[k]) for k, v in inputs.items()}
        logits = tf.cast(self._call_model(inputs), tf.float32)  # [B, C]
        if self._regression:
            outputs = {"score": logits[:, 0]}
        else:
            outputs = {
                "probabilities": tf.nn.softmax(logits, axis=-1),
                "label": tf.gather(self.labels, tf.argmax(logits, axis=-1)),
            }
        if self._threshold is not None:
            outputs["threshold"] = tf.fill(tf.shape(logits)[:1], self._threshold)  # [B]
        return outputs


def utf8_text(text, name):
    """`text` (tf.string [B], or [B, K]: K texts per row) once checked to be UTF-8 text: else
    the request fails naming the input and its rows. Other bytes (Latin-1 from a gRPC client,
    a character cut in two) were served an answer computed from replacement characters: a
    Latin-1 "café" context answered "" with a high score. Fine-tuning never reads such text
    (its readers refuse it).
    """
    # A surrogate never decodes from valid UTF-8, so it marks the bytes that are not.
    flat = tf.reshape(text, [-1])  # [B * K]
    codes = tf.strings.unicode_decode(flat, "UTF-8", errors="replace", replacement_char=0xD800)
    is_invalid = tf.reduce_any(tf.equal(codes, 0xD800), axis=1)  # [B * K]
    per_row = [tf.shape(text)[0], tf.reduce_prod(tf.shape(text)[1:])]  # No -1: B may be 0.
    is_invalid = tf.reduce_any(tf.reshape(is_invalid, per_row), axis=1)  # [B]
    invalid = tf.where(is_invalid)[:, 0]  # [rows]
    check = tf.debugging.Assert(
        tf.equal(tf.size(invalid), 0), [f"{name} must be UTF-8 text; rows that are not:", invalid]
    )
    with tf.control_dependencies([check]):  # Before any op that reads the text.
        return tf.identity(text)


def same_rows(inputs, names):
    """The inputs of a signature (tensors whose first dimension is the batch), once checked
    to hold as many rows: else the request fails with a message naming them, not deep in the
    tokenizer's ragged ops ("Incompatible shapes: [2] vs. [4]", "indices[1] = 1 is not in
    [0, 1)").

    TF Serving's columnar format (`{"inputs": {...}}`) lets a client send such a request.
    """
    first, *others = inputs
    listed = f"{', '.join(names[:-1])} and {names[-1]}"
    checks = [
        tf.debugging.assert_equal(
            tf.shape(first)[0],
            tf.shape(other)[0],
            message=f"{listed} must hold as many rows (one of each per example)",
        )
        for other in others
    ]
    with tf.control_dependencies(checks):  # Before any op that would fail on them.
        return tuple(tf.identity(t) for t in inputs)


def check_export_dir(export_dir):
    """Raises FileExistsError unless `export_dir` is new, empty or an earlier SavedModel.

    The export replaces the folder whole, so a folder of other files (a run's checkpoints,
    `--export_dir=.`) would be deleted with it.
    """
    if not fileio.is_replaceable(export_dir, SAVED_MODEL_FILE):
        raise FileExistsError(
            f"export_dir {export_dir} exists and is not a SavedModel (no {SAVED_MODEL_FILE}); "
            "the export replaces its folder whole, so it is left as it is: choose a new or "
            "empty folder."
        )


def save_serving_module(module, export_dir):
    """Writes `module` as the SavedModel `export_dir`, whole or not at all, its
    `serving_default` signature `module.serve` (a tf.function with an input signature).

    `serve` is traced once, inside the save: a concrete function taken before the save was
    traced a second time inside it. The serving functions are built with autograph=False:
    they hold no Python control flow on tensors, and converting their code took about a
    fifth of an export. Together, a tiny QA model on a 2-vCPU Intel Xeon: export 9.2 s ->
    4.1 s, load 2.7 s -> 1.1 s.
    """
    with fileio.atomic_directory(export_dir) as temporary:  # Never half a SavedModel.
        tf.saved_model.save(module, temporary, signatures={SERVING_SIGNATURE: module.serve})


def check_max_seq_length(model, max_seq_length):
    """Raises ValueError when `max_seq_length` exceeds the model's position embeddings (the
    trace would fail deep inside the embedding layer instead)."""
    positions = model.backbone.config.max_position_embeddings
    if max_seq_length > positions:
        raise ValueError(
            f"max_seq_length={max_seq_length} exceeds the model's max_position_embeddings="
            f"{positions}; export with the max_seq_length it was fine-tuned with."
        )


def export_classifier(
    model,
    spm_model_file,
    do_lower_case,
    max_seq_length,
    labels,
    export_dir,
    sentence_pair=True,
    threshold=None,
):
    """Writes a SavedModel of a fine-tuned `AlbertClassifier` that takes raw strings.

    Args:
        model: an `AlbertClassifier` (its `logits` output is [B, num_labels]).
        spm_model_file: the SentencePiece model the model was fine-tuned with.
        do_lower_case: whether the text was lower-cased.
        max_seq_length: tokens per input (as in fine-tuning).
        labels: the label strings in class-id order; empty for regression (one output).
        export_dir: where to write the SavedModel.
        sentence_pair: whether the signature takes `sentence_b` too.
        threshold: a float served as the `threshold` output (the original's
            --threshold_to_export), or None for no such output.

    Returns:
        `export_dir`.

    Raises:
        ValueError: `labels` does not match the model's number of outputs, or
            `max_seq_length` exceeds its position embeddings.
        FileExistsError: `export_dir` holds something other than a SavedModel
            (`check_export_dir`).
        albert.tokenization.TokenizerError: the SentencePiece model cannot be read.
    """
    check_export_dir(export_dir)
    num_outputs = model.num_labels
    if (len(labels) or 1) != num_outputs:
        raise ValueError(
            f"export_classifier got {len(labels)} labels for a model with {num_outputs} "
            "outputs; pass the task's labels in class-id order (none for regression)."
        )
    check_max_seq_length(model, max_seq_length)
    tokenizer = InGraphTokenizer(spm_model_file, do_lower_case=do_lower_case)
    module = _ClassifierServing(
        model, tokenizer, max_seq_length, labels, sentence_pair, threshold=threshold
    )
    save_serving_module(module, export_dir)
    return export_dir
