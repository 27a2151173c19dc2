"""The in-memory vector lane (DESIGN "numpy for the vector lane", "Vector lane freshness").

A :class:`VectorMatrix` holds one normalised float32 row per search unit of a base, rows in
unit-id order, zero-norm (and non-finite) vectors left out — exactly the rows for which SQL's
``vec_distance_cosine`` is not NULL. ``top_k`` is one matrix product plus ``argpartition``;
ties break by unit id, so the lane returns what an exact ``ORDER BY dist, unit_id`` scan does.

The store labels each matrix with ``meta.vectors_version``; when the version moves it patches
the matrix (unit ids are content-addressed, so a unit id always names the same vector) or
rebuilds it. :data:`CACHE` keeps one matrix per index path per process under a byte budget.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from knowbase.errors import EmbeddingMismatch

Row = tuple[str, bytes]  # (unit_id, little-endian float32 blob)


def _normalised(rows: list[Row], dims: int) -> tuple[list[str], np.ndarray]:
    """Decode, normalise, and drop the rows whose norm is zero or not finite."""
    if not rows:
        return [], np.zeros((0, dims), dtype=np.float32)
    raw = np.frombuffer(b"".join(blob for _, blob in rows), dtype="<f4")
    if raw.size != len(rows) * dims:
        raise EmbeddingMismatch(
            "stored vectors do not match the base's dimensions", dims=dims, rows=len(rows)
        )
    mat = raw.reshape(len(rows), dims).astype(np.float32, copy=True)
    # Scale by the largest component before the norm: squaring a tiny float32 (1e-38)
    # underflows to 0, which would drop a vector that SQL's cosine still ranks.
    scale = np.abs(mat).max(axis=1)
    keep = np.isfinite(scale) & (scale > 0)  # NaN and inf rows have a non-finite max
    mat = mat[keep]
    mat /= scale[keep, None]
    mat /= np.linalg.norm(mat, axis=1)[:, None]
    ids = [uid for (uid, _), k in zip(rows, keep, strict=True) if k]
    return ids, mat


@dataclass(frozen=True)
class VectorMatrix:
    """Normalised vectors of one base at one ``vectors_version``; immutable (patch → new)."""

    ids: tuple[str, ...]  # sorted; row i of ``matrix`` belongs to ids[i]
    matrix: np.ndarray  # (len(ids), dims) float32, unit rows
    dims: int
    version: int
    known: frozenset[str]  # every unit id seen at this version, zero-norm ones included

    @classmethod
    def from_rows(cls, rows: Iterable[Row], *, dims: int, version: int) -> VectorMatrix:
        """Build from ``(unit_id, blob)`` rows in any order."""
        ordered = sorted(rows)
        ids, mat = _normalised(ordered, dims)
        return cls(tuple(ids), mat, dims, version, frozenset(uid for uid, _ in ordered))

    def patched(
        self, added: Iterable[Row], removed: Iterable[str], *, version: int
    ) -> VectorMatrix:
        """A new matrix without ``removed`` and with ``added``, labelled ``version``."""
        gone = set(removed)
        keep = np.fromiter((uid not in gone for uid in self.ids), dtype=bool, count=len(self.ids))
        new_rows = sorted(added)
        new_ids, new_mat = _normalised(new_rows, self.dims)
        ids = [uid for uid, k in zip(self.ids, keep, strict=True) if k] + new_ids
        mat = np.concatenate([self.matrix[keep], new_mat]) if new_ids else self.matrix[keep]
        order = sorted(range(len(ids)), key=ids.__getitem__)
        known = (self.known - gone) | {uid for uid, _ in new_rows}
        return VectorMatrix(
            tuple(ids[i] for i in order), mat[order], self.dims, version, frozenset(known)
        )

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes)

    def top_k(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` most cosine-similar units as ``(unit_id, similarity)``, best first.

        A zero or non-finite query matches nothing (SQL gives NULL distances for it).
        """
        q = np.asarray(query, dtype=np.float32).ravel()
        if q.shape[0] != self.dims:
            raise EmbeddingMismatch(
                "query vector width does not match the base", dims=self.dims, got=q.shape[0]
            )
        norm = float(np.linalg.norm(q))
        n = len(self.ids)
        if k <= 0 or n == 0 or not np.isfinite(norm) or norm == 0.0:
            return []
        scores = self.matrix @ (q / norm)
        if k < n:
            part = np.argpartition(-scores, k - 1)[:k]
            # Widen to every row tied with the k-th score, so the id tie-break sees them all.
            cand = np.flatnonzero(scores >= scores[part].min())
        else:
            cand = np.arange(n)
        order = cand[np.lexsort((cand, -scores[cand]))][:k]
        return [(self.ids[i], float(scores[i])) for i in order]


class MatrixCache:
    """Per-process matrices keyed by index path; least recently used evicted over the budget."""

    def __init__(self, budget_bytes: int = 2 << 30) -> None:
        self.budget_bytes = budget_bytes
        self._items: OrderedDict[str, VectorMatrix] = OrderedDict()
        self._lock = threading.Lock()
        self._build_locks: dict[str, threading.Lock] = {}

    def get(self, key: str) -> VectorMatrix | None:
        with self._lock:
            m = self._items.get(key)
            if m is not None:
                self._items.move_to_end(key)
            return m

    def put(self, key: str, matrix: VectorMatrix) -> None:
        with self._lock:
            current = self._items.get(key)
            # Two threads may race to refresh; never replace a newer matrix by an older one.
            if current is not None and current.version > matrix.version:
                return
            self._items[key] = matrix
            self._items.move_to_end(key)
            total = sum(m.nbytes for m in self._items.values())
            while total > self.budget_bytes and len(self._items) > 1:
                _, evicted = self._items.popitem(last=False)
                total -= evicted.nbytes

    def build_lock(self, key: str) -> threading.Lock:
        """Serialises refreshes of one key, so N threads do not load the same matrix N times."""
        with self._lock:
            return self._build_locks.setdefault(key, threading.Lock())

    def discard(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)


CACHE = MatrixCache()
