"""Vectors in Qdrant; chunks and the keyword lane in a BM25-only store of the base (§3).

One point per search unit and model (id = uuid5 of base, model and unit id; payload ``base_id``,
``model_id``, ``material_id``, ``unit_id``, ``embedding_text_hash``), in one collection per
embedding width (``kb_<dims>``): vectors are keyed by model id, and every read filters on the
store's model. Points written before the model key (no ``model_id`` payload) are labelled with
the base's current model when the store opens (in place, nothing re-embedded); they keep their
old ids until the next rebuild of their material replaces them.
Everything but vectors is the inner store's (SQLite file or PostgreSQL rows), whose version is
this store's ``changes_version``.

Two stores cannot share a transaction, so a rebuild writes in the order that keeps readers
right at every step: the new units' points, then the inner rebuild (atomic), then the points
of units that no longer exist (of every model: a switch's shadow set too). A crash in between
leaves only orphan points, which no search shows (a vector hit is looked up in the inner store)
and the next rebuild or delete removes.
Every call has a timeout (``timeout_s``): an unreachable Qdrant is ``vector_store_unavailable``,
never a hang.

The store composes its points (:mod:`.access`) and its vector sets by model id
(:class:`~.base.ModelVectorSets`, :mod:`.models`): a model switch writes the new model's
points beside the serving ones — one per stored unit whose body it embedded
(:meth:`QdrantIndexStore.put_vectors`), and a *body point* (a vector with no unit and no
material) for a body no stored unit has yet: the chunks of a re-chunk, which become units at
the swap (:meth:`QdrantIndexStore.replace_units`). Points belong to units here, not to bodies
as SQLite's vector rows do, so a set covers the base when every stored *unit* has a point of it
(``bodies_without_vectors``): a unit an index job wrote meanwhile (old model only) counts as
missing, and the switch embeds its body again to give it its point — only units written during
the switch pay that. The vector lane never sees body points (they have no ``material_id``);
dropping the old set after the swap drops them too.
A BM25-only base (``dims`` None) has no collection and talks to Qdrant only once a switch gives
it a model (enable-embedding).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from knowbase.errors import EmbeddingMismatch, VectorStoreUnavailable
from knowbase.index.base import (
    IndexStore,
    LaneHit,
    MaterialInput,
    SearchHit,
    UnitRecord,
)
from knowbase.index.plan import check_vectors, plan_units
from knowbase.index.qdrant.access import QdrantPoints, payload
from knowbase.index.qdrant.models import QdrantModelSets
from knowbase.index.qdrant.points import (
    body_point_id,
    connect,
    ensure_collection,
    point_id,
    unavailable,
)

__all__ = ["QdrantIndexStore", "body_point_id", "connect", "ensure_collection", "point_id"]

log = logging.getLogger(__name__)


class QdrantIndexStore:
    """The IndexStore protocol: ``inner`` (BM25-only) plus vectors in a Qdrant collection.

    ``client`` may be None with a ``connect`` callable: the client is made on first use (a
    BM25-only base). ``owns_inner``: whether :meth:`close` closes ``inner`` (a store made by
    :meth:`for_model` shares it and does not).
    """

    writes_batches = False  # no rebuild_materials: each material in its own transaction

    def __init__(
        self,
        client: Any,
        inner: IndexStore,
        *,
        base_id: str,
        dims: int | None,
        model_id: str = "",
        connect: Callable[[], Any] | None = None,
        owns_inner: bool = True,
    ) -> None:
        self._client = client
        self._connect = connect
        self.inner = inner
        self.base_id = base_id
        self.dims = dims
        self.model_id = model_id
        self.collection = f"kb_{dims}" if dims is not None else None
        self.owns_inner = owns_inner
        self.points = QdrantPoints(self)
        self.models = QdrantModelSets(
            points=self.points,
            client=lambda: self.client,
            inner=inner,
            base_id=base_id,
            serving_model_id=model_id,
        )

    @classmethod
    def open(
        cls,
        client: Any,
        inner: IndexStore,
        *,
        base_id: str,
        dims: int | None,
        model_id: str | None = None,
        connect: Callable[[], Any] | None = None,
        owns_inner: bool = True,
    ) -> QdrantIndexStore:
        """Mount: make the collection and its payload indexes if missing; label points of the
        layout before the model key with ``model_id`` (the base's current model). A BM25-only
        store (``dims`` None) touches nothing."""
        store = cls(
            client,
            inner,
            base_id=base_id,
            dims=dims,
            model_id=model_id or "",
            connect=connect,
            owns_inner=owns_inner,
        )
        if dims is None:
            return store
        try:
            ensure_collection(store.client, dims)
            store._label_unkeyed_points()
        except VectorStoreUnavailable:
            raise
        except Exception as exc:  # connection refused, timeout, bad answer: all unavailable
            raise store._unavailable("open", exc) from exc
        return store

    @property
    def client(self) -> Any:
        if self._client is None:
            if self._connect is None:
                raise VectorStoreUnavailable(
                    "this store has no Qdrant client", base_id=self.base_id, reason="qdrant"
                )
            try:
                self._client = self._connect()
            except Exception as exc:
                raise self._unavailable("connect", exc) from exc
        return self._client

    def _unavailable(self, op: str, exc: BaseException) -> VectorStoreUnavailable:
        return unavailable(self.base_id, op, exc)

    def _label_unkeyed_points(self) -> None:
        from qdrant_client import models

        unkeyed = models.Filter(
            must=[
                models.FieldCondition(key="base_id", match=models.MatchValue(value=self.base_id)),
                models.IsEmptyCondition(is_empty=models.PayloadField(key="model_id")),
            ]
        )
        self.client.set_payload(
            self.collection,
            payload={"model_id": self.model_id},
            points=models.FilterSelector(filter=unkeyed),
        )

    def _filter(self, *, units_only: bool = False, **must: Any) -> Any:
        """Points of the base and the serving model matching ``must``."""
        return self.points.set_filter(self.model_id, units_only=units_only, **must)

    # --- writes ----------------------------------------------------------------------------
    def rebuild_material(
        self, material: MaterialInput, embeddings: Mapping[str, np.ndarray | Sequence[float]]
    ) -> None:
        from qdrant_client import models

        if self.dims is None:
            self.inner.rebuild_material(material, embeddings)
            if self._client is not None:
                self.points.drop_shadow_points(material.material_id, self._unit_ids_of(material))
            return
        assert self.collection is not None
        _, units = plan_units(material, self.dims, bool(embeddings))
        needed = sorted({u.body_hash for u in units})
        vectors = check_vectors(embeddings, needed, self.dims)
        try:
            missing = [h for h in needed if h not in vectors]
            if missing:
                vectors.update(self.points.vectors_of(missing))
            lost = [h for h in needed if h not in vectors]
            if lost:
                raise EmbeddingMismatch(
                    f"{len(lost)} chunk(s) have no embedding; nothing was changed",
                    material_id=material.material_id,
                    missing=lost[:10],
                )
            keep = [point_id(self.base_id, u.unit_id, self.model_id) for u in units]
            points = [
                models.PointStruct(
                    id=pid,
                    vector=vectors[u.body_hash].tolist(),
                    payload=payload(
                        self.base_id, self.model_id, u.body_hash, u.unit_id, material.material_id
                    ),
                )
                for pid, u in zip(keep, units, strict=True)
            ]
            self.points.upsert(self.collection, points)
        except EmbeddingMismatch:
            raise
        except Exception as exc:
            raise self._unavailable("rebuild_material", exc) from exc
        self.inner.rebuild_material(material, {})
        self.points.drop_points(
            material.material_id, self.model_id, keep, [u.unit_id for u in units]
        )

    @staticmethod
    def _unit_ids_of(material: MaterialInput) -> list[str]:
        return [u.unit_id for u in plan_units(material, None, False)[1]]

    def delete_materials(self, material_ids: Iterable[str]) -> None:
        ids = sorted(set(material_ids))
        if not ids:
            return
        self.inner.delete_materials(ids)
        if self.dims is None:
            if self._client is not None:
                self.points.drop_shadow_points(ids, ())
        else:
            self.points.drop_points(ids, self.model_id)

    def existing_embedding_hashes(self, hashes: Iterable[str]) -> set[str]:
        try:
            return set(self.points.vectors_of(sorted(set(hashes))))
        except Exception as exc:
            raise self._unavailable("existing_embedding_hashes", exc) from exc

    def stored_vectors(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """``{embedding_text_hash: vector}`` as Qdrant returns them (a cosine collection may
        have normalised them)."""
        try:
            return self.points.vectors_of(sorted(set(hashes)))
        except Exception as exc:
            raise self._unavailable("stored_vectors", exc) from exc

    def reclaim(self) -> None:
        self.inner.reclaim()

    # --- reads -----------------------------------------------------------------------------
    def keyword_lane(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[LaneHit]:
        return self.inner.keyword_lane(query, limit, within=within)

    def keyword_search(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        return self.inner.keyword_search(query, limit, within=within)

    def vector_lane(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[LaneHit]:
        """Qdrant's nearest unit points (score = cosine similarity), ties by unit id;
        ``within`` is a payload filter on ``material_id``, so the cut happens among the
        scope's points. A hit's text comes from the inner store (:meth:`hits_for`), which also
        drops orphan points of a crashed rebuild. A BM25-only store has no lane."""
        if self.dims is None:
            return []
        q = np.asarray(vector, dtype="<f4").ravel()
        if q.shape[0] != self.dims:
            raise EmbeddingMismatch(
                "query vector width does not match the base", dims=self.dims, got=q.shape[0]
            )
        norm = float(np.linalg.norm(q.astype(np.float64)))
        if limit <= 0 or not math.isfinite(norm) or norm == 0.0:
            return []
        if within is not None and not within:
            return []
        flt = (
            self._filter(units_only=True)
            if within is None
            else self._filter(material_id=sorted(within))
        )
        try:
            found = self.client.query_points(
                self.collection, query=q.tolist(), query_filter=flt, limit=limit, with_payload=True
            ).points
        except Exception as exc:
            raise self._unavailable("vector_search", exc) from exc
        hits = [
            LaneHit(p.payload["unit_id"], p.payload["material_id"], float(p.score)) for p in found
        ]
        return sorted(hits, key=lambda h: (-h.score, h.unit_id))

    def vector_search(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        return self.hits_for([(h.unit_id, h.score) for h in self.vector_lane(
            vector, limit, within=within)])  # fmt: skip

    def hits_for(self, pairs: Sequence[tuple[str, float]]) -> list[SearchHit]:
        return self.inner.hits_for(pairs)

    def material_path(self, material_id: str) -> str | None:
        return self.inner.material_path(material_id)

    def material_by_path(self, relative_path: str) -> str | None:
        return self.inner.material_by_path(relative_path)

    def content_text(self, material_id: str) -> str | None:
        return self.inner.content_text(material_id)

    def list_units(self, material_id: str) -> list[UnitRecord]:
        return self.inner.list_units(material_id)

    def material_ids(self) -> set[str]:
        return self.inner.material_ids()

    def unit_material_ids(self) -> set[str]:
        return self.inner.unit_material_ids()  # type: ignore[attr-defined]

    def changes_version(self) -> int:
        return self.inner.changes_version()

    def hold(self) -> AbstractContextManager[None]:
        return self.inner.hold()

    def close(self) -> None:
        if self.owns_inner:
            self.inner.close()

    def for_model(self, model_id: str, dims: int) -> QdrantIndexStore:
        """A store on the same index whose vector lane serves ``model_id`` (``kb eval --model
        shadow``); it shares the inner store, so closing it leaves that open."""
        return QdrantIndexStore.open(
            self._client,
            self.inner,
            base_id=self.base_id,
            dims=dims,
            model_id=model_id,
            connect=self._connect,
            owns_inner=False,
        )
