"""The qdrant store's vector sets by model id: what a model switch reads and writes (issue 15).

Owned by a :class:`~.qdrant.QdrantIndexStore`; the contract is :class:`~.base.ModelVectorSets`,
as :mod:`.sqlite_models` and :mod:`.postgres_models` keep it. How points belong to units and
bodies is in :mod:`.qdrant`'s docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from knowbase.errors import EmbeddingMismatch, InvalidInput, VectorStoreUnavailable
from knowbase.index.base import MaterialInput, StoredMaterial
from knowbase.index.plan import PlannedUnit, check_vectors, plan_units
from knowbase.index.qdrant.access import payload
from knowbase.index.qdrant.points import BATCH, body_point_id, ensure_collection, point_id

if TYPE_CHECKING:
    from knowbase.index.qdrant.store import QdrantIndexStore


class QdrantModelSets:
    """Vector sets by model id of one :class:`~.qdrant.QdrantIndexStore`, which owns one of
    these and hands its ``ModelVectorSets`` methods to it."""

    def __init__(self, store: QdrantIndexStore) -> None:
        self._store = store

    def vectors_for(self, hashes: Iterable[str], model_id: str) -> dict[str, np.ndarray]:
        """``{embedding_text_hash: vector}`` of ``model_id`` (any width) for those with one."""
        try:
            found = self._store.points.vectors_in(
                self._store.points.collections(), hashes, model_id
            )
        except Exception as exc:
            raise self._store._unavailable("vectors_for", exc) from exc
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
            for collection in self._store.points.collections():
                for i in range(0, len(wanted), BATCH):
                    flt = self._store.points.set_filter(
                        model_id, embedding_text_hash=wanted[i : i + BATCH]
                    )
                    for p in self._store.points.scroll(
                        collection, flt, payload=["embedding_text_hash", "unit_id"]
                    ):
                        found.add(p.payload["embedding_text_hash"])
                        if p.payload.get("unit_id"):
                            pointed.add(p.payload["unit_id"])
            by_hash = self._store.points.units().by_hash
        except VectorStoreUnavailable:
            raise
        except Exception as exc:
            raise self._store._unavailable("existing_vectors", exc) from exc
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
            collection = ensure_collection(self._store.client, dims)
            by_hash = self._store.points.units().by_hash
            points = []
            for h, v in checked.items():
                vec = v.tolist()
                owners = by_hash.get(h, ())
                for uid, mid in owners:
                    points.append(
                        models.PointStruct(
                            id=point_id(self._store.base_id, uid, model_id),
                            vector=vec,
                            payload=payload(self._store.base_id, model_id, h, uid, mid),
                        )
                    )
                if not owners:
                    points.append(
                        models.PointStruct(
                            id=body_point_id(self._store.base_id, model_id, h),
                            vector=vec,
                            payload=payload(self._store.base_id, model_id, h),
                        )
                    )
            self._store.points.upsert(collection, points)
        except VectorStoreUnavailable:
            raise
        except Exception as exc:
            raise self._store._unavailable("put_vectors", exc) from exc

    def bodies_without_vectors(self, model_id: str, limit: int | None = None) -> dict[str, str]:
        """``{embedding_text_hash: body}`` of stored units without a point of ``model_id``."""
        pointed: set[str] = set()
        try:
            units = self._store.points.units()
            collections = self._store.points.collections() if units.hash_of else []
            for collection in collections:
                flt = self._store.points.set_filter(model_id, units_only=True)
                for p in self._store.points.scroll(collection, flt, payload=["unit_id"]):
                    pointed.add(p.payload["unit_id"])
        except VectorStoreUnavailable:
            raise
        except Exception as exc:
            raise self._store._unavailable("bodies_without_vectors", exc) from exc
        missing = sorted({h for uid, h in units.hash_of.items() if uid not in pointed})
        if limit is not None:
            missing = missing[:limit]
        return {h: units.bodies[h] for h in missing}

    def body_count(self) -> int:
        return self._store.inner.body_count()  # type: ignore[attr-defined]

    def stored_materials(self) -> list[StoredMaterial]:
        return self._store.inner.stored_materials()  # type: ignore[attr-defined]

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
            found = self._store.points.vectors_in(
                self._store.points.collections(), needed, model_id
            )
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
                            id=point_id(self._store.base_id, u.unit_id, model_id),
                            vector=vec.tolist(),
                            payload=payload(
                                self._store.base_id,
                                model_id,
                                u.body_hash,
                                u.unit_id,
                                material.material_id,
                            ),
                        )
                    )
            for collection, points in by_collection.items():
                self._store.points.upsert(collection, points)
        except (EmbeddingMismatch, VectorStoreUnavailable):
            raise
        except Exception as exc:
            raise self._store._unavailable("replace_units", exc) from exc
        self._replace_inner(planned)
        for material, _, units in planned:
            keep = [point_id(self._store.base_id, u.unit_id, model_id) for u in units]
            self._store.points.drop_points(
                material.material_id, model_id, keep, [u.unit_id for u in units]
            )

    def _replace_inner(
        self, planned: Sequence[tuple[MaterialInput, str, list[PlannedUnit]]]
    ) -> None:
        """The inner store's units of re-chunked materials in one transaction. Its own
        ``replace_units`` checks coverage against vectors it holds, and this store's vectors
        are in Qdrant: so its write step runs here without that check."""
        from knowbase.index.postgres.store import PostgresIndexStore
        from knowbase.index.sqlite.schema import write_tx
        from knowbase.index.sqlite.store import SqliteIndexStore
        from knowbase.index.sqlite.writes import bump, write_material

        inner = self._store.inner
        if isinstance(inner, SqliteIndexStore):
            conn = inner._writer
            with inner._edge("replace_units"), write_tx(conn):
                for material, content_hash, units in planned:
                    rows = [(u.unit_id, u.chunk, u.body, u.body_hash, u.text) for u in units]
                    write_material(
                        conn, material, content_hash, rows, {}, model_id="", vectors=False
                    )
                bump(conn)
        elif isinstance(inner, PostgresIndexStore):
            pg_rows = [
                (material, content_hash, inner.writes.unit_rows(material, content_hash, units))
                for material, content_hash, units in planned
            ]
            with inner._tx("replace_units") as pg:
                inner.writes.lock_base(pg)
                for material, content_hash, rows in pg_rows:
                    inner.writes.write_material(
                        pg, material, content_hash, rows, {}, "", None, gc=False
                    )
        else:  # pragma: no cover - the registry opens only these two
            raise TypeError(f"no re-chunk for an inner store of type {type(inner).__name__}")

    def drop_vectors(self, model_id: str) -> int:
        """Delete ``model_id``'s whole set (after a swap, or a cancelled switch's shadow) in
        every width, and the serving set's body points (a switch's scaffolding: after the
        swap every unit has its own point); the number of ``model_id``'s points removed.
        Refuses the store's own serving model."""
        from qdrant_client import models

        if model_id == self._store.model_id:
            raise InvalidInput("refusing to drop the serving model's vectors", model_id=model_id)
        removed = 0
        try:
            for collection in self._store.points.collections():
                flt = self._store.points.set_filter(model_id)
                removed += self._store.client.count(collection, count_filter=flt, exact=True).count
                self._store.client.delete(
                    collection, points_selector=models.FilterSelector(filter=flt)
                )
                bodies = self._store.points.set_filter(self._store.model_id)
                bodies.must.append(
                    models.IsEmptyCondition(is_empty=models.PayloadField(key="material_id"))
                )
                self._store.client.delete(
                    collection, points_selector=models.FilterSelector(filter=bodies)
                )
        except Exception as exc:
            raise self._store._unavailable("drop_vectors", exc) from exc
        return removed

    def for_model(self, model_id: str, dims: int) -> QdrantIndexStore:
        """A store on the same index whose vector lane serves ``model_id`` (``kb eval --model
        shadow``); it shares the inner store, so closing it leaves that open."""
        return type(self._store).open(
            self._store._client,
            self._store.inner,
            base_id=self._store.base_id,
            dims=dims,
            model_id=model_id,
            connect=self._store._connect,
            owns_inner=False,
        )
