"""Trains the SentencePiece vocabulary (`30k-clean.model`) with the original's settings.

The released models use a unigram model with `<pad>`=0, `<unk>`=1, the control symbols
`[CLS]`=2, `[SEP]`=3, `[MASK]`=4, the user symbols `( ) " - . – £ €` and character coverage
0.99995, without BOS/EOS. Input is the pretraining text format (one sentence a line, blank
lines between documents) or WikiExtractor output, whose `<doc ...>` and `</doc>` lines are
skipped. Lines stream from disk into SentencePiece, which keeps a random sample of
`input_sentence_size` of them, so the corpus never has to fit in memory.

Lines are normalised with `albert.tokenization.preprocess_text` (lower-cased with
`--do_lower_case`) so the model sees text the way `FullTokenizer` will feed it.

Usage:
    python -m albert.data.vocab --input_file=a.txt,wiki/*/wiki_* \
        --model_prefix=out/30k-clean --vocab_size=30000 --do_lower_case
"""

from __future__ import annotations

import io
import os
import sys
import uuid

import sentencepiece as spm

from albert.data import corpus
from albert.errors import AlbertError
from albert.tokenization import preprocess_text

CONTROL_SYMBOLS = ("[CLS]", "[SEP]", "[MASK]")
USER_DEFINED_SYMBOLS = ("(", ")", '"', "-", ".", "–", "£", "€")
CHARACTER_COVERAGE = 0.99995


class VocabError(AlbertError):
    """Input files or settings that cannot produce a vocabulary."""


def expand_input_files(input_file) -> list:
    """Comma-separated paths and globs (or a list of them) -> sorted list of files (folders
    that a glob matches are left out).

    Raises:
        VocabError: a pattern matches no file.
    """
    patterns = input_file.split(",") if isinstance(input_file, str) else list(input_file)
    files = []
    for pattern in (p.strip() for p in patterns):
        if not pattern:
            continue
        # Files only, as create_pretraining_data reads them: a folder would stop the trainer.
        # gs:// too: the lines are read through `corpus.read_lines`, which reads them there.
        matched = corpus.glob_files(pattern)
        if not matched:
            raise VocabError(f"`input_file` pattern {pattern!r} matches no file; check the path.")
        files.extend(matched)
    if not files:
        raise VocabError("`input_file` is empty; pass one or more text files or globs.")
    return files


def iterate_sentences(input_files, do_lower_case=True, normalize=True):
    """Yields the non-empty text lines of `input_files`, one at a time.

    Blank lines (document breaks) and WikiExtractor's `<doc ...>` / `</doc>` lines are
    skipped. With `normalize`, each line goes through `preprocess_text`. Lines are read as
    create_pretraining_data reads them (`albert.data.corpus.read_lines`): they end at "\n"
    only, a UTF-8 byte-order mark is dropped and invalid UTF-8 becomes U+FFFD.
    """
    stats = corpus.CorpusStats()
    for path in input_files:
        for line in corpus.read_lines(path, stats):
            stripped = line.strip()
            if not stripped or stripped.startswith("<doc ") or stripped == "</doc>":
                continue
            if normalize:
                stripped = preprocess_text(stripped, lower=do_lower_case)
            if stripped:
                yield stripped


