"""A document's outline, ``GET /bases/{base}/concepts/{concept_id}/outline``, and the shape of
a section read (``GET /bases/{base}/concepts/read?section=…``, in :mod:`.query`).

The Concept ID is the rest of the path before ``/outline``, slashes and all
(``/bases/docs/concepts/guides/install.md/outline``); percent-encode what a URL path cannot
hold (``?``, ``#``, ``%``). The other concept routes take it as ``concept_id`` in the query.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from knowbase.interfaces.http.common import COMMON_ERRORS, get_kb
from knowbase.interfaces.http.models import ConceptReadOut
from knowbase.service import Knowledge

router = APIRouter(responses=COMMON_ERRORS)


class OutlinePart(BaseModel):
    """A table (its caption, else its header row) or a figure (its caption) under a node."""

    label: str
    char_start: int


class OutlineNodeOut(BaseModel):
    id: str = Field(description='"2.1": read the section with concepts/read?section=2.1')
    title: str
    depth: int
    char_start: int
    char_end: int
    tokens: int
    locator: dict[str, Any] = Field(default_factory=dict)
    tables: list[OutlinePart] = Field(default_factory=list)
    figures: list[OutlinePart] = Field(default_factory=list)


class OutlineOut(BaseModel):
    """Nodes in pre-order; ``kind`` is headings, slides, sheets, chapters, pages or windows."""

    base_id: str
    concept_id: str
    item_id: str
    title: str
    item_type: str
    total_chars: int
    total_tokens: int
    kind: str
    nodes: list[OutlineNodeOut]
    total_nodes: int
    truncated: bool


class SectionOut(BaseModel):
    id: str
    title: str
    path: list[str]
    char_start: int
    char_end: int
    tokens: int
    locator: dict[str, Any] = Field(default_factory=dict)


class SectionReadOut(ConceptReadOut):
    """A read; with ``section``, the section read and the cursor that reads on (or null)."""

    section: SectionOut | None = None
    next_cursor: str | None = None


@router.get(
    "/bases/{base}/concepts/{concept_id:path}/outline", response_model=OutlineOut, tags=["concepts"]
)
def concept_outline(
    base: str,
    concept_id: str,
    depth: int | None = Query(None, ge=1, le=64, description="levels (1: the top level)"),
    under: str | None = Query(
        None, min_length=1, max_length=1000, description="a node id or heading path: its subtree"
    ),
    kb: Knowledge = Depends(get_kb),
) -> dict[str, Any]:
    """The document's outline: headings (slides, sheets, chapters, pages or token windows),
    each with its id, locator, char range, tokens, tables and figures."""
    b = kb.get_base(base)
    return kb.concepts.outline(b.id, concept_id, depth=depth, under=under)
