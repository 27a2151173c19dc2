"""Vectors in Qdrant; chunks and the keyword lane in a BM25-only store of the base (§3).

One point per search unit and model (id = uuid5 of base, model and unit id; payload ``base_id``,
``model_id``, ``material_id``, ``unit_id``, ``embedding_text_hash``), in one collection per
embedding width (``kb_<dims>``): vectors are keyed by model id, and every read and delete
filters on the store's model. Points written before the model key (no ``model_id`` payload) are
labelled with the base's current model when the store opens (in place, nothing re-embedded);
they keep their old ids until the next rebuild of their material replaces them.
Everything but vectors is the inner store's (SQLite file or PostgreSQL rows), whose version is
this store's ``changes_version``.

Two stores cannot share a transaction, so a rebuild writes in the order that keeps readers
right at every step: the new units' points, then the inner rebuild (atomic), then the points
of units that no longer exist. A crash in between leaves only orphan points, which no search
shows (a vector hit is looked up in the inner store) and the next rebuild or delete removes.
Every call has a timeout (``timeout_s``): an unreachable Qdrant is ``vector_store_unavailable``,
never a hang.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from knowbase.errors import EmbeddingMismatch, MissingExtra, VectorStoreUnavailable
from knowbase.pipeline.store.base import (
    IndexStore,
    LaneHit,
    MaterialInput,
    SearchHit,
    UnitRecord,
)
from knowbase.pipeline.store.plan import check_vectors, plan_units

_NS = uuid.UUID("7b4e2f0a-1c1d-4c55-9a43-0a9f3f1a2b6c")
BATCH = 256


def point_id(base_id: str, unit_id: str, model_id: str = "") -> str:
    return str(
        uuid.uuid5(_NS, f"{base_id}/{model_id}/{unit_id}" if model_id else f"{base_id}/{unit_id}")
    )


def connect(location: str, *, timeout_s: float = 5.0) -> Any:
    """A client: ``http(s)://…`` for a server, ``:memory:`` or a folder for local mode."""
    try:
        from qdrant_client import QdrantClient
    except ImportError as exc:
        raise MissingExtra(
            "the qdrant backend needs qdrant-client: pip install 'knowbase[qdrant]'"
        ) from exc
    if location.startswith(("http://", "https://")):
        return QdrantClient(url=location, timeout=int(math.ceil(timeout_s)))
    if location == ":memory:":
        return QdrantClient(location=":memory:")
    return QdrantClient(path=location)


