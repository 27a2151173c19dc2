"""Image captions through a loopback server that speaks OpenAI's chat-completions protocol."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from knowbase.errors import ProviderUnavailable
from knowbase.pipeline.processing.base import Processor
from knowbase.pipeline.processing.caption import CaptionProcessor
from knowbase.pipeline.readers import read_file
from knowbase.settings import ProviderProfile

pytestmark = pytest.mark.timeout(60)

CAPTION = "A bar chart of quarterly rainfall in Lisbon; the tallest bar is Q4 with 310 mm."


class _Vision:
    """Answers POST /v1/chat/completions like OpenAI does; records each request."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                if outer.status != 200:
                    self.send_response(outer.status)
                    self.end_headers()
                    return
                answer = {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": CAPTION},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def vision() -> Iterator[_Vision]:
    server = _Vision()
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    from PIL import Image

    path = tmp_path / "rainfall.png"
    Image.new("RGB", (40, 20), (200, 30, 30)).save(path)
    return path


def test_an_image_gets_a_caption_and_keeps_its_locator(
    vision: _Vision, chart: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VISION_KEY", "sekret")
    proc = CaptionProcessor(ProviderProfile("vis", vision.url, "VISION_KEY"), "llava-test")
    assert isinstance(proc, Processor) and proc.available()
    out = tmp_path / "rainfall.md"
    result = proc.process(chart, out)
    assert result.output == out and result.chars == len(CAPTION)
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
    assert [(d.text, d.locator) for d in docs] == [(CAPTION, {})]


def test_a_busy_server_is_a_transient_error(vision: _Vision, chart: Path, tmp_path: Path) -> None:
    vision.status = 503
    proc = CaptionProcessor(ProviderProfile("vis", vision.url), "llava-test")
    with pytest.raises(ProviderUnavailable):
        proc.process(chart, tmp_path / "x.md")
    assert not (tmp_path / "x.md").exists()
