"""Streaming document readers: both formats, bad input, bounded lines / documents / units."""

from pathlib import Path

import pytest

from albert.data.corpus import (
    CorpusError,
    CorpusStats,
    check_text_file,
    read_documents,
    read_lines,
    read_units,
    split_sentences,
)

SHARED_CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "corpus"


def _documents(tmp_path, content: bytes, **kwargs):
    path = tmp_path / "input.txt"
    path.write_bytes(content)
    stats = CorpusStats()
    return list(read_documents(str(path), stats, **kwargs)), stats


def test_original_format_blank_lines_separate_documents(tmp_path):
    text = b"\n\nA one.\r\nA two.\n\n\n  \nB one.\nB two.\nB three.\n"
    documents, stats = _documents(tmp_path, text)
    assert documents == [["A one.", "A two."], ["B one.", "B two.", "B three."]]
    assert stats.documents == 2 and stats.files == 1 and stats.empty_files == 0


def test_wikiextractor_blocks_are_documents_without_the_title_line(tmp_path):
    text = (
        '<doc id="1" url="u" title="Rock &amp; Roll">\nRock & Roll\n\n'
        "Rock is loud. It began in 1950! Fans say “yes”. Mr. Smith agreed.\n\n"
        "Second paragraph.\n</doc>\n"
        '<doc id="2" url="u" title="B">\nB\nOnly sentence here\n</doc>\n'
    )
    documents, stats = _documents(tmp_path, text.encode())
    assert documents == [
        [
            "Rock is loud.",
            "It began in 1950!",
            "Fans say “yes”.",
            "Mr.",
            "Smith agreed.",
            "Second paragraph.",
        ],
        ["Only sentence here"],
    ]
    assert stats.documents == 2


def test_a_title_with_unescaped_quotes_is_still_dropped(tmp_path):
    text = '<doc id="1" url="u" title=""Weird Al" Yankovic">\n"Weird Al" Yankovic\n\nHe sings.\n</doc>\n'
    documents, _ = _documents(tmp_path, text.encode())
    assert documents == [["He sings."]]


def test_a_wikiextractor_file_that_starts_inside_an_article(tmp_path):
    # WikiExtractor output cut with `split -l` into shards: the second shard starts in the
    # middle of an article. Its closing tag is markup, never a sentence.
    text = (
        "Rock is loud. It began in 1950!\n</doc>\n"
        '<doc id="2" url="u" title="B">\nB\nOne sentence. And two.\n</doc>\n'
    )
    documents, _ = _documents(tmp_path, text.encode())
    assert documents == [["Rock is loud. It began in 1950!"], ["One sentence.", "And two."]]


def test_a_utf8_byte_order_mark_is_not_text(tmp_path):
    # Windows editors save UTF-8 with a byte-order mark: the <doc> line after it is markup.
    text = '<doc id="2" url="u" title="B">\nB\n\nOne sentence. And two.\n</doc>\n'
    with_mark, _ = _documents(tmp_path, b"\xef\xbb\xbf" + text.encode())
    assert with_mark == [["One sentence.", "And two."]]
    lines = list(read_lines(str(tmp_path / "input.txt"), CorpusStats()))
    assert lines[0] == '<doc id="2" url="u" title="B">'


def test_split_sentences():
    assert split_sentences('He said "Go." Then 3 left. e.g. this (Really?) "Yes."') == [
        'He said "Go."',
        "Then 3 left. e.g. this (Really?)",
        '"Yes."',
    ]
    assert split_sentences("  ") == []


def test_empty_file_is_counted(tmp_path):
    documents, stats = _documents(tmp_path, b"\n \n\n")
    assert documents == [] and stats.empty_files == 1
    documents, stats = _documents(tmp_path, b"")
    assert documents == [] and stats.empty_files == 1


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    documents, stats = _documents(tmp_path, b"good\nbad \xff\xfe byte\nfine \xc3\xa9\n")
    assert documents == [["good", "bad \ufffd\ufffd byte", "fine é"]]
    assert stats.invalid_utf8_lines == 1 and stats.lines == 3


def test_overlong_lines_come_in_pieces_without_breaking_characters(tmp_path):
    long_line = "é" * 25 + "x"  # 51 bytes; pieces of at most 10 bytes would split an "é".
    text = f"short\n{long_line}\nafter\n\nnext doc\n".encode()
    documents, stats = _documents(tmp_path, text, max_line_bytes=10)
    first = documents[0]
    assert first[0] == "short" and first[-1] == "after" and "".join(first[1:-1]) == long_line
    assert all(len(piece.encode()) <= 10 for piece in first[1:-1])
    assert documents[1] == ["next doc"]
    assert stats.long_lines == 1 and stats.invalid_utf8_lines == 0


