"""Image captions from an OpenAI-compatible vision endpoint (issue 28, item 5).

    >>> proc = CaptionProcessor(ProviderProfile("lmstudio", "http://localhost:1234/v1"),
    ...                         "qwen2-vl-7b")                              # doctest: +SKIP
    >>> proc.process(raw / "report.pdf", raw / "report.md")               # doctest: +SKIP

A base chooses it with ``file_processor_id = "caption:<profile>:<model>"``. One
``POST {base_url}/chat/completions`` per image: a user message holding the prompt and the image
as a ``data:`` URL (``image_url`` content part), the protocol of OpenAI, vLLM, LM Studio,
Ollama's ``/v1`` and llama.cpp's server. The answer's ``choices[0].message.content`` is the
caption.

An image file becomes one document, the caption, with the image's own locator ``{}``. A PDF,
DOCX or PPTX keeps its text as its reader gives it, and each figure in it
(:mod:`knowbase.pipeline.readers.figures`, read in the capped reader child) becomes a document
``Figure N: <caption>`` located ``{"page": 3, "figure": N}`` (``slide``/``heading`` for decks and
Word files) next to the text around it. The output is processed Markdown
(:data:`PROCESSED_MARKER`, one :func:`locator_line` per section).

A failing endpoint fails the item, never a silent half: errors map as for embeddings
(``providers/openai_http.post_json``): 429/5xx/unreachable → ProviderUnavailable (the job
retries), other 4xx or an answer without a caption → ProviderError, each naming the figure.
"""

from __future__ import annotations

import base64
import threading
from pathlib import Path
from typing import Any

import httpx

from knowbase.errors import IndexingInterrupted, ProviderError, ProviderUnavailable, UnreadableFile
from knowbase.pipeline.processing.base import ProcessResult
from knowbase.pipeline.readers.markdown import (
    PROCESSED_MARKER,
    escape_page_headings,
    locator_line,
)
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
    """A :class:`~knowbase.pipeline.processing.base.Processor` that captions images and figures."""

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
        mime = _MIME.get(image.suffix.lower())
        if mime is None:
            raise UnreadableFile(
                f"{image.name}: only PNG, JPEG, GIF and WebP images can be captioned",
                path=str(image),
                reason="caption_format",
            )
        return self.caption_bytes(image.read_bytes(), mime, timeout_s=timeout_s)

    def caption_bytes(self, data: bytes, mime: str, *, timeout_s: float = 120) -> str:
        """The endpoint's caption of an image given as bytes of type ``mime``."""
        from knowbase.providers.openai_http import post_json

        encoded = base64.b64encode(data).decode("ascii")
        payload = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": self.prompt},
                        {
                            "type": "image_url",
                            "image_url": {"url": f"data:{mime};base64,{encoded}"},
                        },
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
        """Write ``output``: the file's text with a caption per figure (see module docstring)."""
        from knowbase.pipeline.readers.figures import Figure
        from knowbase.pipeline.readers.isolation import read_with_figures_isolated

        parts = read_with_figures_isolated(raw, timeout_s=min(timeout_s, 300))
        per_image = min(timeout_s, 300)
        sections: list[str] = []
        figures = chars = 0
        for part in parts:
            if cancel is not None and cancel.is_set():
                raise IndexingInterrupted(f"captioning {raw.name} was cancelled", path=str(raw))
            if not isinstance(part, Figure):
                sections.append(_section(part.locator, part.text))
                continue
            figures += 1
            caption = self._figure_caption(raw, part, per_image)
            chars += len(caption)
            if part.locator:
                text = f"Figure {part.locator['figure']}: {caption}" if caption else ""
            else:  # the file is the image: its caption is its text
                text = caption or f"Image: {raw.name}"
            if text:
                sections.append(_section(part.locator, text))
        output.parent.mkdir(parents=True, exist_ok=True)
        part_file = output.with_name(f".{output.name}.part")
        part_file.write_text(f"{PROCESSED_MARKER}\n\n" + "\n\n".join(sections) + "\n", "utf-8")
        part_file.replace(output)
        return ProcessResult(output=output, pages=max(figures, 1), chars=chars)

    def _figure_caption(self, raw: Path, figure: Any, timeout_s: float) -> str:
        """The caption of one figure; an endpoint error names the file and the figure."""
        try:
            return self.caption_bytes(figure.data, figure.mime, timeout_s=timeout_s)
        except (ProviderError, ProviderUnavailable) as exc:
            where = _where(figure.locator)
            raise type(exc)(
                f"{raw.name}{where}: the vision endpoint failed: {exc.message}",
                hint=exc.hint
                or "check the caption profile's base_url and model, then kb retry the item",
                **{**exc.details, "path": str(raw), "locator": figure.locator},
            ) from exc


def _section(locator: dict[str, Any], text: str) -> str:
    body = escape_page_headings(text)
    return f"{locator_line(locator)}\n{body}" if locator else body


def _where(locator: dict[str, Any]) -> str:
    if not locator:
        return ""
    place = ", ".join(f"{k} {v}" for k, v in locator.items() if k in ("figure", "page", "slide"))
    return f" ({place})"
