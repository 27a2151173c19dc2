"""Pydantic request/response models of the HTTP API: the OpenAPI document is built from these.

Responses mirror the facade's value objects (``Base.to_dict()``, ``Item.to_dict()``, the search
dataclasses, ``Job``) field for field, snake_case. Bounds on numbers keep generated input inside
what SQLite can store, so a fuzzer's 10**30 is a 422, not a 500.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from knowbase import BASE_SETTINGS as SETTINGS
from knowbase import (
    BATCH_MAX,
    DEFAULT_STRATEGY,
    MAX_DIMENSIONS,
    NOTE_MAX_CHARS,
    BaseSetting,
    ConflictStrategy,
)

# ``profile:model``, both parts non-empty: the syntax registry.parse_model_id accepts, stated in
# the schema so clients (and the fuzzer) know it; whether the profile exists is the facade's.
ModelId = Annotated[
    str,
    Field(
        min_length=3,
        max_length=200,
        pattern=r"^[^:]+:[\s\S]",
        description="profile:model, e.g. local:all-minilm-l6-v2",
    ),
]

ItemStatus = Literal[
    "idle", "preparing", "processing", "reading", "embedding", "completed", "failed", "deleting"
]
JobStatus = Literal["pending", "running", "completed", "failed", "cancelled"]
Readiness = Literal["ready", "degraded", "unavailable"]
#: The ``conflict`` field's help, for the JSON body and the upload forms alike.
CONFLICT_HELP = (
    "when a source is already in the base: update (the default) refreshes the item that holds "
    "it, rename adds a copy (name_1), detect adds nothing and answers 409, replace deletes the "
    "old one first. An upload has no origin, so it never matches one: it is added as a copy"
)
MAX_INT = 2**31 - 1


def _whole_number(value: Any) -> Any:
    """``217.0`` is an integer to JSON Schema, so it is one here too (strict mode refuses it)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def json_int(ge: int, le: int) -> Any:
    """An integer in ``ge..le`` as JSON Schema means it: 3 and 3.0, never true or "3". (The
    bounds sit inside the Annotated: on ``X | None = Field(ge=…)`` pydantic would emit them as
    unknown keywords next to the validator instead of ``minimum``/``maximum``.)"""
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_whole_number)]


class _Strict(BaseModel):
    # strict: the body is JSON, and what the schema calls an integer or a number is one — no
    # true for 1, no "3" for 3 (lax mode took both, so the fuzzer's invalid data was accepted).
    model_config = ConfigDict(extra="forbid", strict=True)


# --- errors ------------------------------------------------------------------------------------
class ErrorBody(BaseModel):
    """Every error: a stable snake_case ``code``, a message a person can act on, context."""

    code: str = Field(examples=["not_found"])
    message: str
    details: dict[str, Any] = Field(default_factory=dict)
    hint: str | None = None


# --- bases -------------------------------------------------------------------------------------
def _setting_in(s: BaseSetting) -> tuple[Any, Any]:
    """A request field from a setting's declaration: its bounds as JSON Schema states them; a
    setting that cannot be null is optional but refuses ``null``."""
    kind: Any
    if s.choices:
        kind = Literal[s.choices]  # type: ignore[valid-type]
    elif s.type is int:
        top = s.maximum if s.maximum is not None else s.input_max
        kind = json_int(int(s.minimum if s.minimum is not None else -MAX_INT), int(top or MAX_INT))
    elif s.type is float:
        kind = Annotated[float, Field(ge=s.minimum, le=s.maximum)]
    elif s.type is str:
        kind = Annotated[
            str,
            Field(
                min_length=s.input_min_length,
                max_length=s.input_max_length,
                pattern=(
                    f"^({s.value_pattern})$" if s.value_pattern is not None else s.input_pattern
                ),
            ),
        ]
    else:
        kind = s.type
    return (kind | None if s.nullable else kind), Field(default=None, description=s.help)


def _setting_out(s: BaseSetting) -> tuple[Any, Any]:
    kind: Any = Literal[s.choices] if s.choices else s.type  # type: ignore[valid-type]
    return (kind | None if s.nullable else kind), ...


class _BaseIdentityOut(BaseModel):
    id: str
    name: str
    status: Literal["completed", "failed"]
    error: str | None
    embedding_model_id: str | None
    dimensions: int | None
    index_backend: Literal["sqlite", "postgres", "qdrant"]
    created_at: int
    updated_at: int


#: A base as the API answers it: its identity and every declared setting (``Base.to_dict()``).
BaseOut = create_model(
    "BaseOut",
    __base__=_BaseIdentityOut,
    __module__=__name__,
    **{s.name: _setting_out(s) for s in SETTINGS},  # type: ignore[call-overload]
)

#: Settings to change; omitted fields stay. Fields typed without ``null`` cannot be cleared.
BaseSettingsPatch = create_model(
    "BaseSettingsPatch",
    __base__=_Strict,
    __module__=__name__,
    __doc__="Settings to change; omitted fields stay. Fields typed without ``null`` cannot be"
    " cleared.",
    name=(str, Field(default=None, min_length=1, max_length=200)),
    **{s.name: _setting_in(s) for s in SETTINGS if s.mutable},  # type: ignore[call-overload]
)


class BaseCreate(BaseSettingsPatch):  # type: ignore[valid-type,misc]
    """A new base; without ``embedding_model_id`` it is BM25-only."""

    name: str = Field(min_length=1, max_length=200)
    embedding_model_id: ModelId | None = Field(default=None, examples=["local:all-minilm-l6-v2"])
    dimensions: json_int(1, MAX_DIMENSIONS) | None = None
    index_backend: Literal["sqlite", "postgres", "qdrant"] | None = Field(
        default=None,
        description="where the index lives; default: next to the catalog (sqlite file or"
        " PostgreSQL). Fixed for the base's life.",
    )


