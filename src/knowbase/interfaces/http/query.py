"""Search (one base or several, merged), concepts (read, grep, tree), jobs, ``/status``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import anyio
import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request

from knowbase import Job
from knowbase.errors import InvalidInput, NotFound
from knowbase.interfaces.http.common import BODY_ERRORS, COMMON_ERRORS, get_kb
from knowbase.interfaces.http.models import (
    ConceptBatchOut,
    ConceptGrepOut,
    ConceptIdsRequest,
    JobOut,
    JobStatus,
    MultiSearchRequest,
    SearchRequest,
    StatusOut,
    TreeOut,
)
from knowbase.interfaces.http.outline import SectionReadOut
from knowbase.interfaces.http.scopes import principal_of, visible_base, visible_ids
from knowbase.interfaces.http.search_models import MultiSearchOut, SearchOut
from knowbase.service import Knowledge

router = APIRouter(responses=COMMON_ERRORS)


# --- search ------------------------------------------------------------------------------------
def _search_body(
    kb: Knowledge, base: str, query: str, top_k: int | None, filters: dict[str, Any]
) -> dict[str, Any]:
    b = kb.get_base(base)
    response = kb.search(b, query, top_k=top_k, **filters)
    # vars(), not asdict(): each result's locator is already its own copy, and asdict's deep
    # copy was ~0.6 ms of a ~4 ms search
    results = [{**vars(r), "base_id": b.id, "base_name": b.name} for r in response.results]
    return {"results": results, "mode": response.mode, "explain": response.explain}


async def _run_search(request: Request, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a search in the threadpool under the app's search limiter.

    A search is ~10 ms of CPU under the GIL; fifty of them in fifty threads thrash the GIL and
    all finish late. A few at a time, the rest waiting cheaply on the event loop, gives the
    same throughput with a much shorter tail (bench/http_load.py), and other routes keep the
    default threadpool. The search routes are async so the whole request makes one hop.
    """
    state = request.app.state
    if state.search_limiter is None:  # created lazily: anyio needs a running loop
        state.search_limiter = anyio.CapacityLimiter(state.search_concurrency)
    return await anyio.to_thread.run_sync(lambda: fn(*args), limiter=state.search_limiter)


@router.get("/bases/{base}/search", response_model=SearchOut, tags=["search"])
async def search_get(
    base: str,
    request: Request,
    q: str = Query(min_length=1, max_length=1000, description="the query"),
    top_k: int | None = Query(None, ge=1, le=1000),
    under: str | None = Query(None, max_length=4096, description="Concept ID folder"),
    types: list[str] | None = Query(
        None, alias="type", max_length=32, description="source type (repeatable)"
    ),
    since: str | None = Query(None, max_length=64, description="ISO date/datetime"),
    tags: list[str] | None = Query(
        None, alias="tag", max_length=32, description="required tag (repeatable)"
    ),
    where: list[str] | None = Query(
        None, max_length=32, description="metadata condition, e.g. year>=2020 (repeatable)"
    ),
    context: int | None = Query(
        None, ge=1, le=8000, description="each hit with its surroundings, in tokens"
    ),
    also: list[str] | None = Query(
        None, max_length=4, description="another phrasing of the same intent (repeatable, ≤ 4)"
    ),
    group: Literal["passage", "document"] | None = Query(
        None, description="document: one entry per document, its best passages as citations"
    ),
    kb: Knowledge = Depends(get_kb),
) -> dict[str, Any]:
    """Hybrid (or BM25-only) search over the base's completed items, with citations.

    ``under``, ``type``, ``since``, ``tag`` and ``where`` filter inside both lanes (see
    ``POST``); ``context`` returns each hit with its neighbouring chunks
    (``knowbase.search.context``); ``group=document`` ranks documents
    (``knowbase.search.grouping``)."""
    filters = {
        "under": under,
        "types": types,
        "since": since,
        "tags": tags,
        "where": where,
        "context": context,
        "also": also or (),
        "group": group,
    }
    return await _run_search(request, _search_body, kb, base, q, top_k, filters)


