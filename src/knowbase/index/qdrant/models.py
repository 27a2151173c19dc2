"""The qdrant store's vector sets by model id: what a model switch reads and writes (issue 15).

Owned by a :class:`~.qdrant.QdrantIndexStore`; the contract is :class:`~.base.ModelVectorSets`,
as :mod:`..sqlite.models` and :mod:`..postgres.models` keep it. How points belong to units
and bodies is in :mod:`.store`'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from knowbase.errors import EmbeddingMismatch, InvalidInput, VectorStoreUnavailable
from knowbase.index.base import MaterialInput, StoredMaterial
from knowbase.index.plan import PlannedUnit, check_vectors, plan_units
from knowbase.index.qdrant.access import payload
from knowbase.index.qdrant.points import (
    BATCH,
    body_point_id,
    ensure_collection,
    point_id,
    unavailable,
)

if TYPE_CHECKING:
    from knowbase.index.base import IndexStore
    from knowbase.index.qdrant.access import QdrantPoints


class QdrantModelSets:
    """Vector sets by model id of one :class:`~.store.QdrantIndexStore` (its ``models``).

    The store hands it what it needs, no more: the base's points, its Qdrant client (made on
    first use), the inner store that holds the units, the base's id and the serving model
    (whose set :meth:`drop_vectors` refuses).
    """

    def __init__(
        self,
        *,
        points: QdrantPoints,
        client: Callable[[], Any],
        inner: IndexStore,
        base_id: str,
        serving_model_id: str,
    ) -> None:
        self._points = points
        self._client = client
        self._inner = inner
        self._base_id = base_id
        self._serving_model_id = serving_model_id

    def vectors_for(self, hashes: Iterable[str], model_id: str) -> dict[str, np.ndarray]:
        """``{embedding_text_hash: vector}`` of ``model_id`` (any width) for those with one."""
        try:
            found = self._points.vectors_in(self._points.collections(), hashes, model_id)
        except Exception as exc:
            raise unavailable(self._base_id, "vectors_for", exc) from exc
        return {h: v for h, (_, v) in found.items()}

    def existing_vectors(self, model_id: str, hashes: Iterable[str]) -> set[str]:
        """The hashes whose every stored unit has a point of ``model_id`` and that have a
        vector of it at all. A body with a vector but a unit without a point (an index job
        wrote the unit meanwhile) counts as missing: embedding it again gives that unit its
        point (:meth:`put_vectors`)."""
        wanted = sorted(set(hashes))
        found: set[str] = set()
        pointed: set[str] = set()
        try:
            for collection in self._points.collections():
                for i in range(0, len(wanted), BATCH):
                    flt = self._points.set_filter(
                        model_id, embedding_text_hash=wanted[i : i + BATCH]
                    )
                    for p in self._points.scroll(
                        collection, flt, payload=["embedding_text_hash", "unit_id"]
                    ):
                        found.add(p.payload["embedding_text_hash"])
                        if p.payload.get("unit_id"):
                            pointed.add(p.payload["unit_id"])
            by_hash = self._points.units().by_hash
        except VectorStoreUnavailable:
            raise
        except Exception as exc:
            raise unavailable(self._base_id, "existing_vectors", exc) from exc
        return {h for h in found if all(u in pointed for u, _ in by_hash.get(h, ()))}

    def put_vectors(
        self,
        model_id: str,
        dims: int,
        vectors: Mapping[str, np.ndarray | Sequence[float]],
    ) -> None:
        """Store ``model_id``'s vectors (a shadow set) in its width's collection: a point for
        every stored unit with one of these bodies, a body point for a body no unit has. The
        caller holds the base lock; writing a point again writes the same vector."""
        from qdrant_client import models

        if not model_id:
            raise InvalidInput("a vector set needs a model id")
        checked = check_vectors(vectors, list(vectors), dims)
        if not checked:
            return
        try:
            collection = ensure_collection(self._client(), dims)
            by_hash = self._points.units().by_hash
            points = []
            for h, v in checked.items():
                vec = v.tolist()
                owners = by_hash.get(h, ())
                for uid, mid in owners:
                    points.append(
                        models.PointStruct(
                            id=point_id(self._base_id, uid, model_id),
                            vector=vec,
                            payload=payload(self._base_id, model_id, h, uid, mid),
                        )
                    )
                if not owners:
                    points.append(
                        models.PointStruct(
                            id=body_point_id(self._base_id, model_id, h),
                            vector=vec,
                            payload=payload(self._base_id, model_id, h),
                        )
                    )
            self._points.upsert(collection, points)
        except VectorStoreUnavailable:
            raise
        except Exception as exc:
            raise unavailable(self._base_id, "put_vectors", exc) from exc

    def bodies_without_vectors(self, model_id: str, limit: int | None = None) -> dict[str, str]:
        """``{embedding_text_hash: body}`` of stored units without a point of ``model_id``."""
        pointed: set[str] = set()
        try:
            units = self._points.units()
            collections = self._points.collections() if units.hash_of else []
            for collection in collections:
                flt = self._points.set_filter(model_id, units_only=True)
                for p in self._points.scroll(collection, flt, payload=["unit_id"]):
                    pointed.add(p.payload["unit_id"])
        except VectorStoreUnavailable:
            raise
        except Exception as exc:
            raise unavailable(self._base_id, "bodies_without_vectors", exc) from exc
        missing = sorted({h for uid, h in units.hash_of.items() if uid not in pointed})
        if limit is not None:
            missing = missing[:limit]
        return {h: units.bodies[h] for h in missing}

    def body_count(self) -> int:
        return self._inner.models.body_count()

    def stored_materials(self) -> list[StoredMaterial]:
        return self._inner.models.stored_materials()

    def replace_units(self, materials: Sequence[MaterialInput], model_id: str) -> None:
        """Re-chunked units for ``materials``, every body covered by ``model_id``'s vectors
        (EmbeddingMismatch and nothing changed otherwise); the caller holds the base lock.

        Order, as a rebuild's: the new units' points of ``model_id`` (from its body and unit
        points), then the inner store's units in **one** transaction, then the points of units
        that no longer exist (of every set; the serving model's lane loses nothing the inner
        store still has)."""
        from qdrant_client import models

        planned = [(m, *plan_units(m, None, False)) for m in materials]
        if not planned:
            return
        needed = sorted({u.body_hash for _, _, units in planned for u in units})
        try:
            found = self._points.vectors_in(self._points.collections(), needed, model_id)
            lost = [h for h in needed if h not in found]
            if lost:
                raise EmbeddingMismatch(
                    f"{len(lost)} chunk(s) have no embedding of {model_id}; nothing was changed",
                    model_id=model_id,
                    missing=lost[:10],
                )
            by_collection: dict[str, list[Any]] = {}
            for material, _, units in planned:
                for u in units:
                    collection, vec = found[u.body_hash]
                    by_collection.setdefault(collection, []).append(
                        models.PointStruct(
                            id=point_id(self._base_id, u.unit_id, model_id),
                            vector=vec.tolist(),
                            payload=payload(
                                self._base_id,
                                model_id,
                                u.body_hash,
                                u.unit_id,
                                material.material_id,
                            ),
                        )
                    )
            for collection, points in by_collection.items():
                self._points.upsert(collection, points)
        except (EmbeddingMismatch, VectorStoreUnavailable):
            raise
        except Exception as exc:
            raise unavailable(self._base_id, "replace_units", exc) from exc
        self._replace_inner(planned)
        for material, _, units in planned:
            keep = [point_id(self._base_id, u.unit_id, model_id) for u in units]
            self._points.drop_points(
                material.material_id, model_id, keep, [u.unit_id for u in units]
            )

    def _replace_inner(
        self, planned: Sequence[tuple[MaterialInput, str, list[PlannedUnit]]]
    ) -> None:
        """The inner store's units of re-chunked materials in one transaction. Its own
        ``replace_units`` checks coverage against vectors it holds, and this store's vectors
        are in Qdrant: so its write step (``write_units``) runs without that check."""
        self._inner.models.write_units(planned)  # type: ignore[attr-defined]

    def drop_vectors(self, model_id: str) -> int:
        """Delete ``model_id``'s whole set (after a swap, or a cancelled switch's shadow) in
        every width, and the serving set's body points (a switch's scaffolding: after the
        swap every unit has its own point); the number of ``model_id``'s points removed.
        Refuses the store's own serving model."""
        from qdrant_client import models

        if model_id == self._serving_model_id:
            raise InvalidInput("refusing to drop the serving model's vectors", model_id=model_id)
        removed = 0
        try:
            for collection in self._points.collections():
                flt = self._points.set_filter(model_id)
                removed += self._client().count(collection, count_filter=flt, exact=True).count
                self._client().delete(collection, points_selector=models.FilterSelector(filter=flt))
                bodies = self._points.set_filter(self._serving_model_id)
                bodies.must.append(
                    models.IsEmptyCondition(is_empty=models.PayloadField(key="material_id"))
                )
                self._client().delete(
                    collection, points_selector=models.FilterSelector(filter=bodies)
                )
        except Exception as exc:
            raise unavailable(self._base_id, "drop_vectors", exc) from exc
        return removed
