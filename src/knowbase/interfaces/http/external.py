"""Dify's "external knowledge API": ``POST /retrieval`` (and ``/dify/retrieval``).

Dify (and RAGFlow, which serves the same contract) reaches an outside knowledge source by
appending ``/retrieval`` to the endpoint a user registers, with ``Authorization: Bearer <key>``
and a JSON body ``{knowledge_id, query, retrieval_setting: {top_k, score_threshold},
metadata_condition?}``; it expects ``{"records": [{content, score, title, metadata}]}`` and, on
failure, ``{"error_code", "error_msg"}`` (1001 bad Authorization header, 1002 authorization
failed, 2001 knowledge does not exist).

Here ``knowledge_id`` is a base name or id, the keys are the ``external_api_keys`` setting
(``KNOWBASE_EXTERNAL_API_KEYS``, comma-separated) and the routes exist only when a key is
configured. They check their own keys, so ``kb serve``'s ``KNOWBASE_API_TOKEN`` does not apply
to them. ``metadata_condition`` is evaluated on each record's ``metadata`` — the document's own
metadata and tags (its folders' included) plus Concept ID, source, type, title and base —, over
a wider candidate list so filtering does not starve ``top_k``.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from knowbase.errors import NotFound

if TYPE_CHECKING:
    from knowbase.search.search import SearchResult
    from knowbase.service import Knowledge

#: The paths Dify may call: the bare one, and the one under a ``/dify`` prefix (RAGFlow's).
RETRIEVAL_PATHS = ("/retrieval", "/dify/retrieval")
#: Candidates fetched per requested record when a metadata condition will filter them.
_FILTER_WIDENING = 5


class RetrievalSetting(BaseModel):
    top_k: int = Field(ge=1, le=1000)
    score_threshold: float = Field(default=0.0, ge=0.0, le=1.0)


class Condition(BaseModel):
    name: str | list[str]
    comparison_operator: str
    value: str | float | list[str] | None = None


class MetadataCondition(BaseModel):
    logical_operator: Literal["and", "or"] = "and"
    conditions: list[Condition] = Field(default_factory=list)


class RetrievalRequest(BaseModel):
    knowledge_id: str = Field(min_length=1)
    query: str = Field(min_length=1)
    retrieval_setting: RetrievalSetting
    metadata_condition: MetadataCondition | None = None


def dify_error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse({"error_code": code, "error_msg": message}, status_code=status)


def check_key(authorization: str | None, keys: Iterable[str]) -> JSONResponse | None:
    """None when ``authorization`` carries one of ``keys``; else Dify's 1001/1002 error."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return dify_error(
            403, 1001, "Invalid Authorization header format. Expected 'Bearer <api-key>' format."
        )
    raw = given.strip().encode("latin-1", "replace")
    # compare_digest against every key: the time taken does not tell which one nearly matched.
    if not any([hmac.compare_digest(raw, k.encode("utf-8")) for k in keys]):  # noqa: C419
        return dify_error(403, 1002, "Authorization failed")
    return None


def record_of(
    result: SearchResult,
    base_name: str,
    labels: tuple[list[str], dict[str, Any]] = ([], {}),
) -> dict[str, Any]:
    """A Dify record; ``metadata`` holds the document's own metadata and tags (its folders'
    included), then the citation fields (which win on a name clash)."""
    tags, custom = labels
    metadata: dict[str, Any] = {
        **custom,
        "tags": tags or None,
        "base": base_name,
        "concept_id": result.concept_id,
        "source": result.source,
        "item_type": result.item_type,
        "title": result.title,
        "chunk_id": result.chunk_id,
        "char_start": result.char_start,
        "char_end": result.char_end,
        "score_kind": str(result.score_kind),
    }
    if result.locator:
        metadata["locator"] = result.locator
    return {
        "content": result.text,
        "score": round(float(result.score), 6),
        "title": result.title or result.concept_id or result.source or "",
        "metadata": {k: v for k, v in metadata.items() if v is not None},
    }


