"""Dify's "external knowledge API": ``POST /retrieval`` (and ``/dify/retrieval``).

Dify (and RAGFlow, which serves the same contract) reaches an outside knowledge source by
appending ``/retrieval`` to the endpoint a user registers, with ``Authorization: Bearer <key>``
and a JSON body ``{knowledge_id, query, retrieval_setting: {top_k, score_threshold},
metadata_condition?}``; it expects ``{"records": [{content, score, title, metadata}]}`` and, on
failure, ``{"error_code", "error_msg"}`` (1001 bad Authorization header, 1002 authorization
failed, 2001 knowledge does not exist; 3001 is ours: a request Dify must fix, e.g. a condition
on an unknown field or a value of the wrong kind).

Here ``knowledge_id`` is a base name or id, the keys are the ``external_api_keys`` setting
(``KNOWBASE_EXTERNAL_API_KEYS``, comma-separated; each sees every base), ``kb serve``'s
``KNOWBASE_API_TOKEN`` and the scoped keys of ``kb keys create``: a scoped key's other bases
answer 2001, as a base that does not exist (``interfaces/http/scopes.py``). The routes exist
when an external key or the API token is configured. The key is checked before the body is
read: Dify's "save API" check posts no body and treats only a 403 as a wrong key.
``metadata_condition`` is handed to the search as a pre-filter (``search/conditions.py``:
Dify's operators, inside both lanes before the cut), so ``top_k`` is filled from every
matching document. Shapes Dify's own models allow are accepted (null
``conditions``, ``logical_operator``, ``top_k`` or ``score_threshold``; lists of numbers); a
query without searchable tokens answers no records, one past the search's limit is cut to it.
An endpoint registered with a trailing slash makes Dify call ``//retrieval``: served too.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from knowbase import MAX_QUERY_CHARS, OPEN, Principal
from knowbase.errors import InvalidInput, NoSearchableTokens, NotFound, Unauthorized
from knowbase.interfaces.http.scopes import visible_base

if TYPE_CHECKING:
    from knowbase import SearchResult
    from knowbase.service import Knowledge

#: The paths Dify may call: the bare one, and the one under a ``/dify`` prefix (RAGFlow's).
RETRIEVAL_PATHS = ("/retrieval", "/dify/retrieval")
#: What Dify calls when the endpoint was saved with a trailing slash (``{endpoint}/retrieval``).
SLASHED_PATHS = ("//retrieval", "/dify//retrieval")
#: Our own code, in Dify's shape: the request cannot be served as sent (fix the request).
INVALID_REQUEST = 3001


class RetrievalSetting(BaseModel):
    """``top_k`` null: the base's default; ``score_threshold`` null: 0."""

    top_k: int | None = Field(default=None, ge=1, le=1000)
    score_threshold: float | None = Field(default=None, ge=0.0, le=1.0)


class Condition(BaseModel):
    """One of Dify's conditions; what the operators do: ``knowbase.search.conditions``."""

    name: str | list[str]
    comparison_operator: str
    value: str | int | float | list[str | int | float | None] | None = None


class MetadataCondition(BaseModel):
    logical_operator: str | None = "and"
    conditions: list[Condition] | None = None


class RetrievalRequest(BaseModel):
    knowledge_id: str = Field(min_length=1)
    query: str
    retrieval_setting: RetrievalSetting | None = None
    metadata_condition: MetadataCondition | None = None


class Record(BaseModel):
    content: str
    score: float
    title: str
    metadata: dict[str, Any]


class RetrievalResponse(BaseModel):
    records: list[Record]


class DifyError(BaseModel):
    """Dify's error shape."""

    error_code: int = Field(examples=[1002])
    error_msg: str


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


