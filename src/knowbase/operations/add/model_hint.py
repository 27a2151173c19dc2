"""The hint ``kb add`` prints when a folder is mostly in scripts the base's model cannot read."""

from __future__ import annotations

from knowbase.catalog.models import Base
from knowbase.errors import KnowbaseError
from knowbase.pipeline.indexing.model_hint import model_hint, sample_text
from knowbase.runtime import Runtime


def model_hint_for(rt: Runtime, base: Base, paths: list[str]) -> str | None:
    """A hint to switch models for the files at ``paths`` (never applied; best effort, None
    when the base has no model or its model is unusable)."""
    if not base.embedding_model_id:
        return None
    try:
        embedder = rt.embedder(base)
    except KnowbaseError:
        return None  # the add itself reports an unusable model
    scripts = embedder.scripts if embedder is not None else None
    return model_hint(sample_text(paths), model_id=base.embedding_model_id, scripts=scripts)
