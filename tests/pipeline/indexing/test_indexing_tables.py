"""Table-aware chunking (issue 28): no chunk edge inside a table row, headers carried along."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.pipeline.documents import ChunkSettings, Document
from knowbase.pipeline.indexing.chunking import chunk_documents
from knowbase.pipeline.indexing.tables import TableMap

HEADER = "| Region | Year | Revenue | Staff |\n| --- | --- | --- | --- |"


def _table(n: int, width: int = 1) -> str:
    rows = [
        f"| Region {i} {'north ' * width}| {2000 + i} | {i * 1234:,} | {i % 17} |" for i in range(n)
    ]
    return HEADER + "\n" + "\n".join(rows)


def _row_edges_ok(text: str, start: int, end: int) -> bool:
    tables = TableMap(text)
    return tables.row_around(start) is None and tables.row_around(end) is None


def test_a_table_split_over_chunks_repeats_its_header() -> None:
    text = "# Results\n\nThe yearly figures follow.\n\n" + _table(120) + "\n\nThe end."
    content, chunks = chunk_documents([Document(text)], ChunkSettings(128, 16))
    in_table = [c for c in chunks if "| Region " in c.text and "| Region |" not in c.text]
    assert len(in_table) >= 3  # the table really is split
    for c in chunks:
        assert content[c.char_start : c.char_end] == c.text  # the slice stays verbatim
        assert _row_edges_ok(content, c.char_start, c.char_end)
        starts_in_body = c.text.startswith("| Region ") and not c.text.startswith("| Region |")
        assert c.table_header == (HEADER if starts_in_body else ""), c.text[:60]
        assert HEADER not in c.text or c.table_header == ""
    assert chunks[0].table_header == ""


def test_the_token_cap_keeps_rows_whole_and_headers_too() -> None:
    text = _table(80, width=3)
    words = lambda s: len(s.split())  # noqa: E731 - the tokenizer stand-in
    settings = ChunkSettings(chunk_size=1024, chunk_overlap=100, token_cap=60)
    content, chunks = chunk_documents([Document(text)], settings, count_tokens=words)
    assert len(chunks) > 5
    for c in chunks:
        assert words(c.text) <= 60
        assert _row_edges_ok(content, c.char_start, c.char_end)
        assert c.table_header in ("", HEADER)
    assert all(c.table_header == HEADER for c in chunks[1:])


def test_a_row_longer_than_a_chunk_is_still_cut() -> None:
    text = HEADER + "\n| " + "word " * 600 + "| 1 | 2 | 3 |"
    _, chunks = chunk_documents([Document(text)], ChunkSettings(64, 8))
    assert len(chunks) > 3
    assert "".join(c.text for c in chunks).count("word") >= 600


def test_header_and_separator_are_never_parted() -> None:
    # The cut would naturally land between the header row and its separator line.
    text = "x " * 230 + "\n" + _table(3)
    _, chunks = chunk_documents([Document(text)], ChunkSettings(128, 0))
    for c in chunks:
        assert not c.text.startswith("| --- |")


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 60),
    width=st.integers(0, 4),
    size=st.integers(24, 300),
    overlap=st.integers(0, 40),
    prose=st.integers(0, 400),
)
def test_chunk_edges_never_fall_inside_a_row(rows, width, size, overlap, prose) -> None:
    text = "Intro words " * prose + "\n\n" + _table(rows, width) + "\n\nOutro."
    settings = ChunkSettings(chunk_size=size, chunk_overlap=min(overlap, size - 1))
    content, chunks = chunk_documents([Document(text)], settings)
    for c in chunks:  # every row here is shorter than the smallest chunk
        assert content[c.char_start : c.char_end] == c.text
        assert _row_edges_ok(content, c.char_start, c.char_end)
