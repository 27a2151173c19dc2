"""The in-memory vector lane (DESIGN "numpy for the vector lane", "Vector lane freshness").

A :class:`VectorMatrix` holds one normalised float32 row per search unit of a base, rows in
unit-id order, zero-norm (and non-finite) vectors left out — exactly the rows for which SQL's
``vec_distance_cosine`` is not NULL. ``top_k`` is one matrix product plus ``argpartition``
to find the candidates, then an exact re-score of those few (:func:`ranked`); ties break by
unit id, so the lane returns what an exact ``ORDER BY dist, unit_id`` scan does.

Why the re-score: a BLAS matrix product does not compute every row the same way — rows are
taken in blocks, and the rows of a remainder block go through another kernel with another
summation order — so two equal rows at different positions can score a float32 ulp apart,
and a patched matrix (rows appended) can rank a near-tie differently from a full build.
:func:`exact_scores` sums exact float64 products per row with numpy's pairwise sum, the same
way for every row: a row's score depends on its values only.

The store labels each matrix with ``meta.vectors_version``; when the version moves it patches
the matrix (unit ids are content-addressed, so a unit id always names the same vector) or
rebuilds it. :data:`CACHE` keeps one matrix per index path per process under a byte budget.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from knowbase.errors import EmbeddingMismatch

Row = tuple[str, bytes]  # (unit_id, little-endian float32 blob)
COMPACT_MIN_DEAD = 1024  # dead rows tolerated before a compaction, whatever the size


def score_slack(dims: int) -> float:
    """How far a float32 BLAS cosine of unit rows may fall from the exact one, twice: a dot
    product of ``dims`` terms errs by at most ``dims`` units of float32 rounding (2**-24)
    times the sum of the products' magnitudes, which is at most 1 for unit vectors."""
    return 2.0 * dims * 2.0**-24


