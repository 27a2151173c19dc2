"""``/bases``: create, list, get, patch settings, delete, restore, enable embedding."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from knowbase.interfaces.http.common import BODY_ERRORS, COMMON_ERRORS, get_kb
from knowbase.interfaces.http.models import (
    BaseCreate,
    BaseOut,
    BaseSettingsPatch,
    Deleted,
    EnableEmbeddingRequest,
    RestoreOut,
    RestoreRequest,
)
from knowbase.interfaces.http.scopes import principal_of
from knowbase.service import Knowledge

router = APIRouter(tags=["bases"], responses=COMMON_ERRORS)


@router.post("/bases", status_code=201, response_model=BaseOut, responses=BODY_ERRORS)
def create_base(body: BaseCreate, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    """Create a base; without ``embedding_model_id`` it is BM25-only (dims are probed)."""
    fields = body.model_dump(exclude_unset=True)
    name = fields.pop("name")
    base = kb.create_base(
        name,
        embedding_model_id=fields.pop("embedding_model_id", None),
        dimensions=fields.pop("dimensions", None),
        **{k: v for k, v in fields.items() if v is not None},
    )
    return base.to_dict()


@router.get("/bases", response_model=list[BaseOut])
def list_bases(request: Request, kb: Knowledge = Depends(get_kb)) -> list[dict[str, Any]]:
    """Every base, or the bases the key is scoped to."""
    who = principal_of(request)
    return [b.to_dict() for b in kb.list_bases() if who.sees(b.id)]


@router.get("/bases/{base}", response_model=BaseOut)
def get_base(base: str, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    """``base`` is a name or an id, on this and every other route."""
    return kb.get_base(base).to_dict()


@router.patch("/bases/{base}", response_model=BaseOut, responses=BODY_ERRORS)
def update_base(
    base: str, body: BaseSettingsPatch, kb: Knowledge = Depends(get_kb)
) -> dict[str, Any]:
    """Change settings (no reindex). The embedding model changes via ``enable-embedding``."""
    patch = body.model_dump(exclude_unset=True)
    if not patch:
        return kb.get_base(base).to_dict()
    return kb.update_base(base, **patch).to_dict()


@router.delete("/bases/{base}", response_model=Deleted)
def delete_base(base: str, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    """Cancel the base's jobs and remove it with its files and index. Irreversible."""
    base_id = kb.get_base(base).id
    kb.delete_base(base_id)
    return {"id": base_id, "deleted": True}


@router.post(
    "/bases/{base}/restore", status_code=201, response_model=RestoreOut, responses=BODY_ERRORS
)
def restore_base(
    base: str, body: RestoreRequest, kb: Knowledge = Depends(get_kb)
) -> dict[str, Any]:
    """A new base ``name`` rebuilt from this base's raw/ copies (not an undelete)."""
    result = kb.restore_base(base, body.name, embedding_model_id=body.embedding_model_id)
    return {
        "base": result.base.to_dict(),
        "skipped_missing_source_count": result.skipped_missing_source_count,
        "job_ids": list(result.job_ids),
    }


@router.post("/bases/{base}/enable-embedding", response_model=BaseOut, responses=BODY_ERRORS)
def enable_embedding(
    base: str, body: EnableEmbeddingRequest, kb: Knowledge = Depends(get_kb)
) -> dict[str, Any]:
    """BM25-only → hybrid from the stored text, in the background (no source re-read).

    When the model reads fewer tokens than the base's chunks hold (BM25-only bases chunk at
    1,024; MiniLM reads 256) the stored text is re-split to the model's chunk size first, and
    the base's ``chunk_size``/``chunk_overlap`` change to it at the swap.
    """
    return kb.enable_embedding_model(base, body.embedding_model_id).to_dict()


@router.post("/bases/{base}/embedding-model", status_code=202, responses=BODY_ERRORS)
def set_embedding_model(
    base: str, body: EnableEmbeddingRequest, kb: Knowledge = Depends(get_kb)
) -> dict[str, Any]:
    """Switch the base's model by a shadow vector set; the old model serves until the swap.
    The answer is the switch's status (``GET /bases/{base}/model-switch`` follows it)."""
    return dict(kb.set_embedding_model(base, body.embedding_model_id))


@router.get("/bases/{base}/model-switch")
def model_switch(base: str, kb: Knowledge = Depends(get_kb)) -> dict[str, Any]:
    """The base's latest model switch (status, progress, estimate, error), or 404 if none."""
    from knowbase.errors import NotFound

    status = kb.model_switch(base)
    if status is None:
        raise NotFound(f"base {base!r} has no model switch", base=base)
    return dict(status)


class BaseChangeOut(BaseModel):
    """A change to the base that started no job, and who asked for it."""

    action: Literal["create", "settings", "labels", "delete"]
    base_name: str
    details: dict[str, Any]
    by_key: str | None
    by_surface: str | None
    at: int  # epoch milliseconds


@router.get("/bases/{base}/changes", response_model=list[BaseChangeOut])
def list_base_changes(
    base: str, limit: int = Query(20, ge=1, le=500), kb: Knowledge = Depends(get_kb)
) -> list[dict[str, Any]]:
    """The base's changes that start no job (created, settings changed) newest first, each
    with the API key and surface that asked; its jobs carry theirs (``GET /bases/{base}/jobs``).
    """
    return kb.activity.base_changes(base, limit)
