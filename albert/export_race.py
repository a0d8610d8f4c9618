"""A SavedModel for RACE that takes a raw article, question and its four options.

`export_multiple_choice` writes a SavedModel of a fine-tuned `AlbertMultipleChoice` whose
`serving_default` signature is

    inputs   article   tf.string [batch]
             question  tf.string [batch]
             options   tf.string [batch, 4]     the options A, B, C, D of each question
    outputs  probabilities  float32 [batch, 4]  softmax over the options' logits
             logits         float32 [batch, 4]
             answer         tf.string [batch]   "A".."D", the highest logit's letter, as
                                                predictions.json writes it

Each option is packed as `albert.data.race.convert_examples_to_features` packs it, with the
same ids (the text goes through `albert.text_ops.InGraphTokenizer`): the option fills every
blank "_" of the question when it has one, else follows the question after a space;
question+option keeps its LAST `max_qa_length` tokens, and the article its first tokens that
still fit in `[CLS] article [SEP] question+option [SEP]`. The signature's `options` is
[batch, None] so that a row without 4 options fails the request with an error naming
`options` (a fixed 4 is checked by some clients only); so do rows of unequal batch size and
text that is not UTF-8, as the GLUE and SQuAD SavedModels.

Loading needs TensorFlow and tensorflow-text only (import tensorflow_text first):

    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    serve(article=tf.constant(["..."]), question=tf.constant(["The text is about _."]),
          options=tf.constant([["a", "b", "c", "d"]]))["answer"]

Shape letters: B batch, C choices (4), T max_seq_length, P article pieces, Q question+option
pieces.
"""

from __future__ import annotations

import tensorflow as tf

from albert.data.race import ANSWER_LETTERS, NUM_CHOICES, check_max_qa_length
from albert.export import (
    check_export_dir,
    check_max_seq_length,
    same_rows,
    save_serving_module,
    utf8_text,
)
from albert.text_ops import InGraphTokenizer

INPUT_NAMES = ("article", "question", "options")


class _MultipleChoiceServing(tf.Module):
    """Raw (article, question, options) -> in-graph tokenizer -> 4 packed inputs per row ->
    multiple-choice head -> probabilities and answer letter.

    The Keras model is not an attribute (the SavedModel must not serialise the Keras object);
    its variables are tracked as a plain list.
    """

    def __init__(self, model, tokenizer, max_seq_length, max_qa_length):
        super().__init__(name="albert_multiple_choice_serving")
        self.tokenizer = tokenizer
        self.model_variables = list(model.variables)
        self.letters = tf.constant(list(ANSWER_LETTERS), tf.string)
        self._call_model = lambda inputs: model(inputs, training=False)["logits"]
        self._max_seq_length = max_seq_length
        self._max_qa_length = max_qa_length
        spec = [
            tf.TensorSpec([None], tf.string, name="article"),
            tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None, None], tf.string, name="options"),
        ]
        self.serve = tf.function(self._serve, input_signature=spec, autograph=False)

    def _serve(self, article, question, options):
        inputs = self.race_inputs(article, question, options)  # each [B, C, T]
        logits = tf.cast(self._call_model(inputs), tf.float32)  # [B, C]
        return {
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "logits": logits,
            "answer": tf.gather(self.letters, tf.argmax(logits, axis=-1)),
        }

    def race_inputs(self, article, question, options):
        """Checks the text and packs each option as fine-tuning's features.

        Args:
            article, question: tf.string [B].
            options: tf.string [B, C].

        Returns:
            dict of int32 [B, C, T]: `input_ids`, `input_mask`, `segment_ids`.
        """
        options = _four_options(options)
        texts = (article, question, options)
        texts = [utf8_text(t, n) for t, n in zip(texts, INPUT_NAMES, strict=True)]
        article, question, options = same_rows(texts, INPUT_NAMES)
        qa_text = question_with_option(
            tf.repeat(question, NUM_CHOICES), tf.reshape(options, [-1])
        )  # [B * C]
        qa_ids = self.tokenizer.tokenize(qa_text)  # [B * C, (Q)]
        qa_ids = keep_last(qa_ids, self._max_qa_length)
        article_ids = self.tokenizer.tokenize(article)  # [B, (P)], once for its 4 options
        article_ids = tf.gather(article_ids, tf.repeat(tf.range(tf.shape(article)[0]), NUM_CHOICES))
        room = self._max_seq_length - 3 - qa_ids.row_lengths()  # [B * C]
        article_ids = tf.ragged.boolean_mask(
            article_ids, tf.ragged.range(article_ids.row_lengths()) < room[:, None]
        )  # [B * C, (P')]: its first tokens that fit
        # The pair fits now, so pack's truncate-the-longer rule cuts nothing; an empty
        # question+option still gets its [SEP], as the features' `[CLS] A [SEP] [SEP]`.
        inputs = self.tokenizer.pack([article_ids, qa_ids], self._max_seq_length)  # [B * C, T]
        return {
            name: tf.reshape(value, [-1, NUM_CHOICES, self._max_seq_length])
            for name, value in inputs.items()
        }


