"""Which search hits a user may see: the searchable items of the base (completed, or a leaf
being re-indexed in place: ``SEARCHABLE_STATUSES``), with their display fields.

Search asks about a handful of items per query. Their ``updated_at`` versions are one cheap
indexed read; the display fields (type, title, source) are cached per ``(item id, updated_at)``,
so a row that changes gets a new key and a stale entry is never served — it is just not found.
"""

from __future__ import annotations

from collections.abc import Callable

from knowbase.catalog import items as item_repo
from knowbase.catalog.db import Catalog
from knowbase.search.search import VisibleItem

MAX_CACHED = 50_000  # entries; past this the cache is dropped whole and refilled on demand

Visible = Callable[[set[str]], dict[str, VisibleItem]]


class VisibilityCache:
    """Display fields of searchable items, shared by every base of one ``Knowledge``.

    Thread-safe enough for its use: entries are immutable and a lost insert only costs a
    re-read; ``clear`` races are harmless for the same reason.
    """

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._cache: dict[tuple[str, int], VisibleItem] = {}

    def for_base(self, base_id: str) -> Visible:
        """A function: material ids → the searchable items of ``base_id`` among them."""
        cache = self._cache

        def visible(material_ids: set[str]) -> dict[str, VisibleItem]:
            loaded: dict[str, VisibleItem] = {}
            with self.catalog.read() as conn:
                versions = item_repo.searchable_versions(conn, base_id, material_ids)
                missing = [i for i, v in versions.items() if (i, v) not in cache]
                if missing:
                    if len(cache) > MAX_CACHED:
                        cache.clear()
                    for i in item_repo.find_searchable(conn, base_id, missing).values():
                        loaded[i.id] = VisibleItem(i.id, i.type, i.title, i.source)
                        cache[(i.id, i.updated_at)] = loaded[i.id]
            # An item that changed between the two reads (a re-index moves it through several
            # statuses) is cached under its newer version: it is still searchable, so show the
            # row just read rather than hide it.
            found = {i: cache.get((i, v)) or loaded.get(i) for i, v in versions.items()}
            return {i: item for i, item in found.items() if item is not None}

        return visible
