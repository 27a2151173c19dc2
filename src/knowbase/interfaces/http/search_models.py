"""Response models of search (one base, several bases): each hit with its snippet, and where
each base's threshold cut. Kept apart from ``models.py`` (one concept per module)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class SearchResultOut(BaseModel):
    rank: int
    chunk_id: str
    item_id: str
    concept_id: str | None
    title: str | None
    item_type: str
    source: str | None
    score: float
    score_kind: Literal["hybrid", "keyword", "vector", "rrf", "relevance"]
    text: str
    unit_index: int
    char_start: int
    char_end: int
    locator: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] | None = None
    snippet: dict[str, Any] | None = Field(None, description="the best-matching lines")
    citations: list[dict[str, Any]] | None = None  # group=document: the best passages' places
    base_id: str
    base_name: str


class SearchOut(BaseModel):
    results: list[SearchResultOut]
    mode: Literal["hybrid", "bm25"]
    explain: dict[str, Any]


class MultiSearchOut(BaseModel):
    """Results of several bases in one list: by rank, by score when all are relevance scores."""

    results: list[SearchResultOut]
    modes: dict[str, Literal["hybrid", "bm25"]] = Field(description="base id → mode")
    thresholds: dict[str, dict[str, Any]] = Field({}, description="base id → threshold cut")
