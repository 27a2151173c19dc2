"""Outlines and section reads through the facade, on a real home (``kb.concepts``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.catalog.models import Base
from knowbase.errors import InvalidInput, NotFound
from knowbase.operations.add.inputs import AddInput
from knowbase.pipeline.indexing.tokens import estimate_tokens
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)

PARAGRAPH = "The turbine blades are checked every spring and the wear is logged. "
REPORT = (
    "# Report\n\nA short preface.\n\n"
    "## Method\n\n" + "\n\n".join(PARAGRAPH * 6 for _ in range(8)) + "\n\n"
    "### Sampling\n\nTen blades a year.\n\n"
    "## Results\n\nAll blades passed.\n\n"
    "# Annex\n\n## Results\n\nThe raw numbers.\n"
)


@pytest.fixture
def report(kb: Knowledge, src: Path) -> Base:
    base = kb.create_base("reports", file_processor_id=None)
    path = src / "report.md"
    path.write_text(REPORT, encoding="utf-8")
    kb.add(base.id, [AddInput.file(path)], wait=True)
    return base


def test_outline_of_an_indexed_document(kb: Knowledge, report: Base) -> None:
    out = kb.concepts.outline("reports", "report.md")
    assert (out["concept_id"], out["kind"], out["truncated"]) == ("report.md", "headings", False)
    assert [(n["id"], n["title"], n["depth"]) for n in out["nodes"]] == [
        ("1", "Report", 0),
        ("1.1", "Method", 1),
        ("1.1.1", "Sampling", 2),
        ("1.2", "Results", 1),
        ("2", "Annex", 0),
        ("2.1", "Results", 1),
    ]
    text = kb.concepts.read_concept("reports", "report.md")["content"]
    method = out["nodes"][1]
    assert text[method["char_start"] :].startswith("## Method")
    assert method["tokens"] == estimate_tokens(text[method["char_start"] : method["char_end"]])
    assert method["locator"] == {"heading": ["Report", "Method"]}
    top = kb.concepts.outline("reports", "report.md", depth=1)
    assert [n["id"] for n in top["nodes"]] == ["1", "2"] and top["truncated"]
    under = kb.concepts.outline("reports", "report.md", under="Method")
    assert [(n["id"], n["depth"]) for n in under["nodes"]] == [("1.1", 0), ("1.1.1", 1)]


def test_a_section_is_read_whole_by_id_or_heading_path(kb: Knowledge, report: Base) -> None:
    by_id = kb.concepts.read_section("reports", "report.md", "1.2")
    assert by_id["content"] == "## Results\n\nAll blades passed."
    assert (by_id["truncated"], by_id["next_cursor"]) == (False, None)
    assert by_id["section"]["path"] == ["Report", "Results"]
    by_path = kb.concepts.read_section("reports", "report.md", " report >  RESULTS ")
    assert by_path["content"] == by_id["content"]
    annex = kb.concepts.read_section("reports", "report.md", "Annex > Results")
    assert annex["content"] == "## Results\n\nThe raw numbers."
    assert kb.concepts.read_section("reports", "report.md", "sampling")["section"]["id"] == "1.1.1"
    assert kb.concepts.read_section("reports", "report.md", "Meth")["section"]["id"] == "1.1"
    assert kb.concepts.read_section("reports", "report.md", "Annex > Res")["section"]["id"] == "2.1"
    with pytest.raises(InvalidInput, match="names 2 sections: 1.2"):
        kb.concepts.read_section("reports", "report.md", "Results")
    with pytest.raises(NotFound) as caught:
        kb.concepts.read_section("reports", "report.md", "Conclusion")
    assert caught.value.details["kind"] == "section"


def test_a_long_section_continues_with_its_cursor(kb: Knowledge, report: Base) -> None:
    whole = kb.concepts.outline("reports", "report.md", under="1.1")["nodes"][0]
    assert whole["tokens"] > 600
    text = kb.concepts.read_concept("reports", "report.md")["content"]
    pieces, cursor, reads = [], None, 0
    page = kb.concepts.read_section("reports", "report.md", "1.1", max_tokens=200)
    while True:
        reads += 1
        assert estimate_tokens(page["content"]) <= 200
        pieces.append((page["char_start"], page["char_end"]))
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert page["truncated"] and cursor.startswith("1.1@")
        page = kb.concepts.read_section("reports", "report.md", cursor=cursor, max_tokens=200)
    assert reads >= 3
    assert pieces[0][0] == whole["char_start"] and pieces[-1][1] == whole["char_end"]
    for (_, end), (start, _) in zip(pieces, pieces[1:], strict=False):
        assert not text[end:start].strip()  # nothing is skipped but blank space
    assert "### Sampling" in text[pieces[-1][0] : pieces[-1][1]]  # the subsection is in it


def test_bad_arguments_are_invalid_input(kb: Knowledge, report: Base) -> None:
    for kwargs in ({"cursor": "garbage"}, {"section": "1", "max_tokens": 0}, {}):
        with pytest.raises(InvalidInput):
            kb.concepts.read_section("reports", "report.md", **kwargs)
    with pytest.raises(InvalidInput):
        kb.concepts.outline("reports", "report.md", depth=0)
    with pytest.raises(NotFound):
        kb.concepts.outline("reports", "../report.md")


def test_a_note_without_headings_gets_one_window(kb: Knowledge, bm25_base: Base) -> None:
    kb.add(bm25_base.id, [AddInput.note("Paris is in France.", title="geo")], wait=True)
    concept = kb.concepts.organization_tree(bm25_base.id)["nodes"][0]["concept_id"]
    out = kb.concepts.outline(bm25_base.id, concept)
    assert out["kind"] == "windows"
    assert [(n["id"], n["title"]) for n in out["nodes"]] == [("1", "Paris is in France.")]
    read = kb.concepts.read_section(bm25_base.id, concept, "1")
    assert read["content"] == "Paris is in France."