@router.post(
    "/bases/{base}/search", response_model=SearchOut, tags=["search"], responses=BODY_ERRORS
)
async def search_post(
    base: str, body: SearchRequest, request: Request, kb: Knowledge = Depends(get_kb)
) -> dict[str, Any]:
    """Same as ``GET``, with the query in a JSON body.

    Filters apply inside both lanes, before the top-k cut: ``under`` (a Concept ID folder,
    matched on path segments), ``types`` (file extensions, ``url``, ``note``), ``since`` (ISO
    date or datetime, UTC unless given). A malformed filter is 422 ``invalid_filter``; one that
    matches nothing gives no results."""
    return await _run_search(
        request, _search_body, kb, base, body.query, body.top_k, _filters(body)
    )


def _filters(body: SearchRequest) -> dict[str, Any]:
    return {
        "under": body.under,
        "types": body.types,
        "since": body.since,
        "tags": body.tags,
        "where": body.where,
        "context": body.context,
        "also": body.also or (),
        "group": body.group,
    }


@router.post("/search", response_model=MultiSearchOut, tags=["search"], responses=BODY_ERRORS)
def search_many(
    body: MultiSearchRequest, request: Request, kb: Knowledge = Depends(get_kb)
) -> dict[str, Any]:
    """Search several bases and merge their results into one list (ranks renumbered from 1).

    By relevance score when every result has one from the same rerank model, else by rank:
    each base's rank 1 first (RRF over the bases); ties by the order of ``bases``. Scores stay
    each base's own. See ``knowbase.search.multi_base``.
    """
    # 404 before any search, for a base the key does not see as for one that does not exist
    who = principal_of(request)
    bases = [visible_base(kb, who, name) for name in body.bases]
    found = kb.search_many(
        bases, body.query, top_k=body.top_k, limit=body.top_k or 10, **_filters(body)
    )
    if found.errors:
        raise next(iter(found.errors.values()))
    names = {b.id: b.name for b in bases}
    results = [
        {**vars(m.result), "base_id": m.base_id, "base_name": names[m.base_id], "rank": m.rank}
        for m in found.results
    ]
    return {"results": results, "modes": found.modes, "thresholds": found.thresholds}


# --- concepts ----------------------------------------------------------------------------------
@router.get("/bases/{base}/concepts/read", response_model=SectionReadOut, tags=["concepts"])
def read_concept(
    base: str,
    concept_id: str = Query(min_length=1, max_length=4096, description="path inside the base"),
    char_start: int | None = Query(None, ge=0, le=2**40),
    char_end: int | None = Query(None, ge=0, le=2**40),
    section: str | None = Query(
        None, min_length=1, max_length=1000, description="an outline node id or heading path"
    ),
    cursor: str | None = Query(None, min_length=1, max_length=1100, description="next_cursor"),
    max_tokens: int | None = Query(None, ge=1, le=5000, description="section read budget"),
    kb: Knowledge = Depends(get_kb),
) -> dict[str, Any]:
    """The document's Markdown (or a character slice of it) by Concept ID; with ``section``
    (or a ``cursor``), that section whole within ``max_tokens`` (default 1,500)."""
    b = kb.get_base(base)
    if section is not None or cursor is not None:
        if char_start is not None or char_end is not None:
            raise InvalidInput("a section read takes no char_start/char_end", section=section)
        return kb.concepts.read_section(
            b.id, concept_id, section, cursor=cursor, max_tokens=max_tokens
        )
    return kb.concepts.read_concept(b.id, concept_id, char_start=char_start, char_end=char_end)


@router.get("/bases/{base}/concepts/grep", response_model=ConceptGrepOut, tags=["concepts"])
def grep_concept(
    base: str,
    concept_id: str = Query(min_length=1, max_length=4096),
    pattern: str = Query(min_length=1, max_length=1000, description="a regular expression"),
    ignore_case: bool = True,
    max_matches: int | None = Query(None, ge=1, le=10_000),
    kb: Knowledge = Depends(get_kb),
) -> dict[str, Any]:
    """Lines of the document matching ``pattern`` (bounded in time and input length)."""
    b = kb.get_base(base)
    return kb.concepts.grep_concept(
        b.id, concept_id, pattern, ignore_case=ignore_case, max_matches=max_matches
    )


@router.get("/bases/{base}/concepts/tree", response_model=TreeOut, tags=["concepts"])
def organization_tree(
    base: str,
    max_depth: int | None = Query(None, ge=0, le=1000),
    kb: Knowledge = Depends(get_kb),
) -> dict[str, Any]:
    """The base's folders and documents as a tree of Concept IDs."""
    b = kb.get_base(base)
    return kb.concepts.organization_tree(b.id, max_depth=max_depth)


