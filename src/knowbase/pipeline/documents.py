"""Plain data that flows through the pipeline: documents from readers, chunks from the splitter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Locator = dict[str, Any]
"""Where a document sits in its file: ``{"page": 3}``, ``{"slide": 2}``, ``{"sheet": "Q1"}``,
``{"chapter": "Intro"}``, ``{"heading": ["Guide", "Install"]}``. Empty dict when none applies."""


@dataclass(frozen=True)
class Document:
    """One readable piece of a file (a PDF page, a slide, a sheet, or the whole text)."""

    text: str
    locator: Locator = field(default_factory=dict)


@dataclass(frozen=True)
class Chunk:
    """A slice of the material's ``content_text``: ``content_text[char_start:char_end] == text``."""

    text: str
    char_start: int
    char_end: int
    unit_index: int
    locator: Locator = field(default_factory=dict)
    table_header: str = ""  # header row(s) of the table this chunk continues; not part of the slice


@dataclass(frozen=True)
class ChunkSettings:
    """How a base splits text (§1.1, §4.4). ``token_cap`` is the model's window − 2, if known."""

    chunk_size: int = 1024
    chunk_overlap: int = 200
    strategy: str = "structured"  # or "delimiter"
    separator: str = "\\n\\n"  # stored escaped; unescaped at split time
    token_cap: int | None = None
