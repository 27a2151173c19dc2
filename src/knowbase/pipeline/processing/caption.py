"""Image captions from an OpenAI-compatible vision endpoint (issue 28, item 5; not yet wired).

    >>> proc = CaptionProcessor(ProviderProfile("lmstudio", "http://localhost:1234/v1"),
    ...                         "qwen2-vl-7b")                              # doctest: +SKIP
    >>> proc.process(raw / "diagram.png", raw / "diagram.md")             # doctest: +SKIP

One ``POST {base_url}/chat/completions`` per image: a user message holding the prompt and the
image as a ``data:`` URL (``image_url`` content part), the protocol of OpenAI, vLLM, LM Studio,
Ollama's ``/v1`` and llama.cpp's server. The answer's ``choices[0].message.content`` is the
caption. The output is processed Markdown (:data:`PROCESSED_MARKER`), read back like an OCR'd
image: one document, the image's own Concept ID as its locator. Errors map as for embeddings
(``providers/openai_http.post_json``): 429/5xx/unreachable → ProviderUnavailable (retried),
other 4xx → ProviderError.

Still to do (see docs/documents.md): a base setting that names the caption profile and model
(the catalog's ``file_processor_id`` CHECK allows only ``tesseract`` today, so it needs a
migration), and captions for the figures inside PDF/DOCX/PPTX.
"""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import httpx

from knowbase.errors import ProviderError, UnreadableFile
from knowbase.pipeline.processing.base import ProcessResult
from knowbase.pipeline.readers.markdown import PROCESSED_MARKER, escape_page_headings
from knowbase.settings import ProviderProfile

DEFAULT_PROMPT = (
    "Describe this image for a search index: what it shows, every readable text, labels, "
    "numbers and axis titles. Plain sentences, no preamble."
)
_MIME = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}


class CaptionProcessor:
    """A :class:`~knowbase.pipeline.processing.base.Processor` that captions single images."""

    name = "caption"

    def __init__(
        self,
        profile: ProviderProfile,
        model: str,
        *,
        prompt: str = DEFAULT_PROMPT,
        max_tokens: int = 400,
        client: httpx.Client | None = None,
    ) -> None:
        self.profile = profile
        self.model = model
        self.prompt = prompt
        self.max_tokens = max_tokens
        self._client = client

    def available(self) -> bool:
        return bool(self.profile.base_url)

    def caption(self, image: Path, *, timeout_s: float = 120) -> str:
        """The endpoint's caption of ``image`` (PNG, JPEG, GIF or WebP)."""
        from knowbase.providers.openai_http import post_json

        mime = _MIME.get(image.suffix.lower())
        if mime is None:
            raise UnreadableFile(
                f"{image.name}: only PNG, JPEG, GIF and WebP images can be captioned",
                path=str(image),
                reason="caption_format",
            )
        data = base64.b64encode(image.read_bytes()).decode("ascii")
        payload = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": self.prompt},
                        {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}},
                    ],
                }
            ],
        }
        url = self.profile.base_url.rstrip("/") + "/chat/completions"
        client = self._client or httpx.Client(timeout=timeout_s)
        try:
            body = post_json(
                client, url, payload, api_key=self.profile.api_key(), model_id=self.model
            )
        finally:
            if self._client is None:
                client.close()
        try:
            text = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ProviderError(
                f"{self.model}: {url} answered without choices[0].message.content",
                model_id=self.model,
                url=url,
                status=200,
            ) from exc
        if isinstance(text, list):  # some servers answer content parts
            text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
        return str(text or "").strip()

    def process(
        self,
        raw: Path,
        output: Path,
        *,
        cancel: threading.Event | None = None,
        timeout_s: float = 1800,
    ) -> ProcessResult:
        """Write ``output``: the marker, then the caption (``Image: name`` when it is empty)."""
        caption = self.caption(raw, timeout_s=min(timeout_s, 300))
        body = escape_page_headings(caption) if caption else f"Image: {raw.name}"
        output.parent.mkdir(parents=True, exist_ok=True)
        part = output.with_name(f".{output.name}.part")
        part.write_text(f"{PROCESSED_MARKER}\n\n{body}\n", encoding="utf-8")
        part.replace(output)
        return ProcessResult(output=output, pages=1, chars=len(caption))
