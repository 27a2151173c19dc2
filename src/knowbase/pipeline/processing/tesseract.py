"""OCR with the tesseract binary: images, and the PDF pages that have no text layer.

A PDF keeps the text pypdf finds in its text layer (read in a capped child process); only the
pages without one are rasterised (``pdftoppm -r 200``) and OCR'd, one page at a time so a
cancel takes effect between (and during) pages. The output is Markdown that starts with
:data:`~knowbase.pipeline.readers.PROCESSED_MARKER` and has a ``## Page N`` heading per page,
so ``read_file`` gives its documents ``{"page": N}`` locators again. A single image is written
without page headings.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from knowbase.errors import MissingExtra, NoTextExtracted, UnsupportedFileType
from knowbase.pipeline.processing.base import ProcessResult
from knowbase.pipeline.processing.subprocess_run import run_tool
from knowbase.pipeline.readers.markdown import PROCESSED_MARKER, escape_page_headings
from knowbase.pipeline.readers.sniff import check_signature

DEFAULT_LANGUAGES = ("eng", "chi_sim")
_IMAGES = {".png", ".jpg", ".jpeg", ".tif", ".tiff"}
_INSTALL_HINT = (
    "apt-get install tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim poppler-utils"
)


def tesseract_available() -> bool:
    """Whether tesseract is installed with at least one of the default languages."""
    return shutil.which("tesseract") is not None and bool(_installed_languages())


@functools.lru_cache(maxsize=1)
def _installed_languages() -> frozenset[str]:
    exe = shutil.which("tesseract")
    if exe is None:
        return frozenset()
    try:
        out = subprocess.run(
            [exe, "--list-langs"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    # First line is "List of available languages in ...:"; the rest are codes.
    return frozenset(line.strip() for line in out.stdout.splitlines()[1:] if line.strip())


class TesseractProcessor:
    """The ``tesseract`` file processor (see module docstring)."""

    name = "tesseract"

    def __init__(
        self,
        *,
        languages: Sequence[str] = DEFAULT_LANGUAGES,
        dpi: int = 200,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.languages = tuple(languages)
        self.dpi = dpi
        self._clock = clock

    def available(self) -> bool:
        """Readiness: the binary and one of our languages are installed."""
        return tesseract_available()

    def process(
        self,
        raw: Path,
        output: Path,
        *,
        cancel: threading.Event | None = None,
        timeout_s: float = 1800,
    ) -> ProcessResult:
        """OCR ``raw`` (pdf/png/jpg/jpeg/tif/tiff) into Markdown at ``output``."""
        deadline = self._clock() + timeout_s
        ext = raw.suffix.lower()
        if ext != ".pdf" and ext not in _IMAGES:
            raise UnsupportedFileType(
                f"the tesseract processor does not handle {ext} files", path=str(raw)
            )
        check_signature(raw, ext)
        with tempfile.TemporaryDirectory(prefix="kb-ocr-") as tmp:
            work = Path(tmp)
            if ext == ".pdf":
                pages, text_pages, ocr_pages = self._pdf(raw, work, cancel, deadline)
            else:
                pages = self._ocr(raw, work, cancel, deadline)
                text_pages, ocr_pages = (), tuple(range(1, len(pages) + 1))
        texts = {n: t for n, t in enumerate(pages, start=1) if t.strip()}
        if not texts:
            raise NoTextExtracted(
                f"OCR found no text in {raw.name}",
                hint="check that the scan is legible (at least ~150 dpi, not rotated)",
                path=str(raw),
            )
        if len(pages) == 1 and ext != ".pdf":
            body = escape_page_headings(texts[1])
        else:
            body = "\n\n".join(
                f"## Page {n}\n\n{escape_page_headings(t)}" for n, t in texts.items()
            )
        _write_atomic(output, f"{PROCESSED_MARKER}\n\n{body}\n")
        return ProcessResult(
            output=output,
            pages=len(pages),
            text_layer_pages=tuple(n for n in text_pages if n in texts),
            ocr_pages=tuple(n for n in ocr_pages if n in texts),
            chars=sum(len(t) for t in texts.values()),
        )

    def _pdf(
        self, raw: Path, work: Path, cancel: threading.Event | None, deadline: float
    ) -> tuple[list[str], tuple[int, ...], tuple[int, ...]]:
        from knowbase.pipeline.readers.isolation import pdf_page_texts_isolated

        pdftoppm = shutil.which("pdftoppm")
        remaining = max(1.0, deadline - self._clock())
        pages = pdf_page_texts_isolated(raw, timeout_s=min(remaining, 300))
        text_pages = tuple(n for n, t in enumerate(pages, start=1) if t.strip())
        empty = [n for n, t in enumerate(pages, start=1) if not t.strip()]
        if empty and pdftoppm is None:
            raise MissingExtra(
                "pdftoppm (poppler-utils) is needed to OCR scanned PDF pages",
                hint=_INSTALL_HINT,
            )
        for n in empty:
            prefix = work / f"page-{n}"
            cmd = [pdftoppm, "-r", str(self.dpi), "-gray", "-png", "-singlefile"]
            run_tool(
                [*cmd, "-f", str(n), "-l", str(n), str(raw), str(prefix)],  # type: ignore[list-item]
                cancel=cancel,
                deadline=deadline,
                clock=self._clock,
            )
            image = prefix.with_suffix(".png")
            pages[n - 1] = "\n\n".join(self._ocr(image, work, cancel, deadline))
            image.unlink(missing_ok=True)
        return pages, text_pages, tuple(empty)

    def _ocr(
        self, image: Path, work: Path, cancel: threading.Event | None, deadline: float
    ) -> list[str]:
        """Text per frame of ``image`` (a multi-page TIFF has several)."""
        exe = shutil.which("tesseract")
        langs = [lang for lang in self.languages if lang in _installed_languages()]
        if exe is None or not langs:
            raise MissingExtra(
                f"tesseract with one of the languages {', '.join(self.languages)} is not installed",
                hint=_INSTALL_HINT,
            )
        out_base = work / f"ocr-{image.stem}"
        run_tool(
            [exe, str(image), str(out_base), "-l", "+".join(langs)],
            cancel=cancel,
            deadline=deadline,
            clock=self._clock,
        )
        raw = out_base.with_suffix(".txt").read_text(encoding="utf-8", errors="replace")
        frames = raw.split("\f")
        if len(frames) > 1 and not frames[-1].strip():
            frames.pop()  # tesseract ends every page with a form feed
        return [_clean(f) for f in frames] or [""]


def _clean(text: str) -> str:
    lines = [line.rstrip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _write_atomic(output: Path, text: str) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    part = output.with_name(f".{output.name}.{os.getpid()}.part")
    try:
        part.write_text(text, encoding="utf-8")
        os.replace(part, output)
    finally:
        part.unlink(missing_ok=True)