class QdrantIndexStore:
    """The IndexStore protocol: ``inner`` (BM25-only) plus vectors in a Qdrant collection."""

    def __init__(
        self, client: Any, inner: IndexStore, *, base_id: str, dims: int, model_id: str = ""
    ) -> None:
        self.client = client
        self.inner = inner
        self.base_id = base_id
        self.dims = dims
        self.model_id = model_id
        self.collection = f"kb_{dims}"

    @classmethod
    def open(
        cls, client: Any, inner: IndexStore, *, base_id: str, dims: int, model_id: str | None = None
    ) -> QdrantIndexStore:
        """Mount: make the collection and its payload indexes if missing; label points of the
        layout before the model key with ``model_id`` (the base's current model)."""
        from qdrant_client import models

        store = cls(client, inner, base_id=base_id, dims=dims, model_id=model_id or "")
        try:
            if not client.collection_exists(store.collection):
                client.create_collection(
                    store.collection,
                    vectors_config=models.VectorParams(size=dims, distance=models.Distance.COSINE),
                )
                for key in ("base_id", "model_id", "material_id", "embedding_text_hash"):
                    client.create_payload_index(
                        store.collection, key, models.PayloadSchemaType.KEYWORD
                    )
            store._label_unkeyed_points()
        except Exception as exc:  # connection refused, timeout, bad answer: all unavailable
            raise store._unavailable("open", exc) from exc
        return store

    def _unavailable(self, op: str, exc: BaseException) -> VectorStoreUnavailable:
        return VectorStoreUnavailable(
            f"Qdrant cannot be used ({op}): {exc}", base_id=self.base_id, op=op, reason="qdrant"
        )

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

    def _filter(self, **must: Any) -> Any:
        from qdrant_client import models

        conds = [
            models.FieldCondition(key="base_id", match=models.MatchValue(value=self.base_id)),
            models.FieldCondition(key="model_id", match=models.MatchValue(value=self.model_id)),
        ]
        for key, value in must.items():
            match = (
                models.MatchAny(any=list(value))
                if isinstance(value, list | set | tuple)
                else models.MatchValue(value=value)
            )
            conds.append(models.FieldCondition(key=key, match=match))
        return models.Filter(must=conds)

    def _vectors_of(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i in range(0, len(hashes), BATCH):
            part = list(hashes[i : i + BATCH])
            offset = None
            while True:
                points, offset = self.client.scroll(
                    self.collection,
                    scroll_filter=self._filter(embedding_text_hash=part),
                    with_vectors=True,
                    with_payload=True,
                    limit=BATCH,
                    offset=offset,
                )
                for p in points:
                    out.setdefault(p.payload["embedding_text_hash"], np.asarray(p.vector, "<f4"))
                if offset is None:
                    break
        return out

    # --- writes ----------------------------------------------------------------------------
    def rebuild_material(
        self, material: MaterialInput, embeddings: Mapping[str, np.ndarray | Sequence[float]]
    ) -> None:
        from qdrant_client import models

        _, units = plan_units(material, self.dims, bool(embeddings))
        needed = sorted({u.body_hash for u in units})
        vectors = check_vectors(embeddings, needed, self.dims)
        try:
            missing = [h for h in needed if h not in vectors]
            if missing:
                vectors.update(self._vectors_of(missing))
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
                    payload={
                        "base_id": self.base_id,
                        "model_id": self.model_id,
                        "material_id": material.material_id,
                        "unit_id": u.unit_id,
                        "embedding_text_hash": u.body_hash,
                    },
                )
                for pid, u in zip(keep, units, strict=True)
            ]
            for i in range(0, len(points), BATCH):
                self.client.upsert(self.collection, points=points[i : i + BATCH])
        except EmbeddingMismatch:
            raise
        except Exception as exc:
            raise self._unavailable("rebuild_material", exc) from exc
        self.inner.rebuild_material(material, {})
        self._drop_points(material.material_id, keep)

    def _drop_points(self, material_id: str | list[str], keep: list[str] | None = None) -> None:
        from qdrant_client import models

        flt = self._filter(material_id=material_id)
        if keep:
            flt.must_not = [models.HasIdCondition(has_id=keep)]
        try:
            self.client.delete(self.collection, points_selector=models.FilterSelector(filter=flt))
        except Exception as exc:
            raise self._unavailable("delete", exc) from exc

    def delete_materials(self, material_ids: Iterable[str]) -> None:
        ids = sorted(set(material_ids))
        if not ids:
            return
        self.inner.delete_materials(ids)
        self._drop_points(ids)

    def existing_embedding_hashes(self, hashes: Iterable[str]) -> set[str]:
        try:
            return set(self._vectors_of(sorted(set(hashes))))
        except Exception as exc:
            raise self._unavailable("existing_embedding_hashes", exc) from exc

    def stored_vectors(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """``{embedding_text_hash: vector}`` as Qdrant returns them (a cosine collection may
        have normalised them)."""
        try:
            return self._vectors_of(sorted(set(hashes)))
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
        """Qdrant's nearest points (score = cosine similarity), ties by unit id; ``within``
        is a payload filter on ``material_id``, so the cut happens among the scope's points.
        A hit's text comes from the inner store (:meth:`hits_for`), which also drops orphan
        points of a crashed rebuild."""
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
        flt = self._filter() if within is None else self._filter(material_id=sorted(within))
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
        self.inner.close()
