"""Contextual units: the text a chunk is searched and embedded by (DESIGN Turn 3, "Chunks carry
context").

A chunk deep in a section often does not name its topic ("Use ``-C`` to change directory
first" under *tar › Options*). Its *unit text* is a short context line — the document's title,
its heading path, its sheet or chapter name — then the table header it continues (when the
chunker set one), a blank line and the verbatim slice:

    tar.1 > tar > Options

    Use -C to change directory first...

The keyword lane indexes :func:`unit_text` and the embedding is computed from it; the stored text,
offsets and citations stay the verbatim slice, and vectors stay keyed by the slice's hash
(``embedding_text_hash``: an export, an import or a copy find them as before). A table header
the chunker set (``Chunk.table_header``) is kept in the unit's locator (``table_header``), so
the unit text can be rebuilt from what the index stores.
The context is capped at :data:`MAX_CONTEXT_CHARS`: on a model with a small window it counts
against the chunk's tokens, and the tail it may push out is inside the next chunk's overlap.

Units indexed before this existed keep their plain text until their item is reindexed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from knowbase.units.chunk import Chunk

MAX_CONTEXT_CHARS = 200
MAX_HEADER_CHARS = 300
# Locator entries that name a place in the document (a page number does not say what it is about)
_NAMED = ("sheet", "chapter", "slide_title")
TABLE_HEADER_KEY = "table_header"


def _title(title: str | None) -> str:
    """The display title without a file extension (``tar.1.md`` → ``tar.1``)."""
    t = " ".join((title or "").split())
    stem, ext = posixpath.splitext(t)
    return stem if stem and 1 < len(ext) <= 6 and ext[1:].isalnum() else t


def unit_context(title: str | None, locator: Mapping[str, Any] | None) -> str:
    """The context line (title › heading path › sheet/chapter) and the table header, if any.

    >>> unit_context("guide.md", {"heading": ["Guide", "Install"]})
    'guide > Guide > Install'
    >>> unit_context(None, {})
    ''
    """
    loc = locator or {}
    parts: list[str] = []
    heading = loc.get("heading")
    names = [_title(title), *(heading if isinstance(heading, list) else [])]
    names += [loc[k] for k in _NAMED if isinstance(loc.get(k), str)]
    for name in names:
        clean = " ".join(str(name).split())
        if clean and clean not in parts:
            parts.append(clean)
    line = " > ".join(parts)[:MAX_CONTEXT_CHARS]
    header = loc.get(TABLE_HEADER_KEY)
    header = header.strip()[:MAX_HEADER_CHARS] if isinstance(header, str) else ""
    return "\n".join(x for x in (line, header) if x)


def chunk_locator(chunk: Chunk) -> dict[str, Any]:
    """The locator a unit stores: the chunk's, with its table header when it has one."""
    if not getattr(chunk, "table_header", ""):
        return dict(chunk.locator)
    return {**chunk.locator, TABLE_HEADER_KEY: chunk.table_header}


def chunk_text(title: str | None, chunk: Chunk) -> str:
    """:func:`unit_text` of a chunk of a document titled ``title``."""
    return unit_text(title, chunk_locator(chunk), chunk.text)


def unit_text(title: str | None, locator: Mapping[str, Any] | None, body: str) -> str:
    """What a unit is searched and embedded by: :func:`unit_context`, a blank line, ``body``.

    >>> unit_text("notes.txt", {}, "hello")
    'notes\\n\\nhello'
    """
    context = unit_context(title, locator)
    return f"{context}\n\n{body}" if context else body
