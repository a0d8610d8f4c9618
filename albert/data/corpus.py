"""Streaming readers for pretraining text: lines -> documents -> units of work.

Two input formats are read, and may be mixed within a file:

- The original's: one sentence per line, a blank line between documents.
- WikiExtractor output: each `<doc id=.. url=.. title=..>` ... `</doc>` block is one document
  whose lines are paragraphs (blank lines between paragraphs are ignored). The first line of a
  block repeats the article title; it is dropped, since it is not a sentence and would
  otherwise glue a one-word segment to every article. Paragraphs are split into sentences at
  ".", "!" or "?" followed by white space and an upper-case letter, digit or opening quote:
  SOP needs several segments per chunk, and a paragraph is often longer than a whole chunk.
  The split is naive ("Mr. Smith" splits); a wrong split only moves an A/B boundary.
  A `</doc>` line ends a document even outside a block (a file cut from WikiExtractor
  output may start inside an article; the lines before it are read as the original format).

Nothing here holds more than one unit of work in memory:
- A line longer than `max_line_bytes` is cut into pieces, each a sentence of its own
  (counted once per line as `long_lines`).
- A document longer than `max_document_chars` is cut at a sentence into several documents
  (counted as `long_documents`).
- Documents are grouped into units of at least `unit_chars` characters (the last one of a
  file may be smaller). A unit is what a worker turns into instances on its own, and where
  the "random other document" of SOP / NSP comes from.

Invalid UTF-8 is replaced with U+FFFD and the lines holding it are counted. Lines holding
several lone CRs are counted too: CR-only text after the part `check_text_file` samples.
"""

from __future__ import annotations

import codecs
import dataclasses
import glob
import html
import io
import os
import re

from albert.errors import AlbertError
from albert.fileio import is_remote

# Far above a real sentence or WikiExtractor paragraph; only broken input reaches these.
MAX_LINE_BYTES = 1 << 16
MAX_DOCUMENT_CHARS = 1 << 18
# ~32k tokens: at dupe_factor 40 a unit's records are ~10 MB (seq 128) and its documents give
# the random "other document" a few dozen Wikipedia articles to choose from.
UNIT_CHARS = 1 << 17

# How much of each file is sniffed up front for a wrong encoding or binary data.
SNIFF_BYTES = 1 << 16
_WIDE_BOMS = {
    codecs.BOM_UTF32_LE: "UTF-32",  # Before UTF-16: it starts with the UTF-16 LE mark.
    codecs.BOM_UTF32_BE: "UTF-32",
    codecs.BOM_UTF16_LE: "UTF-16",
    codecs.BOM_UTF16_BE: "UTF-16",
}

_DOC_START = re.compile(r"^<doc\b[^>]*>$")
# The title is the tag's last attribute, and WikiExtractor does not escape a `"` within it
# (`title=""Weird Al" Yankovic"`): everything up to the last quote before `>` is the title.
_DOC_TITLE = re.compile(r'\btitle="(.*)"\s*>$')
_DOC_END = "</doc>"
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


class CorpusError(AlbertError):
    """An input file that is not UTF-8 text."""


def open_binary(path: str):
    """Opens a local file with `open`, a gs:// (or other) file with `tf.io.gfile.GFile`.

    Only remote paths import TensorFlow, so local worker processes stay light.
    """
    if is_remote(path):
        return io.BufferedReader(_GFileReader(path), buffer_size=1 << 20)
    return open(path, "rb")


class _GFileReader(io.RawIOBase):
    """`tf.io.gfile.GFile` as a raw binary stream, so `readline(size)` works as on a file."""

    def __init__(self, path):
        import tensorflow as tf

        self._file = tf.io.gfile.GFile(path, "rb")

    def readable(self):
        return True

    def readinto(self, buffer):
        data = self._file.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self):
        self._file.close()
        super().close()


def file_size(path: str) -> int:
    """Bytes in a local or remote file."""
    if is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.stat(path).length
    return os.path.getsize(path)


