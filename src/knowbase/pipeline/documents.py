"""Plain data that flows through the pipeline: documents from readers, and how a base splits
them. The chunks the splitter makes are :class:`knowbase.units.chunk.Chunk` (the index keeps
them too)."""

from __future__ import annotations

from dataclasses import dataclass, field

from knowbase.units.chunk import Locator


@dataclass(frozen=True)
class Document:
    """One readable piece of a file (a PDF page, a slide, a sheet, or the whole text)."""

    text: str
    locator: Locator = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkSettings:
    """How a base splits text (§1.1, §4.4). ``token_cap`` is the model's window − 2, if known."""

    chunk_size: int = 1024
    chunk_overlap: int = 200
    strategy: str = "structured"  # or "delimiter"
    separator: str = "\\n\\n"  # stored escaped; unescaped at split time
    token_cap: int | None = None
