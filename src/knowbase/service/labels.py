"""The label methods of ``Knowledge`` (tags and metadata, ``operations/labels.py``): wiring only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knowbase.catalog.models import Base, Item
    from knowbase.runtime import Runtime


class LabelsFacade:
    """Mixed into ``Knowledge``, which supplies ``rt`` and ``get_base``."""

    rt: Runtime

    def get_base(self, name_or_id: str) -> Base:
        raise NotImplementedError  # Knowledge's

    def effective_labels(
        self, base: str, item_ids: Iterable[str]
    ) -> dict[str, tuple[list[str], dict[str, Any]]]:
        """Each item's tags and metadata including its folders' (``catalog/labels.py``)."""
        from knowbase.catalog.labels import base_effective_labels

        with self.rt.catalog.read() as conn:
            return base_effective_labels(conn, self.get_base(base).id, item_ids)

    def set_labels(self, base: str, item: str, **changes: Any) -> Item:
        """Change an item's tags and metadata (``operations/labels.py``): ``item`` is an item
        id, a Concept ID or a folder path; ``tags``/``metadata`` replace, ``add_tags``,
        ``remove_tags`` and ``merge_metadata`` edit. Seen by the next search, no reindex."""
        from knowbase.operations.labels import set_labels

        return set_labels(self.rt, self.get_base(base), item, **changes)

    def label_sources(self, base: str, item: str) -> list[dict[str, Any]]:
        """Where an item's labels come from: the item, then each folder above it that has
        labels (``operations/labels.py``)."""
        from knowbase.operations.labels import label_sources

        return label_sources(self.rt, self.get_base(base), item)