def glob_files(pattern: str) -> list:
    """Sorted files matching a local or remote glob (folders left out for local ones)."""
    if is_remote(pattern):
        import tensorflow as tf

        return sorted(p for p in tf.io.gfile.glob(pattern) if not tf.io.gfile.isdir(p))
    return sorted(p for p in glob.glob(pattern) if os.path.isfile(p))


def check_text_file(path: str, sniff_bytes: int = SNIFF_BYTES) -> None:
    """Raises CorpusError when the start of `path` is UTF-16/32 or binary rather than UTF-8,
    or has CR-only line endings.

    Lines of invalid UTF-8 are tolerated in a text file (they are replaced and counted), but
    when most lines of the first `sniff_bytes` are invalid or hold NUL bytes the file is not
    text, and tokenizing it would make instances of `<unk>`.
    """
    with open_binary(path) as f:
        head = f.read(sniff_bytes)
    for bom, name in _WIDE_BOMS.items():
        if head.startswith(bom):
            raise CorpusError(
                f"{path} is {name} text (it starts with a {name} byte-order mark); convert it "
                f"to UTF-8 first, e.g. iconv -f {name} -t UTF-8."
            )
    # Lines end at "\n" only (as the original's): a CR-only file would be one line, cut into
    # 64 KB "sentences" (or one sentence, skipped), and its documents never split. A file whose
    # line breaks are mostly lone CRs is one, even if it ends with a "\n"; stray CRs in text
    # broken at "\n" (web text), or one in a first line longer than the sample, end no line.
    # CRs that end a line before its "\n" are not counted, as `read_lines` strips them: "\r\r\n"
    # (CRLF text written again in Windows text mode) holds a CR outside any CRLF on every line.
    crs = re.sub(b"\r+\n", b"\n", head).rstrip(b"\r").count(b"\r")
    lfs = head.count(b"\n")
    if (crs > 1 and crs > lfs) or (crs and not lfs and len(head) < sniff_bytes):
        raise CorpusError(
            f"{path} has CR (\\r) line endings, as old Mac editors write; convert it to \\n "
            "(or \\r\\n) line endings first, e.g. tr '\\r' '\\n'."
        )
    if len(head) == sniff_bytes:  # Do not judge a line cut off at the end of the sample.
        head = head[: head.rfind(b"\n") + 1] or head[: len(head) - _incomplete_utf8_tail(head)]
    lines = [line for line in head.split(b"\n") if line.strip()]
    bad = 0
    for line in lines:
        try:
            line.decode("utf-8")
            bad += b"\0" in line
        except UnicodeDecodeError:
            bad += 1
    if lines and bad * 2 > len(lines):
        raise CorpusError(
            f"{path} does not look like UTF-8 text: {bad} of the first {len(lines)} lines are "
            "invalid UTF-8 or hold NUL bytes; pass text files (one sentence per line)."
        )


@dataclasses.dataclass
class CorpusStats:
    """What the readers saw, summed over the files read with it."""

    files: int = 0
    empty_files: int = 0
    lines: int = 0
    invalid_utf8_lines: int = 0
    long_lines: int = 0
    long_documents: int = 0
    documents: int = 0
    cr_lines: int = 0  # Lines (or pieces of one) holding 2+ lone CRs: CR-only text past the sample.