@router.post(
    "/bases/{base}/concepts/delete",
    response_model=ConceptBatchOut,
    status_code=202,
    tags=["concepts"],
    responses=BODY_ERRORS,
)
def delete_concepts(base: str, body: ConceptIdsRequest, kb: Knowledge = Depends(get_kb)) -> Any:
    """Delete documents by Concept ID in one background job; unknown ids are listed back."""
    return kb.concepts.delete_concepts(kb.get_base(base).id, body.concept_ids)


@router.post(
    "/bases/{base}/concepts/refresh",
    response_model=ConceptBatchOut,
    status_code=202,
    tags=["concepts"],
    responses=BODY_ERRORS,
)
def refresh_concepts(base: str, body: ConceptIdsRequest, kb: Knowledge = Depends(get_kb)) -> Any:
    """Reindex documents by Concept ID (re-acquired from their origin when they have one)."""
    return kb.concepts.refresh_concepts(kb.get_base(base).id, body.concept_ids)


# --- jobs --------------------------------------------------------------------------------------
def job_dict(job: Job) -> dict[str, Any]:
    """A job as the API shows it: progress grouped, worker internals (lease, locker) left out."""
    return {
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "payload": job.payload,
        "status": job.status,
        "parent_id": job.parent_id,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_at": job.run_at,
        "cancel_requested": job.cancel_requested,
        "progress": {
            "stage": job.progress_stage,
            "percent": job.progress_percent,
            "details": job.progress_details,
        },
        "error_code": job.error_code,
        "error_message": job.error_message,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "finished_at": job.finished_at,
        "by_key": job.by_key,
        "by_surface": job.by_surface,
    }


@router.get("/jobs", response_model=list[JobOut], tags=["jobs"])
def list_jobs(
    base: str | None = Query(None, description="only this base's jobs (name or id)"),
    status: list[JobStatus] | None = Query(None),
    limit: int = Query(200, ge=1, le=10_000),
    before: str | None = Query(None, description="a job id: the page of jobs created before it"),
    by: str | None = Query(None, description="only the jobs this API key asked for"),
    *,
    request: Request,
    kb: Knowledge = Depends(get_kb),
) -> list[dict[str, Any]]:
    """Jobs newest first; pass the last id of a page as ``before`` for the next page. A key
    scoped to some bases sees only their jobs."""
    who = principal_of(request)
    if base is not None:
        base = visible_base(kb, who, base).id
    jobs = kb.activity.list_jobs(
        base=base,
        statuses=status or None,
        limit=limit,
        before=before,
        by_key=by,
        base_ids=visible_ids(who),
    )
    return [job_dict(j) for j in jobs]


@router.get("/bases/{base}/jobs", response_model=list[JobOut], tags=["jobs"])
def list_base_jobs(
    base: str,
    status: list[JobStatus] | None = Query(None),
    limit: int = Query(200, ge=1, le=10_000),
    before: str | None = Query(None, description="a job id: the page of jobs created before it"),
    kb: Knowledge = Depends(get_kb),
) -> list[dict[str, Any]]:
    """The base's jobs newest first; ``before`` pages on as in ``GET /jobs``."""
    jobs = kb.activity.list_jobs(base=base, statuses=status or None, limit=limit, before=before)
    return [job_dict(j) for j in jobs]


@router.get("/jobs/{job_id}", response_model=JobOut, tags=["jobs"])
def get_job(job_id: str, request: Request, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    """One job with its progress (stage, percent, details)."""
    job = kb.activity.get_job(job_id)
    who = principal_of(request)
    if who.base_ids is not None and (job.base_id is None or not who.sees(job.base_id)):
        raise NotFound(f"no job {job_id!r}", job_id=job_id)  # as for a job that does not exist
    return job_dict(job)


# --- readiness ---------------------------------------------------------------------------------
@router.get("/status", response_model=StatusOut, tags=["status"])
def status(request: Request, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    """Per-component readiness (catalog, index, embedding, rerank, file processor, workers);
    a key scoped to some bases sees only their components."""
    from knowbase.service.readiness import readiness

    report = readiness(kb)
    who = principal_of(request)
    if who.base_ids is not None:
        report["components"] = [
            c for c in report["components"] if c.get("base_id") is None or who.sees(c["base_id"])
        ]
    return report
