"""Markdown sections, heading paths, processed-output page locators; invariants by hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.pipeline.readers import (
    PROCESSED_MARKER,
    read_markdown_text,
    read_processed_markdown,
)
from knowbase.pipeline.readers.markdown import escape_page_headings

pytestmark = pytest.mark.timeout(60)


def test_heading_paths_follow_levels() -> None:
    text = "# A\na\n## B\nb\n### C\nc\n## D\nd\n# E\ne\n"
    docs = read_markdown_text(text)
    assert [d.locator["heading"] for d in docs] == [
        ["A"],
        ["A", "B"],
        ["A", "B", "C"],
        ["A", "D"],
        ["E"],
    ]
    assert docs[2].text == "### C\nc"


def test_heading_only_section_merges_into_its_child() -> None:
    docs = read_markdown_text("# Guide\n\n## Install\n\npip install\n\n# Empty\n")
    assert [(d.locator, d.text) for d in docs] == [
        ({"heading": ["Guide", "Install"]}, "# Guide\n\n## Install\n\npip install"),
        ({"heading": ["Empty"]}, "# Empty"),
    ]


def test_fenced_code_and_front_matter_are_not_headings() -> None:
    text = "---\ntitle: x\n---\n\n```python\n# comment\n```\n\n~~~\n## nope\n~~~\n"
    (doc,) = read_markdown_text(text)
    assert doc.locator == {}
    assert "# comment" in doc.text and "## nope" in doc.text


def test_setext_headings_and_thematic_breaks() -> None:
    docs = read_markdown_text("Title\n=====\n\nbody\n\n---\n\nmore\n\nSub\n---\nx\n")
    assert [d.locator for d in docs] == [{"heading": ["Title"]}, {"heading": ["Title", "Sub"]}]
    assert "---\n\nmore" in docs[0].text


def test_atx_closing_hashes_and_crlf() -> None:
    docs = read_markdown_text("# Title ##\r\nbody\r\n")
    assert docs == [docs[0]] and docs[0].locator == {"heading": ["Title"]}
    assert docs[0].text == "# Title ##\nbody"


def test_processed_markdown_maps_pages() -> None:
    text = f"{PROCESSED_MARKER}\n\n## Page 1\n\nfirst\n\n## Page 4\n\nfourth\n"
    docs = read_markdown_text(text)  # the marker routes it to read_processed_markdown
    assert [(d.locator, d.text) for d in docs] == [({"page": 1}, "first"), ({"page": 4}, "fourth")]


def test_processed_markdown_without_pages_is_one_document() -> None:
    assert [(d.locator, d.text) for d in read_processed_markdown("Hello OCR")] == [
        ({}, "Hello OCR")
    ]


def test_page_like_lines_in_page_text_are_escaped_and_kept() -> None:
    page_text = "intro\n## Page 9\noutro"
    text = f"{PROCESSED_MARKER}\n\n## Page 1\n\n{escape_page_headings(page_text)}\n\n## Page 2\n\nx"
    docs = read_processed_markdown(text)
    assert [d.locator for d in docs] == [{"page": 1}, {"page": 2}]
    assert "\\## Page 9" in docs[0].text


_line = st.one_of(
    st.text(alphabet="abc xyz#=-`~|*>\t", max_size=12),
    st.sampled_from(["# H1", "## H2", "### H3", "```", "~~~", "---", "===", "", "   "]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_line, max_size=40))
def test_no_text_is_lost(lines: list[str]) -> None:
    text = "\n".join(lines)
    docs = read_markdown_text(text)
    joined = "\n\n".join(d.text for d in docs)
    # Sections only trim blank edges: every non-whitespace character survives, in order.
    assert "".join(joined.split()) == "".join(text.split())
    assert all(d.text.strip() for d in docs)
    for d in docs:
        path = d.locator.get("heading")
        assert path is None or (isinstance(path, list) and 1 <= len(path) <= 6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="ab #\n", min_size=1, max_size=30), min_size=1, max_size=6))
def test_processed_pages_round_trip(pages: list[str]) -> None:
    body = "\n\n".join(
        f"## Page {n}\n\n{escape_page_headings(t)}" for n, t in enumerate(pages, start=1)
    )
    docs = read_processed_markdown(f"{PROCESSED_MARKER}\n\n{body}\n")
    expected = [(n, t.strip()) for n, t in enumerate(pages, start=1) if t.strip()]
    assert [(d.locator["page"], d.text) for d in docs] == expected