def train_vocab(
    input_files,
    model_prefix: str,
    vocab_size: int = 30000,
    do_lower_case: bool = True,
    input_sentence_size: int = 10_000_000,
    normalize: bool = True,
    seed: int = 12345,
    num_threads: int = 16,
) -> str:
    """Trains a SentencePiece unigram model with the original ALBERT settings.

    Args:
        input_files: text files, or a comma-separated string of paths and globs.
        model_prefix: output path without extension (gs:// too); writes `.model` and
            `.vocab`.
        vocab_size: number of pieces, the 5 special ones included (30000 for ALBERT).
        do_lower_case: lower-case the text before training (with `normalize`).
        input_sentence_size: how many lines SentencePiece samples at random from the input
            (0 means all of them; SentencePiece needs more than 100).
        normalize: run `preprocess_text` on every line first.
        seed: seed of SentencePiece's sampling, so a given corpus gives one model.
        num_threads: trainer threads. The model depends on it, so the default is fixed
            (SentencePiece's own default) rather than the number of cores.

    Returns:
        The path of the written `.model` file.

    Raises:
        VocabError: no input file, one that is not UTF-8 text (UTF-16, binary, CR-only line
            endings), a `model_prefix` folder that cannot be created, or SentencePiece
            refuses the corpus or vocab_size.
    """
    if input_sentence_size < 0 or 0 < input_sentence_size <= 100:
        raise VocabError(
            "`input_sentence_size` must be 0 (use every line) or more than 100. "
            f"Received: {input_sentence_size}"
        )
    files = expand_input_files(input_files)
    for path in files:  # Read as UTF-16 bytes, SentencePiece would train on garbage.
        try:
            corpus.check_text_file(path)
        except corpus.CorpusError as e:
            raise VocabError(str(e)) from None
    remote = corpus.is_remote(model_prefix)
    _make_folder(model_prefix, remote)  # before training: an unwritable place fails at once
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        # Through `model_writer`, not `model_prefix`: the model would store that (temporary)
        # path, so one corpus would not give one file byte for byte, and the feature caches
        # keyed on the model's bytes would miss after an identical retrain.
        spm.SentencePieceTrainer.train(
            sentence_iterator=iterate_sentences(files, do_lower_case, normalize),
            model_writer=model,
            vocab_size=vocab_size,
            model_type="unigram",
            pad_id=0,
            unk_id=1,
            bos_id=-1,
            eos_id=-1,
            control_symbols=list(CONTROL_SYMBOLS),
            user_defined_symbols=list(USER_DEFINED_SYMBOLS),
            character_coverage=CHARACTER_COVERAGE,
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            num_threads=num_threads,
            minloglevel=2,
        )
    except RuntimeError as e:
        raise VocabError(
            f"SentencePiece could not train on {len(files)} file(s) with "
            f"vocab_size={vocab_size}: {e}"
        ) from None
    if remote:
        _publish_remote(model_prefix, model.getvalue())
    else:
        _publish_local(model_prefix, model.getvalue(), vocab_size)
    return model_prefix + ".model"


def _make_folder(model_prefix, remote):
    """Creates the folder of `model_prefix` (gs:// through `tf.io.gfile`).

    Raises:
        VocabError: it cannot be created (read-only, no permission, no such bucket).
    """
    directory = os.path.dirname(model_prefix)
    if not directory:
        return
    if remote:
        import tensorflow as tf  # only for remote paths such as gs://

        try:
            tf.io.gfile.makedirs(directory)
        except tf.errors.OpError as e:
            raise VocabError(f"Cannot create {directory} ({e.message}).") from None
        return
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:  # A read-only or otherwise unwritable place: one line.
        raise VocabError(
            f"Cannot create {directory} ({e.strerror.lower()}); point --model_prefix at a "
            "folder you can write to."
        ) from None


def _publish_local(model_prefix, model, vocab_size):
    """Writes PREFIX.vocab and PREFIX.model under a hidden temporary prefix, checks them and
    renames them: a failure or a full disk never leaves a cut-short model under the final name
    or replaces an earlier one."""
    directory = os.path.dirname(model_prefix)
    temporary = os.path.join(directory, f".{os.path.basename(model_prefix)}.tmp-{uuid.uuid4().hex}")
    try:
        _write_model(temporary, model)
        _check_written(temporary, vocab_size)
        os.replace(temporary + ".vocab", model_prefix + ".vocab")
        os.replace(temporary + ".model", model_prefix + ".model")  # Last: marks it complete.
    finally:
        for extension in (".model", ".vocab"):
            if os.path.exists(temporary + extension):
                os.remove(temporary + extension)