def retrieve(kb: Knowledge, body: RetrievalRequest, principal: Principal = OPEN) -> dict[str, Any]:
    """Dify's records for ``body`` (raises ``NotFound`` for an unknown base or one outside the
    ``principal``'s, ``InvalidFilter`` for a condition that cannot be evaluated)."""
    base = visible_base(kb, principal, body.knowledge_id)
    setting = body.retrieval_setting or RetrievalSetting()
    condition = body.metadata_condition
    query = body.query.strip()[:MAX_QUERY_CHARS]
    if not query:
        return {"records": []}
    try:
        response = kb.search(
            base,
            query,
            top_k=setting.top_k,
            conditions=condition.model_dump() if condition is not None else None,
        )
    except NoSearchableTokens:  # "???": nothing to match, which Dify shows as no records
        return {"records": []}
    threshold = setting.score_threshold or 0.0
    kept = [r for r in response.results if r.score >= threshold]
    labels = kb.effective_labels(base.id, {r.item_id for r in kept})
    return {"records": [record_of(r, base.name, labels.get(r.item_id, ([], {}))) for r in kept]}


def _parse(raw: bytes) -> RetrievalRequest | JSONResponse:
    """The body, or Dify's error for one that cannot be read."""
    try:
        return RetrievalRequest.model_validate(json.loads(raw or b"null"))
    except (ValueError, ValidationError) as exc:
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            message = f"invalid request: {where}: {first['msg']}"
        else:
            message = "the body must be JSON: {knowledge_id, query, retrieval_setting}"
        return dify_error(400, INVALID_REQUEST, message)


def _knowbase_key(request: Request, authorization: str | None) -> Principal | None:
    """Who a bearer token other than a Dify key names (the API token, a live scoped key);
    None for anything else. No token is never enough here, even on an open server."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return None
    kb: Knowledge = request.app.state.kb
    try:
        return kb.authenticate(given.strip(), admin_token=request.app.state.admin_token)
    except Unauthorized:
        return None


def build_router(keys: tuple[str, ...]) -> APIRouter:
    """The retrieval routes, answering with the keys given (none: build no router)."""
    router = APIRouter(tags=["external knowledge (Dify)"])

    async def retrieval(request: Request) -> JSONResponse:
        kb: Knowledge = request.app.state.kb
        authorization = request.headers.get("authorization")
        principal = OPEN
        refused = check_key(authorization, keys)
        if refused is not None:  # not a Dify key: the API token or a scoped key may call it
            found_key = await run_in_threadpool(_knowbase_key, request, authorization)
            if found_key is None:
                return refused
            principal = found_key
        body = _parse(await request.body())
        if isinstance(body, JSONResponse):
            return body
        try:
            found = await run_in_threadpool(retrieve, kb, body, principal)
        except NotFound:
            return dify_error(404, 2001, "The knowledge does not exist")
        except InvalidInput as exc:
            return dify_error(400, INVALID_REQUEST, str(exc))
        return JSONResponse(found)

    request_body = {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/RetrievalRequest"}}
        },
    }
    from knowbase.interfaces.http.common import error_responses

    responses: dict[int | str, dict[str, Any]] = {
        200: {"model": RetrievalResponse, "description": "the records, best first"},
        400: {"model": DifyError, "description": "the request cannot be served (3001)"},
        403: {"model": DifyError, "description": "bad Authorization header (1001) or key (1002)"},
        404: {"model": DifyError, "description": "the knowledge does not exist (2001)"},
        # a base that cannot be searched right now answers as every other route does
        **error_responses(409, 503),
    }
    for path in RETRIEVAL_PATHS + SLASHED_PATHS:
        router.add_api_route(
            path,
            retrieval,
            methods=["POST"],
            summary="Dify external knowledge retrieval",
            response_model=None,
            responses=responses,
            openapi_extra={"requestBody": request_body, "security": [{"DifyKey": []}]},
            include_in_schema=path in RETRIEVAL_PATHS,
        )
    return router


#: Models the OpenAPI document refers to by name (the body is read by hand, after the key).
SCHEMA_MODELS: tuple[type[BaseModel], ...] = (RetrievalRequest,)

__all__ = [
    "RETRIEVAL_PATHS",
    "SCHEMA_MODELS",
    "SLASHED_PATHS",
    "build_router",
    "retrieve",
]
