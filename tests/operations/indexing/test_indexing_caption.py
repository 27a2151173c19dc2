"""A base with the caption processor: images and the figures of PDF/DOCX files are captioned by
a loopback vision server (OpenAI chat-completions protocol) and found by search (issue 28)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from figure_files import BLUE, RED, make_docx, make_pdf
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import load_settings
from vision_server import CAPTIONS, VisionServer, colour_image, vision_server

pytestmark = pytest.mark.timeout(120)

PROCESSOR = "caption:vis:llava-test"


@pytest.fixture
def vision() -> Iterator[VisionServer]:
    with vision_server() as server:
        yield server


@pytest.fixture
def kb(tmp_path: Path, vision: VisionServer) -> Iterator[Knowledge]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[providers.vis]\nbase_url = "{vision.url}"\n', encoding="utf-8"
    )
    with Knowledge(load_settings(home)) as kb:
        yield kb


def _hits(kb: Knowledge, query: str) -> dict[str, list[dict]]:
    """Concept id → locators of the hits that hold ``query``'s caption."""
    out: dict[str, list[dict]] = {}
    for r in kb.search("figs", query).results:
        out.setdefault(r.concept_id or "", []).append(r.locator)
    return out


def test_images_and_figures_are_captioned_and_found_with_their_locators(
    kb: Knowledge, vision: VisionServer, tmp_path: Path
) -> None:
    kb.create_base("figs", file_processor_id=PROCESSOR)
    png = tmp_path / "rain.png"
    png.write_bytes(colour_image(RED))
    pdf = make_pdf(tmp_path / "report.pdf", tmp_path)
    docx = make_docx(tmp_path / "notes.docx", tmp_path)
    kb.add("figs", [AddInput.file(p) for p in (png, pdf, docx)], wait=True)
    items = kb.list_items("figs")
    assert [(i.status, i.error_code) for i in items] == [("completed", None)] * 3
    # one request per image: the PNG, two PDF figures, two DOCX figures (the icons skipped)
    assert len(vision.requests) == 5
    assert {r["body"]["model"] for r in vision.requests} == {"llava-test"}

    # hits cite the processed artifact (<stem>.md), as OCR'd files do
    crimson = _hits(kb, "crimson rainfall chart")
    assert crimson["rain.md"] == [{}]
    assert {"page": 1, "figure": 1} in crimson["report.md"]
    assert {"heading": ["Results"], "figure": 1} in crimson["notes.md"]
    cobalt = _hits(kb, "cobalt turbine gearbox")
    assert {"page": 3, "figure": 2} in cobalt["report.md"]
    assert {"heading": ["Turbines"], "figure": 2} in cobalt["notes.md"]
    [hit] = [
        r for r in kb.search("figs", "cobalt turbine gearbox").results if r.locator.get("page")
    ]
    assert hit.text == f"Figure 2: {CAPTIONS[BLUE]}"
    # the text around the figures is indexed as before, with its own locators
    assert {"page": 1} in _hits(kb, "Lisbon measured quarter")["report.md"]
    assert {"heading": ["Results"]} in _hits(kb, "discussion")["notes.md"]


def test_a_refusing_endpoint_fails_the_item_with_a_code_naming_the_figure(
    kb: Knowledge, vision: VisionServer, tmp_path: Path
) -> None:
    kb.create_base("figs", file_processor_id=PROCESSOR)
    vision.status = 400
    pdf = make_pdf(tmp_path / "report.pdf", tmp_path)
    kb.add("figs", [AddInput.file(pdf)], wait=True)
    [item] = kb.list_items("figs")
    assert (item.status, item.error_code) == ("failed", "provider_error")
    assert "report.pdf (page 1, figure 1)" in (item.error_message or "")
    assert kb.search("figs", "Lisbon").results == []  # nothing half-indexed


def test_switching_to_captions_never_overwrites_another_items_file(
    kb: Knowledge, tmp_path: Path
) -> None:
    """``notes.docx`` added without a processor reserved no ``notes.md`` slot, so a ``notes.md``
    of its own took that name; captioning the docx later must write its artifact elsewhere."""
    kb.create_base("figs", file_processor_id=None)
    docx = make_docx(tmp_path / "notes.docx", tmp_path)
    md = tmp_path / "md" / "notes.md"
    md.parent.mkdir()
    md.write_text("# Own notes\n\nThe walrus keeps its own file.\n", encoding="utf-8")
    kb.add("figs", [AddInput.file(docx), AddInput.file(md)], wait=True)
    by_name = {i.data["relative_path"]: i for i in kb.list_items("figs")}
    assert set(by_name) == {"notes.docx", "notes.md"}
    kb.update_base("figs", file_processor_id=PROCESSOR)
    kb.reindex_items("figs", [by_name["notes.docx"].id], wait=True)
    raw = kb.rt.storage(kb.get_base("figs").id).raw
    assert "walrus" in (raw / "notes.md").read_text(encoding="utf-8")
    docx_item = next(i for i in kb.list_items("figs") if i.id == by_name["notes.docx"].id)
    assert docx_item.status == "completed"
    assert docx_item.data["indexed_relative_path"] not in ("notes.md", None)
    assert kb.search("figs", "walrus").results[0].concept_id == "notes.md"
    assert _hits(kb, "cobalt turbine gearbox")