def _as_number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def _compare(op: str, have: Any, want: Any) -> bool:
    text = "" if have is None else str(have)
    wanted = [str(w) for w in want] if isinstance(want, list) else [str(want)]
    numeric: dict[str, Callable[[float, float], bool]] = {
        "=": lambda a, b: a == b,
        "≠": lambda a, b: a != b,
        "!=": lambda a, b: a != b,
        ">": lambda a, b: a > b,
        "<": lambda a, b: a < b,
        "≥": lambda a, b: a >= b,
        ">=": lambda a, b: a >= b,
        "≤": lambda a, b: a <= b,
        "<=": lambda a, b: a <= b,
    }
    if op in numeric:
        a, b = _as_number(have), _as_number(want)
        return a is not None and b is not None and numeric[op](a, b)
    if op in {"before", "after"}:
        a, b = _as_datetime(have), _as_datetime(want)
        if a is None or b is None:
            return False
        if (a.tzinfo is None) != (b.tzinfo is None):  # compare naive with naive
            a, b = a.replace(tzinfo=None), b.replace(tzinfo=None)
        return a < b if op == "before" else a > b
    textual: dict[str, Callable[[], bool]] = {
        "contains": lambda: any(w in text for w in wanted),
        "not contains": lambda: not any(w in text for w in wanted),
        "start with": lambda: any(text.startswith(w) for w in wanted),
        "end with": lambda: any(text.endswith(w) for w in wanted),
        "is": lambda: text == wanted[0],
        "is not": lambda: text != wanted[0],
        "in": lambda: text in wanted,
        "not in": lambda: text not in wanted,
        "empty": lambda: have in (None, "", [], {}),
        "not empty": lambda: have not in (None, "", [], {}),
        "null": lambda: have is None,
        "not null": lambda: have is not None,
    }
    return textual[op]() if op in textual else False


def matches(metadata: dict[str, Any], condition: MetadataCondition | None) -> bool:
    """Whether a record's metadata satisfies Dify's ``metadata_condition`` (no condition: yes).

    A condition naming several fields holds when any of them holds; an unknown operator or a
    field the record lacks does not hold (except ``empty``/``not empty``/``null``).
    """
    if condition is None or not condition.conditions:
        return True
    outcomes = []
    for c in condition.conditions:
        names = c.name if isinstance(c.name, list) else [c.name]
        op = c.comparison_operator.strip().lower()
        outcomes.append(any(_compare(op, metadata.get(n), c.value) for n in names))
    return all(outcomes) if condition.logical_operator == "and" else any(outcomes)


def retrieve(kb: Knowledge, body: RetrievalRequest) -> dict[str, Any]:
    """Dify's records for ``body`` (raises ``NotFound`` for an unknown base)."""
    base = kb.get_base(body.knowledge_id)
    wanted = body.retrieval_setting.top_k
    widened = body.metadata_condition is not None and bool(body.metadata_condition.conditions)
    response = kb.search(base, body.query, top_k=wanted * _FILTER_WIDENING if widened else wanted)
    labels = kb.effective_labels(base.id, {r.item_id for r in response.results})
    records = []
    for result in response.results:
        if result.score < body.retrieval_setting.score_threshold:
            continue
        record = record_of(result, base.name, labels.get(result.item_id, ([], {})))
        if matches(record["metadata"], body.metadata_condition):
            records.append(record)
        if len(records) == wanted:
            break
    return {"records": records}


def build_router(keys: tuple[str, ...]) -> APIRouter:
    """The retrieval routes, answering with the keys given (none: build no router)."""
    router = APIRouter(tags=["external knowledge (Dify)"])

    async def retrieval(request: Request, body: RetrievalRequest) -> JSONResponse:
        refused = check_key(request.headers.get("authorization"), keys)
        if refused is not None:
            return refused
        kb: Knowledge = request.app.state.kb
        try:
            found = await run_in_threadpool(retrieve, kb, body)
        except NotFound:
            return dify_error(404, 2001, "The knowledge does not exist")
        return JSONResponse(found)

    for path in RETRIEVAL_PATHS:
        router.add_api_route(
            path,
            retrieval,
            methods=["POST"],
            summary="Dify external knowledge retrieval",
            response_model=None,
        )
    return router


__all__ = ["RETRIEVAL_PATHS", "build_router", "matches", "retrieve"]