def exact_scores(matrix: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The cosines of ``matrix[rows]`` (unit rows) with the unit ``query``, in float64.

    Each product of two float32 values is exact in float64, and numpy's pairwise sum along a
    row runs the same way for every row, so equal rows score equally wherever they sit."""
    sub = matrix[rows].astype(np.float64)
    sub *= np.asarray(query, dtype=np.float32).astype(np.float64)
    return sub.sum(axis=1)


def candidates(scores: np.ndarray, k: int, n: int, dims: int) -> np.ndarray:
    """Rows whose approximate ``scores`` (a float32 BLAS product; excluded rows at -inf) may
    hold one of the ``k`` best exact scores among the ``n`` rows not excluded."""
    if k < n:
        part = np.argpartition(-scores, k - 1)[:k]
        # Widen by the product's error bound: every row of the exact top k, and every row
        # tied with its k-th, is within it of the k-th approximate score.
        return np.flatnonzero(scores >= scores[part].min() - score_slack(dims))
    return np.flatnonzero(scores > -np.inf)


def ranked(
    ids: tuple[str, ...], matrix: np.ndarray, rows: np.ndarray, query: np.ndarray, k: int
) -> list[tuple[str, float]]:
    """``rows`` of ``matrix`` re-scored exactly, best first, ties by unit id, the first ``k``."""
    exact = exact_scores(matrix, rows, query)
    order = np.argsort(-exact, kind="stable")
    rows, exact = rows[order], exact[order]
    if len(exact) > 1 and bool((exact[1:] == exact[:-1]).any()):  # ties: break them by id
        pairs = sorted(
            zip(rows.tolist(), exact.tolist(), strict=True), key=lambda p: (-p[1], ids[p[0]])
        )
        return [(ids[i], float(s)) for i, s in pairs[:k]]
    return [(ids[i], float(s)) for i, s in zip(rows[:k].tolist(), exact[:k].tolist(), strict=True)]


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


@dataclass(frozen=True, eq=False)
class VectorMatrix:
    """Normalised vectors of one base at one ``vectors_version``; immutable (patch → new).

    Rows are in arrival order: a patch appends new rows into spare capacity of a buffer it
    shares with older versions (each version sees only its own first ``len(ids)`` rows, and no
    row it sees is ever written again) and marks removed rows dead instead of moving the
    others, so a patch costs what it adds and removes, not the size of the base. Dead rows
    are compacted away once they are a quarter of the matrix. Ties break by unit id among
    the candidates of each query, so the order of rows never shows.
    """

    ids: tuple[str, ...]  # row i of ``matrix`` belongs to ids[i]; dead rows included
    matrix: np.ndarray  # (len(ids), dims) float32, unit rows (a view of the shared buffer)
    dims: int
    version: int
    known: frozenset[str]  # every live unit id seen at this version, zero-norm ones included
    alive: np.ndarray | None = None  # bool per row; None when every row is alive
    rows: dict[str, int] = field(default_factory=dict, repr=False)  # live id → row
    _buffer: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def from_rows(cls, rows: Iterable[Row], *, dims: int, version: int) -> VectorMatrix:
        """Build from ``(unit_id, blob)`` rows in any order."""
        ordered = sorted(rows)
        ids, mat = _normalised(ordered, dims)
        # Spare rows for the appends to come (an import adds rows while searches run).
        buffer = np.empty((len(ids) + max(1024, len(ids) // 8), dims), dtype=np.float32)
        buffer[: len(ids)] = mat
        return cls(
            tuple(ids),
            buffer[: len(ids)],
            dims,
            version,
            frozenset(uid for uid, _ in ordered),
            None,
            {uid: i for i, uid in enumerate(ids)},
            buffer,
        )

    def patched(
        self, added: Iterable[Row], removed: Iterable[str], *, version: int
    ) -> VectorMatrix:
        """A new matrix without ``removed`` and with ``added``, labelled ``version``.

        An added id that is already here replaces its row (unit ids are content-addressed, so
        it is the same vector; the old row dies and the new one is appended).
        """
        new_rows = sorted(added)
        gone = set(removed) | {uid for uid, _ in new_rows if uid in self.known}
        new_ids, new_mat = _normalised(new_rows, self.dims)
        dead = [self.rows[uid] for uid in gone if uid in self.rows]
        n_old = len(self.ids)
        alive_count = len(self.rows) - len(dead) + len(new_ids)
        dead_total = n_old - len(self.rows) + len(dead)
        known = (self.known - gone) | {uid for uid, _ in new_rows}
        if dead_total > max(COMPACT_MIN_DEAD, (n_old + len(new_ids)) // 4):
            return self._compacted(dead, new_ids, new_mat, version, known)
        buffer = self._buffer
        n_new = n_old + len(new_ids)
        if buffer is None or n_new > len(buffer) or self._buffer_taken(n_old):
            grown = np.empty((max(16, n_new * 3 // 2), self.dims), dtype=np.float32)
            grown[:n_old] = self.matrix
            buffer = grown
        buffer[n_old:n_new] = new_mat
        alive = None
        if dead_total:
            alive = np.ones(n_new, dtype=bool)
            if self.alive is not None:
                alive[:n_old] = self.alive
            alive[dead] = False
        rows = dict(self.rows)  # a C-level copy: cheap next to anything per row in Python
        for uid in gone:
            rows.pop(uid, None)
        rows.update((uid, n_old + i) for i, uid in enumerate(new_ids))
        assert len(rows) == alive_count
        matrix = VectorMatrix(
            self.ids + tuple(new_ids),
            buffer[:n_new],
            self.dims,
            version,
            known,
            alive,
            rows,
            buffer,
        )
        _claim(buffer, n_new)
        return matrix

    def _buffer_taken(self, n_old: int) -> bool:
        """True when another patch of this version already appended into the spare rows."""
        return _claims.get(id(self._buffer), n_old) != n_old

    def _compacted(
        self,
        dead: list[int],
        new_ids: list[str],
        new_mat: np.ndarray,
        version: int,
        known: frozenset[str],
    ) -> VectorMatrix:
        keep = np.ones(len(self.ids), dtype=bool) if self.alive is None else self.alive.copy()
        keep[dead] = False
        kept_ids = [uid for uid, k in zip(self.ids, keep, strict=True) if k]
        ids = kept_ids + new_ids
        buffer = np.empty((max(16, len(ids) * 3 // 2), self.dims), dtype=np.float32)
        buffer[: len(kept_ids)] = self.matrix[keep]
        buffer[len(kept_ids) : len(ids)] = new_mat
        matrix = VectorMatrix(
            tuple(ids),
            buffer[: len(ids)],
            self.dims,
            version,
            known,
            None,
            {uid: i for i, uid in enumerate(ids)},
            buffer,
        )
        _claim(buffer, len(ids))
        return matrix

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes)

    @property
    def size(self) -> int:
        """Live rows (vectors a query can find)."""
        return len(self.rows)

    def vectors(self) -> dict[str, np.ndarray]:
        """Live ``unit id → normalised row`` (tests, diagnostics)."""
        return {uid: self.matrix[i] for uid, i in self.rows.items()}

    def top_k(
        self, query: np.ndarray, k: int, *, mask: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` most cosine-similar units as ``(unit_id, similarity)``, best first.

        ``mask``: a boolean per row of :attr:`matrix` (``len(ids)`` long); only rows marked
        True can be returned, and the cut to ``k`` happens among them (search filters). A zero
        or non-finite query matches nothing (SQL gives NULL distances for it).
        """
        q = np.asarray(query, dtype=np.float32).ravel()
        if q.shape[0] != self.dims:
            raise EmbeddingMismatch(
                "query vector width does not match the base", dims=self.dims, got=q.shape[0]
            )
        norm = float(np.linalg.norm(q))
        n = len(self.rows)
        if k <= 0 or n == 0 or not np.isfinite(norm) or norm == 0.0:
            return []
        q = q / norm
        scores = self.matrix @ q
        if self.alive is not None:
            scores[~self.alive] = -np.inf
        if mask is not None:
            if mask.shape != (len(self.ids),):
                raise ValueError(f"mask has shape {mask.shape}, the matrix {len(self.ids)} rows")
            scores[~mask] = -np.inf
            n = int(np.count_nonzero(mask if self.alive is None else mask & self.alive))
            if n == 0:
                return []
        return ranked(self.ids, self.matrix, candidates(scores, k, n, self.dims), q, k)


# buffer id → rows written into it by the newest matrix on it. A second patch of an older
# version (two threads racing) must not write over rows a newer version already shows.
_claims: dict[int, int] = {}
_claims_lock = threading.Lock()


def _claim(buffer: np.ndarray, n: int) -> None:
    with _claims_lock:
        _claims[id(buffer)] = n
        if len(_claims) > 4096:  # ids of freed buffers; stale entries only force a copy
            _claims.clear()


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
