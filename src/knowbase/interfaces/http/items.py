"""``/bases/{base}/items``: add (JSON inputs or multipart upload), list, get, delete, reindex,
chunks.

URLs are checked for syntax here (``invalid_url``), against the SSRF guard by the add (a refused
host answers 422 at once) and again when fetched.
Local paths are the server's files, so a ``file``/``directory`` input is refused (422
``unsafe_path``) unless it resolves, symlinks followed, under one of the app's
``local_path_roots``. Uploads are written to a private temp file and added like a local file
without an origin (DESIGN.md "Origin": uploads cannot be re-acquired).
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, File, Form, Query, Request, UploadFile
from fastapi.responses import JSONResponse

from knowbase import DEFAULT_STRATEGY, AddInput, ConflictStrategy, is_readable, sanitize_filename
from knowbase.errors import InvalidInput, UnsafePath, UnsupportedFileType
from knowbase.interfaces.http.common import BODY_ERRORS, COMMON_ERRORS, error_response, get_kb
from knowbase.interfaces.http.models import (
    CONFLICT_HELP,
    AddInputIn,
    AddOut,
    AddRequest,
    ChunkOut,
    ItemOut,
    ItemStatus,
    JobRef,
)
from knowbase.service import Knowledge

router = APIRouter(tags=["items"], responses=COMMON_ERRORS)


def _allowed_path(raw: str | None, roots: list[Path]) -> Path:
    """The resolved path when it lies under a served root; else ``UnsafePath``."""
    if not raw:
        raise InvalidInput("a file or directory input needs a path", field="path")
    try:
        path = Path(raw).expanduser()
        if not path.is_absolute():
            raise InvalidInput("a local path must be absolute", path=raw)
        resolved = path.resolve()
    except (ValueError, OSError, RuntimeError) as exc:  # NUL bytes, loops, unreadable parents
        raise InvalidInput(f"not a usable path: {exc}", path=raw) from exc
    if not any(resolved.is_relative_to(root) for root in roots):
        raise UnsafePath(
            "local-path adds over HTTP are allowed only under the server's configured roots"
            if roots
            else "this server accepts no local-path adds (no roots configured); upload the file",
            hint="start kb serve with --allow-path DIR, or use POST /bases/{base}/uploads",
            path=raw,
            reason="outside_local_path_roots",
            roots=[str(r) for r in roots],
        )
    return resolved


def _to_input(spec: AddInputIn, roots: list[Path]) -> AddInput:
    inp = _bare_input(spec, roots)
    return inp.with_labels(spec.tags, spec.metadata) if spec.tags or spec.metadata else inp


def _bare_input(spec: AddInputIn, roots: list[Path]) -> AddInput:
    if spec.type == "note":
        return AddInput.note(spec.content or "", title=spec.title)
    if spec.type in ("url", "sitemap"):
        from knowbase import parse_url

        url = (spec.url or "").strip()
        # Syntax now, as kb_manage does (http(s), a host, no control characters): a malformed
        # URL is refused before anything is written. Where the host resolves to is checked by
        # the add and again when it is fetched (the SSRF guard), since DNS can change between.
        parse_url(url)
        if spec.type == "sitemap":
            return AddInput("sitemap", url, url=url, origin=url)
        return AddInput("url", url, url=url, origin=url)
    path = _allowed_path(spec.path, roots)
    if spec.type == "directory":
        return AddInput.directory(path)
    return AddInput.file(path)


def _add_response(result: Any, rejected: list[dict[str, str]] | None = None) -> Any:
    """``added`` → 201 body (with the uploads ``rejected`` before the add, if any); detect
    conflicts → 409 with them in ``details.conflicts``."""
    if result.status == "conflicts":
        conflicts = [asdict(c) for c in result.conflicts]
        return error_response(
            409,
            "conflict",
            f"{len(conflicts)} input(s) conflict with existing items; nothing was added",
            {"strategy": "detect", "conflicts": conflicts},
        )
    return JSONResponse(
        {
            "status": "added",
            "items": [i.to_dict() for i in result.items],
            "updated": [i.to_dict() for i in getattr(result, "updated", [])],
            "job_ids": list(result.job_ids),
            "rejected": rejected or [],
        },
        status_code=201,
    )


@router.post("/bases/{base}/items", status_code=201, response_model=AddOut, responses=BODY_ERRORS)
def add_items(
    base: str, body: AddRequest, request: Request, kb: Knowledge = Depends(get_kb)
) -> Any:
    """Add notes, URLs, sitemaps, or server-local files/folders (under the served roots).

    Returns at once; follow progress on ``GET /bases/{base}/events`` or ``/jobs/{id}``. With
    ``conflict: detect`` a collision answers 409 and adds nothing.
    """
    roots = request.app.state.local_path_roots
    inputs = [_to_input(spec, roots) for spec in body.inputs]
    return _add_response(kb.add(base, inputs, strategy=body.conflict))


@router.post("/bases/{base}/uploads", status_code=201, response_model=AddOut, responses=BODY_ERRORS)
def upload_items(
    base: str,
    files: list[UploadFile] = File(min_length=1, description="the files to store into the base"),
    conflict: ConflictStrategy = Form(DEFAULT_STRATEGY, description=CONFLICT_HELP),
    tags: str = Form("", max_length=2000, description="comma-separated tags for every file"),
    kb: Knowledge = Depends(get_kb),
) -> Any:
    """Store uploaded files into the base like local files (no origin: not re-acquirable),
    each labelled with ``tags``.

    Files of a type no reader knows are left out and listed in ``rejected``; the others are
    added. Only when every file is rejected is the whole request refused (422).
    """
    kb.get_base(base)
    # Spooled into the base's staging (owned by this process, swept after a crash), not a
    # temp folder: a server killed mid-upload left a kb-upload-* folder nobody removed.
    with kb.spool(base) as spool:
        inputs = []
        rejected: list[dict[str, str]] = []
        for n, upload in enumerate(files):
            name = Path((upload.filename or "").replace("\\", "/")).name
            safe = sanitize_filename(name) if name.strip() else ""
            if not safe:
                raise InvalidInput("every uploaded file needs a file name", index=n)
            # One folder per file: two uploads may share a name (rename strategy dedupes).
            target = spool.spool_path(safe)
            with target.open("wb") as out:
                shutil.copyfileobj(upload.file, out, length=1024 * 1024)
            if not is_readable(target):  # by name, or text whatever its name (issue 41)
                target.unlink()
                rejected.append(unsupported(name))
                continue
            labels = [t.strip() for t in tags.split(",") if t.strip()]
            inputs.append(
                AddInput("file", source=name, path=str(target), origin=None).with_labels(labels)
            )
        if not inputs:
            raise UnsupportedFileType(
                "no uploaded file has a supported type: "
                + ", ".join(r["name"] for r in rejected[:10]),
                rejected=rejected,
            )
        # add() copies into raw/ before it returns, so the spool may go afterwards.
        return _add_response(kb.add(base, inputs, strategy=conflict), rejected)


def unsupported(name: str) -> dict[str, str]:
    """A ``rejected`` entry for an upload no reader knows."""
    suffix = Path(name).suffix or name
    return {
        "name": name,
        "code": UnsupportedFileType.code,
        "message": f"unsupported knowledge file type: {suffix}",
    }


@router.get("/bases/{base}/items", response_model=list[ItemOut])
def list_items(
    base: str,
    status: list[ItemStatus] | None = Query(None, description="keep only these statuses"),
    roots_only: bool = False,
    kb: Knowledge = Depends(get_kb),
) -> list[dict[str, Any]]:
    """Items of the base (``deleting`` ones only when asked for by status). A failed item a
    retry cannot fix says why in ``retry_blocked`` (an empty file, a page never fetched)."""
    items = kb.list_items(base, statuses=status or None, roots_only=roots_only)
    blocked = kb.retry_blockers(base, items)
    return [{**i.to_dict(), "retry_blocked": blocked.get(i.id)} for i in items]


@router.get("/bases/{base}/items/{item_id}", response_model=ItemOut)
def get_item(base: str, item_id: str, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    return kb.get_item(base, item_id).to_dict()


@router.delete("/bases/{base}/items/{item_id}", response_model=JobRef, status_code=202)
def delete_item(base: str, item_id: str, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    """Hide the item (and its subtree) now; its files and index rows go in a background job."""
    item = kb.get_item(base, item_id)
    return {"job_id": kb.delete_items(item.base_id, [item.id])}


@router.post("/bases/{base}/items/{item_id}/reindex", response_model=JobRef, status_code=202)
def reindex_item(
    base: str,
    item_id: str,
    reacquire: bool = Query(True, description="re-copy / re-fetch from the origin first"),
    kb: Knowledge = Depends(get_kb),
) -> dict[str, Any]:
    """Rebuild the item's index (re-acquiring from its origin when it has one)."""
    item = kb.get_item(base, item_id)
    return {"job_id": kb.reindex_items(item.base_id, [item.id], reacquire=reacquire)}


@router.get("/bases/{base}/items/{item_id}/chunks", response_model=list[ChunkOut])
def list_chunks(base: str, item_id: str, kb: Knowledge = Depends(get_kb)) -> list[dict[str, Any]]:
    """The completed item's chunks in order, with exact character offsets and locators."""
    return [asdict(u) for u in kb.list_item_chunks(base, item_id)]