class RestoreRequest(_Strict):
    name: str = Field(min_length=1, max_length=200, description="name of the new base")
    embedding_model_id: ModelId | None = None


class RestoreOut(BaseModel):
    base: BaseOut
    skipped_missing_source_count: int
    job_ids: list[str]


class EnableEmbeddingRequest(_Strict):
    embedding_model_id: ModelId


class Deleted(BaseModel):
    id: str
    deleted: bool = True
    job_id: str | None = None


# --- items -------------------------------------------------------------------------------------
class AddInputIn(_Strict):
    """One input. ``file``/``directory`` need an absolute ``path`` under a served root."""

    type: Literal["file", "directory", "url", "sitemap", "note"]
    path: str | None = Field(default=None, min_length=1, max_length=4096)
    url: str | None = Field(default=None, min_length=1, max_length=8192)
    content: str | None = Field(default=None, max_length=NOTE_MAX_CHARS)
    title: str | None = Field(default=None, max_length=1000)
    tags: list[Annotated[str, Field(max_length=100)]] | None = Field(
        None, max_length=64, description="tags of the item (a folder's apply to its files)"
    )
    metadata: dict[str, Any] | None = Field(
        None, description="small JSON object: text, numbers, booleans or lists of them"
    )


class AddRequest(_Strict):
    inputs: list[AddInputIn] = Field(min_length=1, max_length=BATCH_MAX)
    conflict: ConflictStrategy = Field(DEFAULT_STRATEGY, description=CONFLICT_HELP)


class ItemOut(BaseModel):
    id: str
    base_id: str
    group_id: str | None
    type: str
    data: dict[str, Any]
    origin: str | None
    status: ItemStatus
    error_code: str | None
    error_message: str | None
    created_at: int
    updated_at: int
    concept_id: str | None
    title: str
    tags: list[str] = Field(default_factory=list, description="the item's own tags")
    metadata: dict[str, Any] = Field(default_factory=dict, description="the item's own metadata")
    retry_blocked: str | None = Field(
        default=None, description="listings: why a retry cannot fix this failed item"
    )


class ConflictOut(BaseModel):
    type: str
    title: str
    item_id: str | None = None


class Rejected(BaseModel):
    """An uploaded file that was not added, and why."""

    name: str
    code: str
    message: str


class AddOut(BaseModel):
    """``added``: the items and their jobs. Detect-strategy conflicts answer 409 instead."""

    status: Literal["added"]
    items: list[ItemOut]
    updated: list[ItemOut] = Field(
        default_factory=list,
        description="conflict update: items already in the base that this add refreshes",
    )
    job_ids: list[str]
    rejected: list[Rejected] = Field(
        default_factory=list, description="uploads left out (the rest were added)"
    )


class JobRef(BaseModel):
    job_id: str | None = Field(description="null when there was nothing to do")


class ChunkOut(BaseModel):
    unit_id: str
    unit_index: int
    char_start: int
    char_end: int
    text: str
    locator: dict[str, Any] = Field(default_factory=dict)


# --- search ------------------------------------------------------------------------------------
class SearchRequest(_Strict):
    query: str = Field(min_length=1, max_length=1000)
    top_k: json_int(1, 1000) | None = None
    under: str | None = Field(
        None, max_length=4096, description="only documents in this folder (Concept ID prefix)"
    )
    types: list[Annotated[str, Field(max_length=200)]] | None = Field(
        None,
        max_length=32,
        description="source types: file extensions (pdf, md…), url, note; any of them",
    )
    since: str | None = Field(
        None, max_length=64, description="only items updated at or after this ISO date/datetime"
    )
    tags: list[Annotated[str, Field(max_length=100)]] | None = Field(
        None, max_length=32, description="only documents carrying every one of these tags"
    )
    where: dict[str, Any] | list[Annotated[str, Field(max_length=300)]] | None = Field(
        None,
        description='metadata conditions, all required: {"year": {"gte": 2020}, "lang": '
        '{"in": ["en", "de"]}, "team": "infra"} or ["year>=2020", "lang in en,de"]',
    )
    context: json_int(1, 8000) | None = Field(  # type: ignore[valid-type]
        None, description="return each hit with its surroundings, within this many tokens"
    )
    also: list[Annotated[str, Field(min_length=1, max_length=1000)]] | None = Field(
        None, max_length=4, description="up to 4 more phrasings of the intent, fused by rank"
    )
    group: Literal["passage", "document"] | None = None  # document: an entry a document


class MultiSearchRequest(SearchRequest):
    bases: list[str] = Field(min_length=1, max_length=50, description="base names or ids")


# --- jobs --------------------------------------------------------------------------------------
class ProgressOut(BaseModel):
    stage: str | None
    percent: float | None
    details: dict[str, Any]


class JobOut(BaseModel):
    id: str
    kind: str
    queue: str
    payload: dict[str, Any]
    status: JobStatus
    parent_id: str | None
    attempts: int
    max_attempts: int
    run_at: int
    cancel_requested: bool
    progress: ProgressOut
    error_code: str | None
    error_message: str | None
    created_at: int
    updated_at: int
    finished_at: int | None
    by_key: str | None = Field(None, description="the API key that asked for it (or admin)")
    by_surface: str | None = Field(None, description="http, console, mcp or cli")


# --- readiness ---------------------------------------------------------------------------------
class ComponentOut(BaseModel):
    component: str
    status: Readiness
    reason: str
    base_id: str | None = None
    base_name: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class StatusOut(BaseModel):
    status: Readiness
    components: list[ComponentOut]


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
