"""SentencePiece vocabulary training with the original ALBERT settings."""

import errno
import os
import random
import subprocess
import sys

import pytest
import sentencepiece as spm

from albert.data import vocab as vocab_lib
from albert.data.vocab import (
    USER_DEFINED_SYMBOLS,
    VocabError,
    expand_input_files,
    iterate_sentences,
    train_vocab,
)
from tests.helpers import train_tiny_spm

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_CORPUS = os.path.join(os.path.dirname(REPO), "shared", "data", "corpus")

SYLLABLES = "ka ri mon tel sa vu po len dra gi ost ur fe lim bor na qui zet hal".split()
ACCENTED = ["Ærøskøbing", "café", "naïve", "Zürich", "Zoë"]


def make_words(rng, count=150):
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(count)]
    return [w.capitalize() if i % 7 == 0 else w for i, w in enumerate(words)] + ACCENTED


def write_corpus(directory, num_docs=40, seed=3):
    """Two files: the pretraining text format and WikiExtractor output."""
    rng = random.Random(seed)
    words = make_words(rng)
    plain, wiki = [], []
    for doc in range(num_docs):
        sentences = [
            " ".join(rng.choice(words) for _ in range(rng.randint(4, 12)))
            + f" ({rng.randint(1, 99)},{rng.randint(100, 999)}) - £{doc}. €{doc}"
            for _ in range(rng.randint(3, 8))
        ]
        plain += sentences + [""]
        wiki += [f'<doc id="{doc}" url="https://x/?curid={doc}" title="T{doc}">', f"T{doc}", ""]
        wiki += sentences + ["</doc>"]
    os.makedirs(os.path.join(directory, "wiki"), exist_ok=True)
    with open(os.path.join(directory, "plain.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(plain) + "\n")
    with open(os.path.join(directory, "wiki", "wiki_00"), "w", encoding="utf-8") as f:
        f.write("\n".join(wiki) + "\n")
    return f"{directory}/plain.txt,{directory}/wiki/wiki_*"


def assert_albert_layout(model_path, vocab_size):
    sp = spm.SentencePieceProcessor(model_file=model_path)
    assert sp.get_piece_size() == vocab_size
    pieces = [sp.id_to_piece(i) for i in range(5)]
    assert pieces == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, -1, -1)
    assert all(sp.is_control(i) for i in (0, 2, 3, 4)) and sp.is_unknown(1)
    for symbol in USER_DEFINED_SYMBOLS:
        assert sp.piece_to_id(symbol) != sp.unk_id(), symbol
    # User symbols are always pieces of their own.
    assert {"(", ")", "£"} <= set(sp.encode("a(b)c£d", out_type=str))
    assert os.path.isfile(model_path[: -len(".model")] + ".vocab")
    return sp


def test_train_vocab_has_original_layout(tmp_path):
    inputs = write_corpus(str(tmp_path))
    model_path = train_vocab(inputs, str(tmp_path / "out" / "spm"), vocab_size=300)
    assert model_path == str(tmp_path / "out" / "spm.model")
    sp = assert_albert_layout(model_path, 300)
    pieces = {sp.id_to_piece(i) for i in range(5, 300)}
    # Lower-cased, accent-stripped training text; no WikiExtractor markup learned.
    assert not any(c.isupper() or c in "éüëï" for p in pieces for c in p)
    assert not any("doc" in p or "curid" in p for p in pieces)


def test_train_vocab_is_deterministic_and_cased(tmp_path):
    inputs = write_corpus(str(tmp_path))
    paths = [
        train_vocab(inputs, str(tmp_path / f"m{i}"), vocab_size=250, do_lower_case=False)
        for i in range(2)
    ]
    first, second = (spm.SentencePieceProcessor(model_file=p) for p in paths)
    # The files differ only in the recorded model_prefix; pieces and scores are equal.
    assert [(first.id_to_piece(i), first.get_score(i)) for i in range(250)] == [
        (second.id_to_piece(i), second.get_score(i)) for i in range(250)
    ]
    sp = first
    assert any(c.isupper() for i in range(5, 250) for c in sp.id_to_piece(i))


def test_train_vocab_samples_input_sentences(tmp_path):
    inputs = write_corpus(str(tmp_path), num_docs=80)
    full = train_vocab(inputs, str(tmp_path / "full"), vocab_size=200, input_sentence_size=0)
    sampled = train_vocab(inputs, str(tmp_path / "s"), vocab_size=200, input_sentence_size=150)
    assert_albert_layout(sampled, 200)
    full, sampled = (spm.SentencePieceProcessor(model_file=p) for p in (full, sampled))
    # 150 of several hundred lines: a different model.
    assert [full.id_to_piece(i) for i in range(200)] != [sampled.id_to_piece(i) for i in range(200)]


def test_iterate_sentences_skips_markup_and_normalises(tmp_path):
    files = expand_input_files(write_corpus(str(tmp_path), num_docs=2))
    lines = list(iterate_sentences(files, do_lower_case=True))
    assert lines and all(line for line in lines)
    assert not any(line.startswith("<doc") or line == "</doc>" for line in lines)
    assert all(line == line.lower() for line in lines)
    assert "t0" in lines  # WikiExtractor's title line is text.
    raw = list(iterate_sentences(files, normalize=False))
    assert any("é" in line for line in raw) and not any("é" in line for line in lines)
    # Lazy: lines of the first file come out before the missing second one is opened.
    stream = iterate_sentences([files[0], str(tmp_path / "missing.txt")])
    assert next(stream)


def test_expand_input_files_and_errors(tmp_path):
    write_corpus(str(tmp_path))
    files = expand_input_files(f" {tmp_path}/wiki/*, {tmp_path}/plain.txt")
    assert [os.path.basename(f) for f in files] == ["wiki_00", "plain.txt"]
    with pytest.raises(VocabError, match="input_file.*nothing.txt.*matches no file"):
        expand_input_files(f"{tmp_path}/plain.txt,{tmp_path}/nothing.txt")
    with pytest.raises(VocabError, match="input_file.*empty"):
        expand_input_files(" , ")
    with pytest.raises(VocabError, match="input_sentence_size.*Received: 50"):
        train_vocab(f"{tmp_path}/plain.txt", str(tmp_path / "m"), input_sentence_size=50)
    with pytest.raises(VocabError, match="input_sentence_size.*Received: -1"):
        train_vocab(f"{tmp_path}/plain.txt", str(tmp_path / "m"), input_sentence_size=-1)
    with pytest.raises(VocabError, match="vocab_size=100000.*too high"):
        train_vocab(f"{tmp_path}/plain.txt", str(tmp_path / "m"), vocab_size=100000)


def test_train_tiny_spm_helper(tmp_path):
    first = train_tiny_spm(tmp_path / "a")
    second = train_tiny_spm(tmp_path / "b")
    assert_albert_layout(first, 99)
    with open(first, "rb") as f, open(second, "rb") as g:
        assert f.read() == g.read()


def test_shared_corpus(tmp_path):
    if not os.path.isdir(SHARED_CORPUS):
        pytest.skip(f"{SHARED_CORPUS} not present")
    model_path = train_vocab(f"{SHARED_CORPUS}/*", str(tmp_path / "wiki"), vocab_size=400)
    sp = assert_albert_layout(model_path, 400)
    assert "▁anarchism" in {sp.id_to_piece(i) for i in range(400)}


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "albert.data.vocab", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=120,
    )


