"""Heavy conversion (OCR) out of process, run by the ``process-file`` job (§4.3).

    >>> proc = get_processor("tesseract")          # doctest: +SKIP
    >>> proc.process(raw / "scan.pdf", raw / "scan.md", cancel=event, timeout_s=1800)
    ProcessResult(output=…/scan.md, pages=3, text_layer_pages=(1,), ocr_pages=(2, 3), chars=…)

``read_file`` on the output (or :func:`read_processed_markdown`) yields ``{"page": N}``
documents. ``file_processor`` is ``"tesseract"`` or ``None`` (DESIGN.md).
"""

from __future__ import annotations

from knowbase.errors import InvalidInput
from knowbase.pipeline.processing.base import Processor, ProcessResult
from knowbase.pipeline.processing.tesseract import TesseractProcessor, tesseract_available
from knowbase.pipeline.readers.markdown import read_processed_markdown

__all__ = [
    "PROCESSOR_NAMES",
    "ProcessResult",
    "Processor",
    "TesseractProcessor",
    "default_processor_name",
    "get_processor",
    "read_processed_markdown",
    "tesseract_available",
]

PROCESSOR_NAMES: frozenset[str] = frozenset({"tesseract"})


def get_processor(name: str | None) -> Processor | None:
    """The processor called ``name``; ``None`` for ``None``. Unknown names raise InvalidInput."""
    if name is None:
        return None
    if name == "tesseract":
        return TesseractProcessor()
    raise InvalidInput(
        f"unknown file processor {name!r}; choose one of {sorted(PROCESSOR_NAMES)} or none",
        processor=name,
    )


def default_processor_name() -> str | None:
    """What a new base gets: ``"tesseract"`` when it is installed, else ``None``."""
    return "tesseract" if tesseract_available() else None
