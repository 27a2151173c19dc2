"""The chunk: what the splitter makes of a material's text and the index stores as a unit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Locator = dict[str, Any]
"""Where a document sits in its file: ``{"page": 3}``, ``{"slide": 2}``, ``{"sheet": "Q1"}``,
``{"chapter": "Intro"}``, ``{"heading": ["Guide", "Install"]}``. Empty dict when none applies."""


@dataclass(frozen=True)
class Chunk:
    """A slice of the material's ``content_text``: ``content_text[char_start:char_end] == text``."""

    text: str
    char_start: int
    char_end: int
    unit_index: int
    locator: Locator = field(default_factory=dict)
    table_header: str = ""  # header row(s) of the table this chunk continues; not part of the slice