def test_command_line(tmp_path):
    inputs = write_corpus(str(tmp_path))
    prefix = str(tmp_path / "cli" / "30k-clean")
    args = [f"--input_file={inputs}", f"--model_prefix={prefix}", "--vocab_size=220"]
    result = run_cli(*args, "--nodo_lower_case")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Wrote" in result.stdout
    sp = assert_albert_layout(prefix + ".model", 220)
    assert any(c.isupper() for i in range(5, 220) for c in sp.id_to_piece(i))  # --nodo_lower_case


def test_command_line_error_is_one_line(tmp_path):
    result = run_cli(f"--input_file={tmp_path}/none.txt", f"--model_prefix={tmp_path}/m")
    assert result.returncode == 2  # As every entry point's one-line errors.
    assert result.stderr.strip().splitlines()[-1] == (
        f"python -m albert.data.vocab: error: `input_file` pattern '{tmp_path}/none.txt' "
        "matches no file; check the path."
    )
    assert "Traceback" not in result.stderr


def _mount_tmpfs(path, size):
    """Mounts a tmpfs of `size` bytes at `path`; False when this process may not mount."""
    if os.geteuid() != 0:
        return False
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)])
    return done.returncode == 0


def test_full_disk_keeps_the_earlier_model(tmp_path, monkeypatch):
    text = write_corpus(tmp_path)
    earlier = train_vocab(text, str(tmp_path / "earlier" / "m"), vocab_size=120, num_threads=1)
    earlier_bytes = {e: open(earlier[:-6] + e, "rb").read() for e in (".model", ".vocab")}
    disk = tmp_path / "disk"
    if _mount_tmpfs(disk, len(earlier_bytes[".model"]) + len(earlier_bytes[".vocab"]) + 4096):
        try:  # A real full disk: room for the earlier model, not for a second one.
            for extension, data in earlier_bytes.items():
                (disk / ("m" + extension)).write_bytes(data)
            with pytest.raises(VocabError, match=r"\(no space left on device\); nothing was"):
                train_vocab(text, str(disk / "m"), vocab_size=120, num_threads=1)
            assert {e: (disk / ("m" + e)).read_bytes() for e in earlier_bytes} == earlier_bytes
            assert sorted(os.listdir(disk)) == ["m.model", "m.vocab"]
        finally:
            subprocess.run(["umount", str(disk)], check=True)
        return

    # Not root: the model's write fails as on a full disk.
    def full_disk_open(path, mode="r", **kwargs):
        if path.endswith(".model") and "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return open(path, mode, **kwargs)

    monkeypatch.setattr(vocab_lib, "open", full_disk_open, raising=False)
    with pytest.raises(VocabError, match=r"\(no space left on device\); nothing was"):
        train_vocab(text, earlier[: -len(".model")], vocab_size=120, num_threads=1)
    assert not [n for n in os.listdir(os.path.dirname(earlier)) if ".tmp-" in n]
    assert {e: open(earlier[:-6] + e, "rb").read() for e in earlier_bytes} == earlier_bytes


