"""A loopback server that speaks OpenAI's chat-completions protocol for vision models.

It decodes the ``image_url`` data URL of each request with Pillow and answers with a caption
named after the image's mean colour (:data:`CAPTIONS`), so a test can tell which figure got
which caption. ``status`` other than 200 makes it answer that status with an OpenAI error body.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CAPTIONS = {
    (220, 30, 30): "A crimson bar chart of quarterly rainfall; the tallest bar is Q4.",
    (30, 30, 220): "A cobalt diagram of a wind turbine with its gearbox labelled.",
    (30, 180, 30): "An emerald map of the harbour with three piers.",
}


def colour_image(rgb: tuple[int, int, int], size: tuple[int, int] = (120, 90)) -> bytes:
    """PNG bytes of a solid ``rgb`` image (the server captions it ``CAPTIONS[rgb]``)."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, rgb).save(out, format="PNG")
    return out.getvalue()


def _caption(url: str) -> str:
    from PIL import Image

    data = base64.b64decode(url.split(",", 1)[1])
    with Image.open(io.BytesIO(data)) as img:
        rgb = img.convert("RGB").resize((1, 1)).getpixel((0, 0))
    nearest = min(CAPTIONS, key=lambda c: sum((a - b) ** 2 for a, b in zip(c, rgb, strict=True)))
    return CAPTIONS[nearest]


class VisionServer:
    """Answers ``POST /v1/chat/completions``; records each request body in ``requests``."""

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
                    error = {"error": {"message": "model not loaded", "type": "invalid_request"}}
                    self._send(outer.status, error)
                    return
                url = body["messages"][0]["content"][1]["image_url"]["url"]
                message = {"role": "assistant", "content": _caption(url)}
                self._send(
                    200,
                    {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
                    },
                )

            def _send(self, status: int, answer: dict) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@contextmanager
def vision_server() -> Iterator[VisionServer]:
    """A running :class:`VisionServer`, shut down on exit."""
    server = VisionServer()
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
