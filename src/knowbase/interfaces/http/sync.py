"""``POST /bases/{base}/sync``: bring a base up to date with its origins (issue 15)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from knowbase.interfaces.http.common import COMMON_ERRORS, get_kb
from knowbase.service import Knowledge

router = APIRouter(tags=["sync"], responses=COMMON_ERRORS)


@router.post("/bases/{base}/sync", status_code=202)
def sync_base(
    base: str,
    prune: bool | None = Query(None, description="delete vanished items (default: sync_deletes)"),
    dry_run: bool = Query(False, description="report only, schedule nothing"),
    kb: Knowledge = Depends(get_kb),
) -> dict[str, Any]:
    """Plan a sync and enqueue its job tree (``job_id``; null on a dry run or when idle)."""
    return kb.sync(base, prune=prune, dry_run=dry_run).to_dict()
