"""The processor protocol: heavy conversion (OCR) of one raw file into a ``<stem>.md`` file."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ProcessResult:
    """What a processor wrote: ``output`` holds Markdown that ``read_file`` reads back."""

    output: Path
    pages: int  # pages (or image frames) in the input
    text_layer_pages: tuple[int, ...] = ()  # 1-based pages taken from the PDF's own text
    ocr_pages: tuple[int, ...] = ()  # 1-based pages that went through OCR
    chars: int = 0  # characters of page text written


@runtime_checkable
class Processor(Protocol):
    """Turns a raw file into Markdown, out of process, cancellable.

    ``process`` raises IndexingInterrupted when ``cancel`` is set (the child is killed first),
    UnreadableFile on a timeout or a file the tools reject, NoTextExtracted when nothing was
    read, and MissingExtra when a needed binary is not installed.
    """

    name: str

    def available(self) -> bool:
        """Whether the processor can run on this machine (readiness)."""
        ...

    def process(
        self,
        raw: Path,
        output: Path,
        *,
        cancel: threading.Event | None = None,
        timeout_s: float = 1800,
    ) -> ProcessResult:
        """Convert ``raw`` and write ``output`` atomically (never a half-written file)."""
        ...