def _four_options(options):
    """`options` (tf.string [B, K]) once checked to hold 4 per row: else the request fails
    naming the input, not deep in the string ops ("Input shapes do not match: [8] vs. [6]")."""
    check = tf.debugging.Assert(
        tf.equal(tf.shape(options)[1], NUM_CHOICES),
        [
            f"options must hold {NUM_CHOICES} options per row (A to D); got the shape",
            tf.shape(options),
        ],
    )
    with tf.control_dependencies([check]):
        return tf.identity(options)


def question_with_option(questions, options):
    """`albert.data.race.question_with_option` on tf.string [N] each: the option fills every
    blank "_" of the question when it has one, else follows it after a space."""
    parts = tf.strings.split(questions, sep="_")  # [N, (blanks + 1)]
    rows = parts.value_rowids()  # [parts]
    is_last = tf.not_equal(rows, tf.concat([rows[1:], [-1]], axis=0))
    filled = tf.strings.join([parts.flat_values, tf.where(is_last, "", tf.gather(options, rows))])
    filled = tf.strings.unsorted_segment_join(filled, rows, num_segments=tf.size(questions))
    has_blank = parts.row_lengths() > 1  # [N]
    return tf.where(has_blank, filled, tf.strings.join([questions, options], separator=" "))


def keep_last(ids, max_length):
    """The last `max_length` ids of each row of `ids` (int [N, (Q)]), as `qa[-max_length:]`."""
    lengths = ids.row_lengths()  # [N]
    return tf.ragged.boolean_mask(ids, tf.ragged.range(lengths) >= (lengths - max_length)[:, None])


def export_multiple_choice(
    model, spm_model_file, do_lower_case, max_seq_length, max_qa_length, export_dir
):
    """Writes a SavedModel of a fine-tuned RACE model that takes raw strings.

    Args:
        model: an `AlbertMultipleChoice` (its `logits` output is [B, C]).
        spm_model_file: the SentencePiece model the model was fine-tuned with.
        do_lower_case: whether the text was lower-cased.
        max_seq_length: T, tokens per option's input (as in fine-tuning).
        max_qa_length: question+option keeps its last this many tokens (as in fine-tuning).
        export_dir: where to write the SavedModel.

    Returns:
        `export_dir`.

    Raises:
        RaceDataError: `max_qa_length` leaves no room for the 3 special tokens.
        ValueError: `max_seq_length` exceeds the model's position embeddings.
        FileExistsError: `export_dir` holds something other than a SavedModel
            (`albert.export.check_export_dir`).
        albert.tokenization.TokenizerError: the SentencePiece model cannot be read.
    """
    check_export_dir(export_dir)
    check_max_qa_length(max_qa_length, max_seq_length)
    check_max_seq_length(model, max_seq_length)
    tokenizer = InGraphTokenizer(spm_model_file, do_lower_case=do_lower_case)
    module = _MultipleChoiceServing(model, tokenizer, max_seq_length, max_qa_length)
    save_serving_module(module, export_dir)
    return export_dir