def test_unwritable_model_prefix_folder_is_a_vocab_error(tmp_path, monkeypatch):
    # As root a chmod'ed folder stays writable: the read-only mount's error is injected.
    text = write_corpus(tmp_path)
    folder = tmp_path / "ro" / "sub"

    def read_only(directory, exist_ok=False):
        raise OSError(errno.EROFS, "Read-only file system", directory)

    monkeypatch.setattr(os, "makedirs", read_only)
    with pytest.raises(VocabError, match=f"^Cannot create {folder} .*read-only file system"):
        train_vocab(text, str(folder / "m"), vocab_size=120, num_threads=1)


def test_folders_a_glob_matches_are_left_out(tmp_path):
    # `--input_file='text/*'` over a folder that also holds a subfolder: what
    # create_pretraining_data accepts for the same corpus (it reads files only).
    (tmp_path / "text" / "sub").mkdir(parents=True)
    (tmp_path / "text" / "a.txt").write_text("One sentence.\n")
    assert expand_input_files(f"{tmp_path}/text/*") == [f"{tmp_path}/text/a.txt"]
    with pytest.raises(VocabError, match="matches no file"):
        expand_input_files(f"{tmp_path}/text/s*")


def test_one_corpus_gives_one_model_file_byte_for_byte(tmp_path):
    # The model stored its (random, temporary) model_prefix, so retraining on the same corpus
    # gave another .model file, and feature caches keyed on its bytes missed.
    text = write_corpus(tmp_path)
    first = train_vocab(text, str(tmp_path / "a" / "m"), vocab_size=120, num_threads=1)
    second = train_vocab(text, str(tmp_path / "b" / "spm"), vocab_size=120, num_threads=1)
    for extension in (".model", ".vocab"):
        with open(first[:-6] + extension, "rb") as a, open(second[:-6] + extension, "rb") as b:
            assert a.read() == b.read(), extension
    # The .vocab is SentencePiece's own, and the model the one it writes under a prefix.
    vocab_lib.spm.set_random_generator_seed(12345)
    spm.SentencePieceTrainer.train(
        sentence_iterator=vocab_lib.iterate_sentences(vocab_lib.expand_input_files(text)),
        model_prefix=str(tmp_path / "own"),
        vocab_size=120,
        model_type="unigram",
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        control_symbols=list(vocab_lib.CONTROL_SYMBOLS),
        user_defined_symbols=list(vocab_lib.USER_DEFINED_SYMBOLS),
        character_coverage=vocab_lib.CHARACTER_COVERAGE,
        input_sentence_size=10_000_000,
        shuffle_input_sentence=True,
        num_threads=1,
        minloglevel=2,
    )
    assert (tmp_path / "own.vocab").read_bytes() == open(first[:-6] + ".vocab", "rb").read()
    own = spm.SentencePieceProcessor(model_file=str(tmp_path / "own.model"))
    ours = spm.SentencePieceProcessor(model_file=first)
    pieces = [(p.id_to_piece(i), p.get_score(i)) for p in (own, ours) for i in range(120)]
    assert pieces[:120] == pieces[120:]


def test_iterate_sentences_splits_lines_as_create_pretraining_data(tmp_path):
    # A byte-order mark must not turn the first `<doc>` tag into text, and lines end at "\n"
    # only, as `albert.data.corpus.read_lines` (the pretraining reader) ends them.
    path = tmp_path / "wiki_00"
    path.write_bytes(
        b'\xef\xbb\xbf<doc id="1" url="u" title="T">\r\nT\r\n\r\nOne\xe2\x80\xa8two\rthree.\r\n'
        b"</doc>\r\nCaf\xe9.\n"
    )
    assert list(iterate_sentences([str(path)], normalize=False)) == [
        "T",
        "One\u2028two\rthree.",
        "Caf\ufffd.",
    ]