def test_line_exactly_at_the_limit_is_not_a_document_break(tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes(b"0123456789\nsame doc\n")
    stats = CorpusStats()
    assert list(read_lines(str(path), stats, max_line_bytes=10)) == ["0123456789", "same doc"]
    documents, _ = _documents(tmp_path, b"0123456789\nsame doc\n", max_line_bytes=10)
    assert documents == [["0123456789", "same doc"]]


def test_overlong_documents_are_cut_at_sentences(tmp_path):
    text = "\n".join(f"sentence {i}" for i in range(10)).encode()  # 10 chars each.
    documents, stats = _documents(tmp_path, text, max_document_chars=30)
    assert [len(d) for d in documents] == [3, 3, 3, 1]
    assert stats.long_documents == 3 and stats.documents == 4


def test_units_group_whole_documents(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("".join(f"doc {d} sentence.\nmore.\n\n" for d in range(7)))  # 20 chars each.
    stats = CorpusStats()
    units = list(read_units(str(path), stats, unit_chars=50))
    assert [len(u) for u in units] == [3, 3, 1]
    assert units[0][0] == ["doc 0 sentence.", "more."]
    assert stats.documents == 7


def test_shared_samples():
    if not SHARED_CORPUS.is_dir():
        pytest.skip("shared/data/corpus is not present")
    stats = CorpusStats()
    wiki = list(read_documents(str(SHARED_CORPUS / "wiki_00"), stats))
    assert len(wiki) == 1 and len(wiki[0]) > 100
    assert wiki[0][0].startswith("Anarchism is a political philosophy")
    sample = list(read_documents(str(SHARED_CORPUS / "sample_text.txt"), stats))
    assert len(sample) == 3 and stats.invalid_utf8_lines == 0
    assert "力加勝北区" in sample[0][0]


def test_cr_only_line_endings_are_refused_but_crlf_and_stray_crs_read(tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes(b"One.\rTwo.\r\rThree.\r")
    with pytest.raises(CorpusError, match=r"input.txt has CR \(\\r\) line endings"):
        check_text_file(str(path))
    for text in (b"One.\r\nTwo.\r\n\r\nThree.\r\n", b"One\rtwo.\nThree.\n", b"One.\r", b"One."):
        path.write_bytes(text)
        check_text_file(str(path))


def test_one_stray_cr_in_a_first_line_longer_than_the_sample_is_no_line_ending(tmp_path):
    # Web text may hold a stray CR; a first line past the 64 KB sample showed no LF, and the
    # file was refused as CR-only.
    path = tmp_path / "input.txt"
    path.write_bytes(b"word " * 300 + b"\r" + b"word " * 20_000 + b"\nNext.\n")
    check_text_file(str(path))
    check_text_file(str(path), sniff_bytes=1024)
    path.write_bytes(b"One.\rTwo.\r" * 200)  # Lines end at CRs all through the sample.
    with pytest.raises(CorpusError, match="has CR"):
        check_text_file(str(path), sniff_bytes=1024)


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\n\n"])
def test_cr_only_text_ending_with_a_newline_is_refused(tmp_path, end):
    # An editor or `echo >>` often adds one final "\n" to a CR-only file: the sample then held
    # an LF and the whole file read as one line, its documents never split.
    path = tmp_path / "input.txt"
    path.write_bytes(b"One.\rTwo.\r\rThree.\rFour." + end)
    with pytest.raises(CorpusError, match="has CR"):
        check_text_file(str(path))
    path.write_bytes(b"Web one.\rstill one.\nTwo.\nThree\r.\n\nFour.\r\n" + end)
    check_text_file(str(path))  # Stray CRs in text broken at "\n" are no line endings.


def test_cr_only_text_past_the_sample_is_counted(tmp_path):
    # check_text_file judges the first 64 KB; CR-only text after it (files concatenated from
    # several sources) reads as one line per block, so the summary must show it.
    path = tmp_path / "input.txt"
    path.write_bytes(b"One.\nTwo.\n\n" * 8 + b"Mac one.\rMac two.\rMac three.\r\nLast.\r\n")
    stats = CorpusStats()
    lines = list(read_lines(str(path), stats))
    assert stats.cr_lines == 1 and lines[-1] == "Last." and len(lines) == 26


def test_double_cr_line_endings_with_a_stray_cr_are_read_not_refused(tmp_path):
    # "\r\r\n" (CRLF text written again in Windows text mode) reads line by line: each line's
    # first CR is not part of a CRLF, so one stray CR in web text made the lone CRs outnumber
    # the LFs and the file was refused as CR-only.
    path = tmp_path / "input.txt"
    path.write_bytes(b"Web page one,\rscraped.\r\r\nSecond line.\r\r\n\r\r\nNext doc.\r\r\n")
    check_text_file(str(path))
    stats = CorpusStats()
    assert list(read_lines(str(path), stats)) == [
        "Web page one,\rscraped.",
        "Second line.",
        "",
        "Next doc.",
    ]
    assert stats.cr_lines == 0


def test_utf32_is_named_as_utf32_not_utf16(tmp_path):
    # UTF-32 LE starts with the UTF-16 LE mark (FF FE) then 00 00: the longer mark must win.
    path = tmp_path / "input.txt"
    for encoding in ("utf-32-le", "utf-32-be"):
        path.write_bytes("\ufeffHello world.\n".encode(encoding))
        with pytest.raises(CorpusError, match="is UTF-32 text"):
            check_text_file(str(path))


def test_as_many_stray_crs_as_line_feeds_is_not_cr_only_text(tmp_path):
    # CR-only text has more lone CRs than LFs; a tie is text broken at "\n" with stray CRs.
    path = tmp_path / "input.txt"
    path.write_bytes(b"Line one\rwith a stray CR.\nLine two\rwith another.\n")
    check_text_file(str(path))


def test_lines_holding_nul_bytes_are_not_text(tmp_path):
    # Valid UTF-8, but NUL bytes on most lines: a binary file, not a corpus.
    path = tmp_path / "input.txt"
    path.write_bytes(b"ab\0cd\nef\0gh\nfine line\n")
    with pytest.raises(CorpusError, match="2 of the first 3 lines"):
        check_text_file(str(path))


def test_a_character_cut_by_the_end_of_the_sample_is_not_invalid(tmp_path):
    # One long line of 3-byte characters: the sample ends inside one, with no "\n" to cut at.
    path = tmp_path / "input.txt"
    path.write_bytes("€".encode() * 100 + b"\n")
    check_text_file(str(path), sniff_bytes=32)  # 10 characters and 2 bytes of the 11th.


def test_a_multibyte_character_split_between_pieces_is_carried_whole(tmp_path):
    long_line = "€" * 20 + "x"  # Pieces of 10 bytes end inside a 3-byte character.
    path = tmp_path / "input.txt"
    path.write_bytes(f"{long_line}\n".encode())
    stats = CorpusStats()
    pieces = list(read_lines(str(path), stats, max_line_bytes=10))
    assert "".join(pieces) == long_line and len(pieces) > 1
    assert stats.invalid_utf8_lines == 0


def test_title_is_dropped_only_as_the_first_line_of_its_block(tmp_path):
    text = (
        '<doc id="1" url="u" title="Echo">\nEcho\nEcho\nIt repeats.\n</doc>\n'
        '<doc id="2" url="u" title="Delta">\nA delta is a landform.\nDelta\n</doc>\n'
        '<doc id="3" url="u" title="AT&amp;T">\nAT&amp;T\nA company.\n</doc>\n'
    )
    documents, _ = _documents(tmp_path, text.encode())
    assert documents == [
        ["Echo", "It repeats."],
        ["A delta is a landform.", "Delta"],
        ["A company."],
    ]


def test_original_format_after_a_wikiextractor_block(tmp_path):
    # After </doc>, blank lines separate documents again.
    text = '<doc id="1" url="u" title="A">\nA\nWiki one.\n\nWiki two.\n</doc>\nB one.\n\nC one.\n'
    documents, _ = _documents(tmp_path, text.encode())
    assert documents == [["Wiki one.", "Wiki two."], ["B one."], ["C one."]]


def test_a_file_with_text_then_blank_lines_is_not_empty(tmp_path):
    _, stats = _documents(tmp_path, b"One.\nTwo.\n\n \n")
    assert stats.empty_files == 0


def test_sentences_split_before_a_digit():
    assert split_sentences("It ended. 1990 was calm.") == ["It ended.", "1990 was calm."]


def test_a_unit_ends_when_it_reaches_unit_chars_exactly(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("".join(f"doc {d} sentence.\nmore.\n\n" for d in range(4)))  # 20 chars each.
    units = list(read_units(str(path), CorpusStats(), unit_chars=40))
    assert [len(u) for u in units] == [2, 2]