def _incomplete_utf8_tail(data: bytes) -> int:
    """How many bytes at the end of `data` start a UTF-8 character that continues later."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # Not a continuation byte: the character starts here.
            needed = 2 if byte >= 0xC0 else 1
            needed = 3 if byte >= 0xE0 else needed
            needed = 4 if byte >= 0xF0 else needed
            return back if needed > back else 0
    return 0


def read_lines(path: str, stats: CorpusStats, max_line_bytes: int = MAX_LINE_BYTES):
    """Yields the lines of a file as str without the line ending.

    Lines longer than `max_line_bytes` come in pieces (at a character boundary). Invalid UTF-8
    becomes U+FFFD. A UTF-8 byte-order mark at the start of the file is dropped (it would
    otherwise hide a `<doc>` line).
    """
    carry = b""
    in_long_line = False
    first = True
    with open_binary(path) as f:
        while True:
            data = carry + f.readline(max_line_bytes)
            carry = b""
            if not data:
                return
            if data.endswith(b"\n"):
                data = data[:-1]
                if in_long_line and not data.strip():
                    in_long_line = False
                    continue  # Only the end of an overlong line: not a blank line.
                in_long_line = False
            elif len(data) >= max_line_bytes:  # A piece of an overlong line.
                stats.long_lines += not in_long_line
                in_long_line = True
                tail = _incomplete_utf8_tail(data)
                if tail:
                    data, carry = data[:-tail], data[-tail:]
            stats.lines += 1
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                stats.invalid_utf8_lines += 1
                text = data.decode("utf-8", errors="replace")
            if first:
                text, first = text.removeprefix("\ufeff"), False
            text = text.rstrip("\r")
            stats.cr_lines += text.count("\r") > 1
            yield text


def split_sentences(paragraph: str) -> list:
    """Naive sentence split of a WikiExtractor paragraph (see the module docstring)."""
    sentences = []
    start = 0
    for match in _SENTENCE_END.finditer(paragraph):
        sentences.append(paragraph[start : match.end()].strip())
        start = match.end()
    sentences.append(paragraph[start:].strip())
    return [s for s in sentences if s]


class _DocumentBuilder:
    """Collects sentences; hands out documents, cut when they grow past a size."""

    def __init__(self, stats, max_document_chars):
        self.stats = stats
        self.max_document_chars = max_document_chars
        self.sentences = []
        self.chars = 0

    def add(self, sentence):
        """Adds a sentence; returns a finished (overlong) document or None."""
        self.sentences.append(sentence)
        self.chars += len(sentence)
        if self.chars >= self.max_document_chars:
            self.stats.long_documents += 1
            return self.finish()
        return None

    def finish(self):
        """The document so far (list of sentences), or None if it is empty."""
        document, self.sentences, self.chars = self.sentences, [], 0
        if document:
            self.stats.documents += 1
            return document
        return None


def read_documents(
    path: str,
    stats: CorpusStats,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_document_chars: int = MAX_DOCUMENT_CHARS,
):
    """Yields the documents of one file, each a list of sentences (str, non-empty).

    Args:
        path: a local text file in either format of the module docstring.
        stats: counters to update.
        max_line_bytes: longer lines are cut into pieces.
        max_document_chars: longer documents are cut into several.
    """
    stats.files += 1
    builder = _DocumentBuilder(stats, max_document_chars)
    in_wiki_doc = False
    title = None  # The title line still expected at the top of a <doc> block.
    any_text = False
    for line in read_lines(path, stats, max_line_bytes):
        stripped = line.strip()
        any_text = any_text or bool(stripped)
        finished = None
        if _DOC_START.match(stripped):
            finished = builder.finish()
            in_wiki_doc = True
            match = _DOC_TITLE.search(stripped)
            title = html.unescape(match.group(1)).strip() if match else None
        elif stripped == _DOC_END:
            # Outside a block too: a file cut from WikiExtractor output (`split -l`) may start
            # inside an article, whose end tag is markup, not a sentence.
            finished = builder.finish()
            in_wiki_doc = False
        elif not stripped:
            if not in_wiki_doc:  # A blank line ends a document in the original format.
                finished = builder.finish()
        elif in_wiki_doc:
            if title is not None and html.unescape(stripped) == title:
                title = None
                continue
            title = None
            for sentence in split_sentences(stripped):
                if document := builder.add(sentence):
                    yield document
        else:
            finished = builder.add(stripped)
        if finished:
            yield finished
    if finished := builder.finish():
        yield finished
    if not any_text:
        stats.empty_files += 1


def read_units(path: str, stats: CorpusStats, unit_chars: int = UNIT_CHARS, **kwargs):
    """Yields the units of work of one file: lists of documents of >= unit_chars characters.

    Args:
        path, stats: as read_documents.
        unit_chars: characters a unit reaches before it is handed out (the last may be less).
        **kwargs: max_line_bytes / max_document_chars for read_documents.
    """
    unit = []
    chars = 0
    for document in read_documents(path, stats, **kwargs):
        unit.append(document)
        chars += sum(len(s) for s in document)
        if chars >= unit_chars:
            yield unit
            unit, chars = [], 0
    if unit:
        yield unit
