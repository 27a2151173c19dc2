"""The qdrant store's points: filters, walks and lookups of a base's points, the inner store's
units by body hash, upserts and the drop of points no unit needs. A :class:`QdrantPoints` is
owned by one :class:`~.qdrant.QdrantIndexStore` (and read by its vector sets,
:mod:`.models`); it asks that store for the client, the base and the serving model.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from knowbase.errors import VectorStoreUnavailable
from knowbase.index.qdrant.points import _COLLECTION, BATCH, PAGE, unavailable
from knowbase.units.hashing import text_hash

if TYPE_CHECKING:
    from knowbase.index.base import IndexStore

log = logging.getLogger(__name__)


@dataclass
class Units:
    """The inner store's units at one ``changes_version``: what a set must cover."""

    version: int
    by_hash: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # (unit, material)
    hash_of: dict[str, str] = field(default_factory=dict)  # unit id → body hash
    bodies: dict[str, str] = field(default_factory=dict)  # body hash → body


def payload(
    base_id: str, model_id: str, h: str, unit_id: str | None = None, mid: str | None = None
) -> dict[str, str]:
    payload = {"base_id": base_id, "model_id": model_id, "embedding_text_hash": h}
    if unit_id is not None and mid is not None:
        payload.update(material_id=mid, unit_id=unit_id)
    return payload


class PointsOwner(Protocol):
    """What the points read of the store that owns them
    (:class:`~knowbase.index.qdrant.store.QdrantIndexStore`): a protocol, so that the store
    imports this module and not the other way round."""

    base_id: str
    model_id: str
    collection: str | None
    inner: IndexStore

    @property
    def client(self) -> Any: ...


class QdrantPoints:
    """The points of one store's base; see the module docstring."""

    def __init__(self, store: PointsOwner) -> None:
        self._store = store
        self._seen: Units | None = None

    def set_filter(self, model_id: str, *, units_only: bool = False, **must: Any) -> Any:
        """Points of the base and ``model_id`` matching ``must`` (a list matches any);
        ``units_only`` leaves body points out."""
        from qdrant_client import models

        conds = [
            models.FieldCondition(
                key="base_id", match=models.MatchValue(value=self._store.base_id)
            ),
            models.FieldCondition(key="model_id", match=models.MatchValue(value=model_id)),
        ]
        for key, value in must.items():
            match = (
                models.MatchAny(any=list(value))
                if isinstance(value, list | set | tuple)
                else models.MatchValue(value=value)
            )
            conds.append(models.FieldCondition(key=key, match=match))
        not_units = [models.IsEmptyCondition(is_empty=models.PayloadField(key="material_id"))]
        return models.Filter(must=conds, must_not=not_units if units_only else None)

    def collections(self) -> list[str]:
        """Every width's collection (a set of another width lives in another one)."""
        names = (c.name for c in self._store.client.get_collections().collections)
        return sorted(n for n in names if _COLLECTION.fullmatch(n))

    def scroll(
        self, collection: str, flt: Any, *, vectors: bool = False, payload: Any = True
    ) -> Iterator[Any]:
        offset = None
        while True:
            points, offset = self._store.client.scroll(
                collection,
                scroll_filter=flt,
                with_vectors=vectors,
                with_payload=payload,
                limit=BATCH if vectors else PAGE,
                offset=offset,
            )
            yield from points
            if offset is None:
                return

    def vectors_in(
        self, collections: Iterable[str], hashes: Iterable[str], model_id: str
    ) -> dict[str, tuple[str, np.ndarray]]:
        """``{hash: (collection, vector)}`` of ``model_id``'s points (units or bodies)."""
        wanted = sorted(set(hashes))
        out: dict[str, tuple[str, np.ndarray]] = {}
        for collection in collections:
            for i in range(0, len(wanted), BATCH):
                flt = self.set_filter(model_id, embedding_text_hash=wanted[i : i + BATCH])
                for p in self.scroll(
                    collection, flt, vectors=True, payload=["embedding_text_hash"]
                ):
                    h = p.payload["embedding_text_hash"]
                    if h not in out:
                        out[h] = (collection, np.asarray(p.vector, "<f4"))
        return out

    def vectors_of(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        if self._store.collection is None:
            return {}
        found = self.vectors_in([self._store.collection], hashes, self._store.model_id)
        return {h: v for h, (_, v) in found.items()}

    def units(self) -> Units:
        """The inner store's units by body hash, read again only when its version moved."""
        version = self._store.inner.changes_version()
        seen = self._seen
        if seen is not None and seen.version == version:
            return seen
        units = Units(version)
        for mid in sorted(self._store.inner.material_ids()):
            for u in self._store.inner.list_units(mid):
                h = text_hash(u.text)
                units.by_hash.setdefault(h, []).append((u.unit_id, mid))
                units.hash_of[u.unit_id] = h
                units.bodies.setdefault(h, u.text)
        self._seen = units
        return units

    def upsert(self, collection: str, points: Sequence[Any]) -> None:
        for i in range(0, len(points), BATCH):
            self._store.client.upsert(collection, points=list(points[i : i + BATCH]))

    def drop_points(
        self,
        material_ids: str | list[str],
        model_id: str,
        keep_ids: Sequence[str] = (),
        keep_units: Sequence[str] = (),
    ) -> None:
        """Drop the points of these materials that no stored unit needs, in every model's set:
        ``model_id``'s points but ``keep_ids`` (a point of the old id layout goes too), the
        other models' points of units not in ``keep_units``."""
        from qdrant_client import models

        ids = [material_ids] if isinstance(material_ids, str) else list(material_ids)
        must_not: list[Any] = []
        if keep_ids:
            must_not.append(models.HasIdCondition(has_id=list(keep_ids)))
        if keep_units:
            must_not.append(
                models.Filter(
                    must=[
                        models.FieldCondition(
                            key="unit_id", match=models.MatchAny(any=list(keep_units))
                        )
                    ],
                    must_not=[
                        models.FieldCondition(
                            key="model_id", match=models.MatchValue(value=model_id)
                        )
                    ],
                )
            )
        flt = models.Filter(
            must=[
                models.FieldCondition(
                    key="base_id", match=models.MatchValue(value=self._store.base_id)
                ),
                models.FieldCondition(key="material_id", match=models.MatchAny(any=ids)),
            ],
            must_not=must_not or None,
        )
        try:
            for collection in self.collections():
                self._store.client.delete(
                    collection, points_selector=models.FilterSelector(filter=flt)
                )
        except Exception as exc:
            raise unavailable(self._store.base_id, "delete", exc) from exc

    def drop_shadow_points(self, material_ids: str | list[str], keep_units: Sequence[str]) -> None:
        """A BM25-only store keeps a switch's shadow set in step, best effort, when it has
        talked to Qdrant (a switch builds here); points it misses are orphans no search shows."""
        try:
            self.drop_points(material_ids, "", (), keep_units)
        except VectorStoreUnavailable as exc:
            log.warning(
                "base %s: shadow points of a change left behind: %s", self._store.base_id, exc
            )
