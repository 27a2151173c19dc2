"""Image captions through a loopback server that speaks OpenAI's chat-completions protocol."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from figure_files import GREEN, RED, make_pptx
from knowbase.errors import IndexingInterrupted, InvalidInput, ProviderUnavailable
from knowbase.pipeline.processing import check_processor_id, get_processor, processable_extensions
from knowbase.pipeline.processing.base import Processor
from knowbase.pipeline.processing.caption import CaptionProcessor
from knowbase.pipeline.readers import read_file
from knowbase.settings import ProviderProfile, Settings
from vision_server import CAPTIONS, VisionServer, colour_image, vision_server

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def vision() -> Iterator[VisionServer]:
    with vision_server() as server:
        yield server


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    path = tmp_path / "rainfall.png"
    path.write_bytes(colour_image(RED, (40, 20)))
    return path


def test_an_image_gets_a_caption_and_keeps_its_locator(
    vision: VisionServer, chart: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VISION_KEY", "sekret")
    proc = CaptionProcessor(ProviderProfile("vis", vision.url, "VISION_KEY"), "llava-test")
    assert isinstance(proc, Processor) and proc.available()
    out = tmp_path / "rainfall.md"
    result = proc.process(chart, out)
    assert result.output == out and result.chars == len(CAPTIONS[RED])
    [req] = vision.requests
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sekret"
    assert req["body"]["model"] == "llava-test"
    [message] = req["body"]["messages"]
    kinds = [part["type"] for part in message["content"]]
    assert message["role"] == "user" and kinds == ["text", "image_url"]
    url = message["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == chart.read_bytes()
    docs = read_file(out)  # read back like an OCR'd image: one document, the image's own locator
    assert [(d.text, d.locator) for d in docs] == [(CAPTIONS[RED], {})]


def test_a_deck_keeps_its_slides_and_gets_a_located_caption(
    vision: VisionServer, tmp_path: Path
) -> None:
    deck = make_pptx(tmp_path / "harbour.pptx", tmp_path)
    out = tmp_path / "harbour.md"
    CaptionProcessor(ProviderProfile("vis", vision.url), "m").process(deck, out)
    docs = [(d.text, d.locator) for d in read_file(out)]
    assert docs == [
        ("# Harbour plan", {"slide": 1}),
        (f"Figure 1: {CAPTIONS[GREEN]}", {"slide": 1, "figure": 1}),
        ("# Budget without pictures", {"slide": 2}),
    ]


def test_a_busy_server_is_a_transient_error(
    vision: VisionServer, chart: Path, tmp_path: Path
) -> None:
    vision.status = 503
    proc = CaptionProcessor(ProviderProfile("vis", vision.url), "llava-test")
    with pytest.raises(ProviderUnavailable):
        proc.process(chart, tmp_path / "x.md")
    assert not (tmp_path / "x.md").exists()


def test_a_cancel_stops_between_figures(vision: VisionServer, chart: Path, tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    proc = CaptionProcessor(ProviderProfile("vis", vision.url), "m")
    with pytest.raises(IndexingInterrupted):
        proc.process(chart, tmp_path / "x.md", cancel=cancel)
    assert vision.requests == [] and not (tmp_path / "x.md").exists()


def test_processor_ids(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, providers={"vis": ProviderProfile("vis", "http://h/v1")})
    proc = get_processor("caption:vis:org/model:q4", settings)
    assert isinstance(proc, CaptionProcessor) and proc.model == "org/model:q4"
    for bad in ("caption:vis", "caption:other:m", "caption::m", "ocrmypdf"):
        with pytest.raises(InvalidInput):
            check_processor_id(bad, settings)
    assert ".docx" in processable_extensions("caption:vis:m")
    assert ".docx" not in processable_extensions("tesseract")
    assert processable_extensions(None) == frozenset()