def _publish_remote(model_prefix, model):
    """PREFIX.vocab, then PREFIX.model (last: it marks the pair complete), each written whole
    by `albert.fileio` (a temporary name renamed; a failed gs:// write raises, so there is no
    cut-short file to check for).

    Raises:
        VocabError: a file cannot be written.
    """
    import tensorflow as tf  # only for remote paths such as gs://

    from albert import fileio

    try:
        fileio.write_text(model_prefix + ".vocab", _vocab_text(model))
        fileio.write_bytes(model_prefix + ".model", model)
    except tf.errors.OpError as e:  # permission, quota: one line
        raise VocabError(
            f"Cannot write the vocabulary to {os.path.dirname(model_prefix)} ({e.message}); "
            "the model was not replaced."
        ) from None


def _vocab_text(model) -> str:
    """PREFIX.vocab as SentencePiece writes it: one `piece<TAB>score` line per id (scores as
    C++ streams a float: 6 significant digits)."""
    processor = spm.SentencePieceProcessor(model_proto=model)
    return "".join(
        f"{processor.id_to_piece(i)}\t{processor.get_score(i):.6g}\n"
        for i in range(processor.get_piece_size())
    )


def _write_model(prefix, model):
    """PREFIX.model holding the serialized `model`, and PREFIX.vocab (`_vocab_text`).

    Raises:
        VocabError: the files cannot be written (a full disk: no space left on device).
    """
    text = _vocab_text(model)
    try:
        with open(prefix + ".vocab", "w", encoding="utf-8") as f:
            f.write(text)
        with open(prefix + ".model", "wb") as f:
            f.write(model)
    except OSError as e:
        raise VocabError(
            f"Cannot write the vocabulary to {os.path.dirname(prefix) or '.'} "
            f"({(e.strerror or str(e)).lower()}); nothing was replaced."
        ) from None


def _check_written(prefix, vocab_size):
    """Raises VocabError unless PREFIX.model loads and PREFIX.vocab has every piece.

    SentencePiece reports success even when the disk filled up while it wrote its files.
    """
    folder = os.path.dirname(prefix) or "."
    try:
        model = spm.SentencePieceProcessor(model_file=prefix + ".model")
        with open(prefix + ".vocab", encoding="utf-8") as f:
            vocab_lines = sum(1 for _ in f)
        complete = model.get_piece_size() == vocab_size == vocab_lines
    except (OSError, RuntimeError, UnicodeDecodeError):
        complete = False
    if not complete:
        raise VocabError(
            f"The vocabulary written to {folder} is incomplete (is the disk full?); nothing "
            "was replaced. Free some space and run again."
        )


def main(argv=None):
    """Command line entry point: parses flags and calls `train_vocab`."""
    from absl import app, flags

    flags.DEFINE_string("input_file", None, "Text files: comma-separated paths or globs.")
    flags.DEFINE_string("model_prefix", None, "Output prefix; writes PREFIX.model/.vocab.")
    flags.DEFINE_integer("vocab_size", 30000, "Number of pieces, specials included.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the text before training.")
    flags.DEFINE_integer("input_sentence_size", 10_000_000, "Lines sampled (0: all).")
    flags.DEFINE_bool("normalize_text", True, "Apply preprocess_text to every line.")
    flags.DEFINE_integer("random_seed", 12345, "Seed of the line sampling.")

    def run(_):
        f = flags.FLAGS
        try:
            for name in ("input_file", "model_prefix"):  # one line, not absl's FATAL block
                if not getattr(f, name):
                    raise VocabError(f"--{name} is required.")
            path = train_vocab(
                f.input_file,
                f.model_prefix,
                vocab_size=f.vocab_size,
                do_lower_case=f.do_lower_case,
                input_sentence_size=f.input_sentence_size,
                normalize=f.normalize_text,
                seed=f.random_seed,
            )
        except VocabError as e:  # One line, no traceback; exit 2, as every entry point.
            print(f"python -m albert.data.vocab: error: {e}", file=sys.stderr)
            sys.exit(2)
        print(f"Wrote {path} and {f.model_prefix}.vocab")

    app.run(run, argv=argv)


if __name__ == "__main__":
    main()
