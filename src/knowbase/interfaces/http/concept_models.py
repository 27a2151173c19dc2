"""Request and response bodies of the concept routes (read, grep, tree, delete/refresh by
Concept ID): the documents as agents address them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from knowbase.interfaces.http.models import ItemStatus, _Strict
from knowbase.operations.add.inputs import BATCH_MAX


# --- concepts ----------------------------------------------------------------------------------
class LocatorSpan(BaseModel):
    unit_index: int
    char_start: int
    char_end: int
    locator: dict[str, Any] = Field(default_factory=dict)


class ConceptReadOut(BaseModel):
    """A slice of at most 20,000 characters; ``truncated`` when the document goes on."""

    base_id: str
    concept_id: str
    item_id: str
    title: str
    item_type: str
    total_chars: int
    char_start: int
    char_end: int
    content: str
    truncated: bool
    locators: list[LocatorSpan]


class GrepMatch(BaseModel):
    line: int
    char_start: int
    char_end: int
    snippet: str


class ConceptGrepOut(BaseModel):
    base_id: str
    concept_id: str
    item_id: str
    title: str
    item_type: str
    total_matches: int
    matches: list[GrepMatch]
    limit: int
    partial: bool
    stopped: Literal["input_length", "time_budget"] | None = None
    reason: str | None = None  # with ``stopped``: what was not searched


class TreeNode(BaseModel):
    depth: int
    item_id: str
    title: str
    item_type: str
    status: ItemStatus
    concept_id: str | None = None


class TreeOut(BaseModel):
    base_id: str
    nodes: list[TreeNode]
    truncated: bool
    total_items: int


class ConceptIdsRequest(_Strict):
    concept_ids: list[str] = Field(min_length=1, max_length=BATCH_MAX)


class ConceptBatchOut(BaseModel):
    applied: list[str]
    not_found: list[str]
    job_id: str | None


# --- events ------------------------------------------------------------------------------------
# One Server-Sent Event, as OpenAPI 3.1 documents a text/event-stream: ``schema`` describes each
# event (``event``/``id``/``data`` fields), ``data`` being a JSON object.
SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "enum": ["item", "job", "base"]},
        "id": {"type": "string"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"type": "object", "required": ["id", "status"]},
        },
    },
}
