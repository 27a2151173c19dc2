"""API routes the console needs that the rest of the API did not have: upload a folder keeping
its relative paths, import an uploaded archive as a new base, cancel a base's running work, a
base's item counts and index size, its current run's progress in chunks, and the embedding
models a base can be given.

They are ordinary API routes (OpenAPI, bearer token, the error shape), included next to the
others; any client can use them.

A dropped folder arrives as files plus one relative path each (the browser's
``webkitRelativePath``). It is staged under ``$KNOWBASE_HOME/uploads/<id>/<folder>`` and added
as a directory item whose origin is that staged copy: the prepare-root job expands a directory
from its origin after ``add`` returns, so a temp dir that vanished with the request would fail
it. The staged copy is the upload's own origin (a reindex re-reads it).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Depends, File, Form, UploadFile
from pydantic import BaseModel, Field

from knowbase import DEFAULT_STRATEGY, AddInput, ConflictStrategy, is_readable, sanitize_filename
from knowbase.errors import InvalidInput, UnsafePath, UnsupportedFileType
from knowbase.interfaces.http.common import BODY_ERRORS, COMMON_ERRORS, get_kb
from knowbase.interfaces.http.items import _add_response, unsupported
from knowbase.interfaces.http.models import CONFLICT_HELP, AddOut
from knowbase.service import Knowledge
from knowbase.service.readiness import offered_embedding_models

router = APIRouter(responses=COMMON_ERRORS)
UPLOADS_DIR = "uploads"


class Cancelled(BaseModel):
    cancelled: list[str]


def split_relative(raw: str) -> list[str]:
    """The sanitised segments of a browser-given relative path; refuses ``..`` and empties.

    >>> split_relative("docs/sub/a.pdf")
    ['docs', 'sub', 'a.pdf']
    """
    parts = [p for p in raw.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise UnsafePath(f"not a relative path inside a folder: {raw!r}", path=raw)
    return [sanitize_filename(p) for p in parts]


@router.post(
    "/bases/{base}/uploads/folders",
    status_code=201,
    response_model=AddOut,
    responses=BODY_ERRORS,
    tags=["items"],
)
def upload_folders(
    base: str,
    files: list[UploadFile] = File(min_length=1, description="the folder's files"),
    paths: list[str] = Form(
        min_length=1, description="one relative path per file, e.g. docs/sub/a.pdf"
    ),
    conflict: ConflictStrategy = Form(DEFAULT_STRATEGY, description=CONFLICT_HELP),
    tags: str = Form("", max_length=2000, description="comma-separated tags for each folder"),
    kb: Knowledge = Depends(get_kb),
) -> Any:
    """Add dropped folders: one directory item per top folder, relative paths kept; ``tags``
    label each folder (and so every file in it)."""
    kb.get_base(base)
    if len(paths) != len(files):
        raise InvalidInput("give one relative path per file", files=len(files), paths=len(paths))
    stage = Path(kb.settings.home) / UPLOADS_DIR / uuid.uuid4().hex
    tops: dict[str, Path] = {}
    rejected: list[dict[str, str]] = []
    try:
        for upload, raw in zip(files, paths, strict=True):
            parts = split_relative(raw)
            if len(parts) < 2:
                raise InvalidInput("a folder upload's paths start with the folder", path=raw)
            target = stage.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                shutil.copyfileobj(upload.file, out, length=1024 * 1024)
            if not is_readable(target):  # by name, or text whatever its name (issue 41)
                # Reported now, by name, instead of as a count the folder's expansion finds
                # later ("Added 7" while 2 were skipped).
                target.unlink()
                rejected.append({**unsupported(parts[-1]), "name": "/".join(parts)})
                continue
            tops.setdefault(parts[0], stage / parts[0])
        labels = [t.strip() for t in tags.split(",") if t.strip()]
        inputs = [
            AddInput("directory", source=name, path=str(p), origin=str(p)).with_labels(labels)
            for name, p in tops.items()
        ]
        if not inputs:
            raise UnsupportedFileType(
                "no file of the folder has a supported type", rejected=rejected[:50]
            )
        response = _add_response(kb.add(base, inputs, strategy=conflict), rejected)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if response.status_code != 201:  # detect conflicts: nothing was added
        shutil.rmtree(stage, ignore_errors=True)
    return response


@router.post("/archives/import", status_code=201, responses=BODY_ERRORS, tags=["bases"])
def import_archive(
    file: UploadFile = File(description="an archive written by kb export (or GET …/export)"),
    name: str | None = Form(None, max_length=200, description="the new base's name"),
    kb: Knowledge = Depends(get_kb),
) -> dict[str, Any]:
    """A new base from an uploaded archive, verified first; nothing is re-embedded (what
    ``kb import`` does with a file on the server's disk). The upload is staged in the home and
    removed afterwards."""
    stage = Path(kb.settings.home) / UPLOADS_DIR / f"{uuid.uuid4().hex}.zip"
    stage.parent.mkdir(parents=True, exist_ok=True)
    try:
        with stage.open("wb") as out:
            shutil.copyfileobj(file.file, out, length=1024 * 1024)
        return kb.import_base(stage, (name or "").strip() or None).to_dict()
    finally:
        stage.unlink(missing_ok=True)


@router.post("/bases/{base}/jobs/cancel", response_model=Cancelled, tags=["jobs"])
def cancel_base_jobs(base: str, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    """Cancel every pending or running job of the base (items end ``failed``/cancelled)."""
    return {"cancelled": kb.activity.cancel_jobs(base)}


class Summary(BaseModel):
    counts: dict[str, int]
    index_bytes: int | None
    model_switch: dict[str, Any] | None = Field(
        default=None, description="the latest model switch, as /model-switch shows it; null: none"
    )


@router.get("/bases/{base}/summary", response_model=Summary, tags=["bases"])
def base_summary(base: str, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    """Items by status (containers included), the size of the base's index on disk (its
    SQLite file with WAL; null for an index kept elsewhere or not built yet) and its latest
    model switch (null when it never switched)."""
    b = kb.get_base(base)
    return {
        "counts": kb.counts(b.id),
        "index_bytes": kb.index_bytes(b.id),
        "model_switch": kb.model_switch(b.id),
    }


class ChunkProgressOut(BaseModel):
    busy: bool = Field(description="pending or running jobs on the base")
    files: int = Field(0, description="index jobs of the current run")
    files_chunked: int = Field(0, description="of which the chunk count is known")
    files_done: int = Field(0, description="of which ended (completed or failed)")
    chunks_known: int = Field(0, description="chunks of the files chunked so far")
    chunks_done: int = Field(0, description="chunks embedded and written (completed files)")
    chunks_estimated: int = Field(0, description="known + the rest at the mean so far")
    files_failed: int = Field(0, description="of which failed or were cancelled")


@router.get("/bases/{base}/progress", response_model=ChunkProgressOut, tags=["bases"])
def base_progress(base: str, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    """The base's current run counted in chunks (issue 42): on a base with a model the work
    is embedding chunks, and a count of files stands still for minutes. The run is every
    index job updated since the oldest job still pending or running was created; an idle
    base answers ``busy: false`` and zeros. A client takes the rate from two answers."""
    progress = kb.activity.base_chunk_progress(kb.get_base(base).id)
    return {"busy": False} if progress is None else {"busy": True, **progress.to_dict()}


class EmbeddingModelOut(BaseModel):
    id: str = Field(description="a model id, or a profile's prefix (``ollama:``) to complete")
    kind: Literal["model", "profile"]
    available: bool = Field(description="its extra is installed and its files are intact")
    reason: str


@router.get("/embedding-models", response_model=list[EmbeddingModelOut], tags=["bases"])
def embedding_models(kb: Knowledge = Depends(get_kb)) -> list[dict[str, Any]]:
    """The embedding models a base can be created with or switched to on this server."""
    return offered_embedding_models(kb)


__all__ = ["router", "split_relative"]
