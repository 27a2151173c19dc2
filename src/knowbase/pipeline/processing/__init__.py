"""Heavy conversion (OCR, image captions) out of the index job, run by ``process-file`` (§4.3).

    >>> proc = get_processor("tesseract")          # doctest: +SKIP
    >>> proc.process(raw / "scan.pdf", raw / "scan.md", cancel=event, timeout_s=1800)
    ProcessResult(output=…/scan.md, pages=3, text_layer_pages=(1,), ocr_pages=(2, 3), chars=…)

``read_file`` on the output (or :func:`read_processed_markdown`) yields ``{"page": N}``
documents. ``file_processor`` is ``"tesseract"``, ``"caption:<profile>:<model>"`` (a vision
model behind a config.toml profile, :mod:`.caption`) or ``None`` (DESIGN.md).
"""

from __future__ import annotations

from knowbase.errors import InvalidInput
from knowbase.pipeline.processing.base import Processor, ProcessResult
from knowbase.pipeline.processing.tesseract import TesseractProcessor, tesseract_available
from knowbase.pipeline.readers.markdown import read_processed_markdown
from knowbase.settings import Settings

__all__ = [
    "PROCESSOR_NAMES",
    "ProcessResult",
    "Processor",
    "TesseractProcessor",
    "check_processor_id",
    "default_processor_name",
    "get_processor",
    "processable_extensions",
    "read_processed_markdown",
    "tesseract_available",
]

PROCESSOR_NAMES: frozenset[str] = frozenset({"tesseract", "caption"})
_CAPTION = "caption:"


def processable_extensions(name: str | None) -> frozenset[str]:
    """Extensions the processor ``name`` converts (each reserves a ``<stem>.md`` slot); empty
    for ``None``. Captions also read the figures of Word and PowerPoint files."""
    from knowbase.pipeline.readers import PROCESSABLE_EXTENSIONS
    from knowbase.pipeline.readers.figures import FIGURE_EXTENSIONS

    if not name:
        return frozenset()
    if name.startswith(_CAPTION):
        return PROCESSABLE_EXTENSIONS | FIGURE_EXTENSIONS
    return PROCESSABLE_EXTENSIONS


def check_processor_id(name: str | None, settings: Settings) -> None:
    """InvalidInput unless ``name`` is ``None``, ``tesseract`` or ``caption:<profile>:<model>``
    with a profile these settings know (no I/O: the endpoint is first called on a file)."""
    if name is None or name == "tesseract":
        return
    if not isinstance(name, str) or not name.startswith(_CAPTION):
        raise InvalidInput(
            f"unknown file processor {name!r}; choose 'tesseract', "
            "'caption:<profile>:<model>' or none",
            processor=name,
        )
    profile, _, model = name[len(_CAPTION) :].partition(":")
    if not profile or not model.strip():
        raise InvalidInput(
            f"file processor {name!r} must look like 'caption:<profile>:<model>', "
            "e.g. 'caption:lmstudio:qwen2.5-vl-7b-instruct'",
            processor=name,
        )
    if profile not in settings.providers:
        raise InvalidInput(
            f"file processor {name!r}: no provider profile {profile!r} in config.toml",
            hint=f"add [providers.{profile}] with base_url (and api_key_env) to config.toml",
            processor=name,
            known=sorted(settings.providers),
        )


def get_processor(name: str | None, settings: Settings | None = None) -> Processor | None:
    """The processor called ``name``; ``None`` for ``None``. Unknown names raise InvalidInput;
    a ``caption:`` processor needs ``settings`` for its profile."""
    if name is None:
        return None
    if name == "tesseract":
        return TesseractProcessor()
    if settings is None:
        raise InvalidInput(f"file processor {name!r} needs settings", processor=name)
    check_processor_id(name, settings)
    from knowbase.pipeline.processing.caption import CaptionProcessor

    profile, _, model = name[len(_CAPTION) :].partition(":")
    return CaptionProcessor(settings.providers[profile], model)


def default_processor_name() -> str | None:
    """What a new base gets: ``"tesseract"`` when it is installed, else ``None``."""
    return "tesseract" if tesseract_available() else None