def test_a_utf16_corpus_is_one_clear_error_before_training(tmp_path):
    # Read as UTF-8, its NUL bytes cut every line short: SentencePiece trained a model of 47
    # garbage pieces without a word, or asked for a smaller vocab_size (never for a fix).
    write_corpus(str(tmp_path))
    text = (tmp_path / "plain.txt").read_text(encoding="utf-8")
    (tmp_path / "plain.txt").write_bytes(text.encode("utf-16"))
    with pytest.raises(VocabError, match="plain.txt is UTF-16 text.*iconv"):
        train_vocab(f"{tmp_path}/plain.txt", str(tmp_path / "m"), vocab_size=47)
    assert not os.path.exists(tmp_path / "m.model")


def test_a_gs_corpus_trains_the_model_its_local_copy_does(tmp_path):
    # ram:// goes through tf.io.gfile as gs:// does. The lines are read with
    # `corpus.read_lines`, which reads gs://, but the pattern was globbed locally only: "matches
    # no file" for a file that is there.
    import tensorflow as tf

    write_corpus(str(tmp_path))
    remote = f"ram://{tmp_path.name}-vocab"
    tf.io.gfile.makedirs(f"{remote}/wiki")
    for name in ("plain.txt", "wiki/wiki_00"):
        tf.io.gfile.copy(str(tmp_path / name), f"{remote}/{name}")
    assert expand_input_files(f"{remote}/*") == [f"{remote}/plain.txt"]  # not the folder
    local = train_vocab(write_corpus(str(tmp_path)), str(tmp_path / "local"), vocab_size=120)
    gs = train_vocab(f"{remote}/plain.txt,{remote}/wiki/*", str(tmp_path / "gs"), vocab_size=120)
    with open(local, "rb") as a, open(gs, "rb") as b:
        assert a.read() == b.read()


def test_a_gs_model_prefix_gets_the_files_a_local_one_does(tmp_path):
    # ram:// goes through tf.io.gfile as gs:// does: the trainer wrote with `open` and
    # `os.replace` only, so a pod user's `--model_prefix=gs://...` failed after training.
    import tensorflow as tf

    files = write_corpus(str(tmp_path))
    local = train_vocab(files, str(tmp_path / "local" / "m"), vocab_size=120)
    remote = f"ram://{tmp_path.name}-out/vocab/m"
    assert train_vocab(files, remote, vocab_size=120) == remote + ".model"
    for extension in (".model", ".vocab"):
        with (
            tf.io.gfile.GFile(remote + extension, "rb") as f,
            open(local[: -len(".model")] + extension, "rb") as g,
        ):
            assert f.read() == g.read()
    assert sorted(tf.io.gfile.listdir(f"ram://{tmp_path.name}-out/vocab")) == ["m.model", "m.vocab"]


def test_the_originals_user_symbols_and_rare_characters_are_pieces(tmp_path):
    # The original's user symbols (its module docstring), even absent from the corpus; and
    # a character 1 in 5000 of the text: within coverage 0.99995 (0.9995 would drop it).
    rng = random.Random(5)
    words = make_words(rng)[:150]
    lines = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(1500)]
    text = "\n".join(lines)
    rare = max(1, len(text) // 5000)
    lines[:rare] = [line + " ж" for line in lines[:rare]]
    (tmp_path / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = train_vocab(str(tmp_path / "corpus.txt"), str(tmp_path / "m"), vocab_size=150)
    sp = spm.SentencePieceProcessor(model_file=model)
    for symbol in ("(", ")", '"', "-", ".", "–", "£", "€", "ж"):
        assert sp.piece_to_id(symbol) != sp.unk_id(), symbol


def test_input_sentence_size_of_100_is_refused(tmp_path):
    with pytest.raises(VocabError, match="more than 100. Received: 100"):
        train_vocab(write_corpus(str(tmp_path)), str(tmp_path / "m"), input_sentence_size=100)


def test_a_vocab_file_missing_a_piece_keeps_the_earlier_model(tmp_path, monkeypatch):
    text = write_corpus(tmp_path)
    earlier = train_vocab(text, str(tmp_path / "m"), vocab_size=120, num_threads=1)
    earlier_bytes = {e: open(earlier[:-6] + e, "rb").read() for e in (".model", ".vocab")}
    cut_short = vocab_lib._vocab_text
    monkeypatch.setattr(vocab_lib, "_vocab_text", lambda model: cut_short(model).rsplit("\n", 2)[0])
    with pytest.raises(VocabError, match="is incomplete"):
        train_vocab(text, str(tmp_path / "m"), vocab_size=120, num_threads=1)
    assert {e: open(earlier[:-6] + e, "rb").read() for e in earlier_bytes} == earlier_bytes
