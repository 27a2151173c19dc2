"""``PATCH /bases/{base}/items/{item}/labels``: change an item's tags and metadata.

``item`` is an item id, a Concept ID or a folder path (URL-encoded). ``tags`` and
``metadata`` replace; ``add_tags``, ``remove_tags`` and ``merge_metadata`` (a null value
removes its key) edit. No reindex: the next search sees the change (``operations/labels.py``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import Field

from knowbase.interfaces.http.common import COMMON_ERRORS, get_kb
from knowbase.interfaces.http.models import ItemOut, _Strict
from knowbase.service import Knowledge

router = APIRouter(tags=["items"])
Tag = Annotated[str, Field(max_length=100)]


class LabelsPatch(_Strict):
    tags: list[Tag] | None = Field(None, max_length=64, description="replace the tags")
    add_tags: list[Tag] = Field(default_factory=list, max_length=64)
    remove_tags: list[Tag] = Field(default_factory=list, max_length=64)
    metadata: dict[str, Any] | None = Field(None, description="replace the metadata")
    merge_metadata: dict[str, Any] | None = Field(
        None, description="set these keys (null removes one), keep the others"
    )


@router.patch(
    "/bases/{base}/items/{item:path}/labels", response_model=ItemOut, responses=COMMON_ERRORS
)
def patch_labels(
    base: str, item: str, body: LabelsPatch, kb: Knowledge = Depends(get_kb)
) -> dict[str, Any]:
    """Change one item's labels; a folder's apply to everything under it."""
    changed = kb.set_labels(
        base,
        item,
        tags=body.tags,
        add_tags=body.add_tags,
        remove_tags=body.remove_tags,
        metadata=body.metadata,
        merge_metadata=body.merge_metadata,
    )
    return changed.to_dict()
