"""``restore_base``: a new base rebuilt from a source base's raw/ copies (§6, not an undelete)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from knowbase.catalog import base_settings
from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.errors import KnowbaseError
from knowbase.operations.add.inputs import AddInput
from knowbase.operations.add.workflow import add_items
from knowbase.operations.bases import create_base, remove_base
from knowbase.runtime import Runtime

log = logging.getLogger(__name__)


@dataclass
class RestoreResult:
    base: Base
    skipped_missing_source_count: int
    job_ids: list[str]


def restore_inputs(rt: Runtime, source: Base, roots: list[Item]) -> tuple[list[AddInput], int]:
    """Map the source's live roots to add inputs; roots whose material is gone are skipped."""
    storage = rt.storage(source.id)
    inputs: list[AddInput] = []
    skipped = 0
    for item in roots:
        if item.type == "file":
            rel = item.relative_path
            if not rel or not storage.path_of(rel).is_file():
                skipped += 1
                continue
            indexed = item.data.get("indexed_relative_path")
            indexed_path = storage.path_of(indexed) if indexed else None
            inputs.append(
                AddInput(
                    "file",
                    item.source,
                    path=str(storage.path_of(rel)),
                    origin=item.origin,
                    indexed_path=str(indexed_path)
                    if indexed_path and indexed_path.is_file()
                    else None,
                )
            )
        elif item.type == "url":
            rel = item.relative_path
            snap = storage.path_of(rel) if rel else None
            inputs.append(
                AddInput(
                    "url",
                    item.source,
                    url=item.data["url"],
                    origin=item.origin,
                    snapshot_path=str(snap) if snap and snap.is_file() else None,
                )
            )
        elif item.type == "note":
            inputs.append(AddInput("note", item.source, content=item.data.get("content")))
        elif item.type == "sitemap":
            inputs.append(
                AddInput("sitemap", item.source, url=item.data["url"], origin=item.origin)
            )
        elif item.type == "directory":
            origin = item.origin or item.source
            if not Path(origin).is_dir():
                skipped += 1
                continue
            inputs.append(AddInput("directory", item.source, path=origin, origin=origin))
    return inputs, skipped


def restore_base(
    rt: Runtime, source_id: str, name: str, *, embedding_model_id: str | None = None
) -> RestoreResult:
    """Create ``name`` from ``source_id``'s settings and materials; the source is untouched."""
    with rt.catalog.read() as conn:
        source = base_repo.resolve(conn, source_id)
        roots = item_repo.list_items(conn, source.id, roots_only=True)
    inputs, skipped = restore_inputs(rt, source, roots)
    model = embedding_model_id if embedding_model_id is not None else source.embedding_model_id
    new = create_base(
        rt,
        name,
        embedding_model_id=model,
        **{k: getattr(source, k) for k in base_settings.PORTABLE},
    )
    try:
        result = add_items(rt, new.id, inputs, "rename")
    except KnowbaseError as exc:
        try:
            remove_base(rt, new.id)
        except Exception as cleanup:
            raise type(exc)(
                f"restore failed ({exc}); cleaning up the new base {new.id} failed too: {cleanup}"
            ) from exc
        raise
    return RestoreResult(new, skipped, result.job_ids)
