"""The big-base vector lane: a faiss index over a :class:`VectorMatrix`, re-scored exactly.

Above ``Settings.quantized_lane_min_rows`` live rows, ``vector_search`` no longer scans every
float32 row: a faiss IVF index with 8-bit scalar-quantized codes (``IndexIVFScalarQuantizer``,
inner product on the matrix's unit rows) proposes candidates, and the matrix's own float32 rows
re-score them, so scores are exact cosines and ties break by unit id as in the exact lane. Why
IVF-SQ8 (DESIGN Turn 2, measured by ``bench/search_scale.py``): a flat 8-bit scan of 1M × 384
rows costs ~41 ms; IVF scans ~6% of the codes there (p50 ~2 ms, recall@10 ≥ 0.95 on real-text
vectors), at 0.4 GB next to the 1.5 GB float32 matrix that re-scores.

The index is derived from the matrix, never from SQLite directly: its ids are the matrix's row
numbers. A matrix patch appends rows and marks removed ones dead without renumbering
(``vector_matrix.py``), so the index follows it by adding the appended rows (cost follows the
change) and filters dead rows at query time with the matrix's own ``alive`` flags (an
``IDSelectorBitmap`` limited to the rows that matrix version has): a deleted, replaced or
failed unit is never proposed, and rows added for a newer version stay invisible to an older
one. A compaction renumbers rows, and growth far past the rows the coarse quantizer was
trained on degrades its lists; both rebuild the index.

faiss is optional (``pip install 'knowbase[big]'``): without it the exact lane serves every
base and :func:`describe` says why.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from knowbase.errors import EmbeddingMismatch
from knowbase.index.vector.matrix import VectorMatrix, candidates, ranked

log = logging.getLogger(__name__)

RESCORE = 100  # candidates re-scored in f32 per query, at least (and 2 × k)
# Lists probed: NPROBE_SHARE per 1,024, and at least MIN_SCAN rows' worth. On MiniLM vectors
# of real text (bench/search_scale.py, recall@10 against exact): 1M rows, 1,024 lists: 48
# probed → 0.964, 96 → 0.982; 100k rows, 256 lists: 21 → 0.914, 32 → 0.943, 64 → 0.981.
NPROBE_SHARE = 64
RETRAIN_GROWTH = 4  # rebuild once the rows outgrow the training set by this factor
TRAIN_PER_LIST = 64  # training rows per list (faiss warns under 39); k-means costs ∝ this
EXACT_SHARE = 0.02  # allowed rows at most this share of the matrix: scan them exactly
INSTALL = "pip install 'knowbase[big]'"

MIN_SCAN = 25_000  # rows scanned per query at least (a small base is scanned whole)

_warned = threading.Event()
_thread_state = threading.local()


def faiss_module() -> ModuleType | None:
    """faiss, or None when it is not installed (imported on first use: it is heavy).

    Every thread that calls faiss must get it from here: OpenMP's thread count is a per-thread
    setting, and this sets it to one in the calling thread.
    """
    try:
        import faiss
    except ImportError:
        return None
    if not getattr(_thread_state, "one_thread", False):
        _thread_state.one_thread = True
        # One OpenMP thread in every thread that calls faiss (omp_set_num_threads binds only
        # the caller; faiss has its own libgomp, torch's is untouched). Two reasons, measured:
        # a build on busy cores spin-waits (20k rows: 5.5 s with 2 threads, 0.3 s with 1 on
        # this 2-core machine under load); and faiss's OpenMP OpenBLAS, asked for 2 threads
        # where OMP_THREAD_LIMIT=1 grants one, runs its gemm jobs one after the other while
        # each waits for the others — an index.train that never returns (CI sets that limit
        # for tesseract; tests/index/test_store_vector_quantized.py runs under it).
        faiss.omp_set_num_threads(1)
    return faiss


def _nlist(rows: int) -> int:
    """Inverted lists for ``rows`` rows: ~√n as a power of two, at most 4096, and never
    fewer than faiss's 39 training points per list."""
    target = 2 ** round(math.log2(max(1.0, math.sqrt(rows))))
    return int(max(1, min(4096, target, rows // 39)))


def _nprobe(nlist: int, rows: int) -> int:
    """Lists probed per query: NPROBE_SHARE per 1,024, and at least MIN_SCAN rows' worth."""
    by_share = math.ceil(NPROBE_SHARE * nlist / 1024)
    by_rows = math.ceil(MIN_SCAN * nlist / max(rows, 1))
    return max(1, min(nlist, max(by_share, by_rows)))


@dataclass(eq=False)
class _Codes:
    """One faiss index over rows ``0..len(ids)`` of one matrix lineage (appends only)."""

    index: Any
    ids: tuple[str, ...]  # the ids of the matrix it last indexed; row i ↔ faiss id i
    trained: int  # rows the coarse quantizer was trained on
    nprobe: int
    lock: threading.Lock

    @property
    def nbytes(self) -> int:
        faiss = faiss_module()
        assert faiss is not None
        invlists = faiss.extract_index_ivf(self.index).invlists
        codes = sum(invlists.list_size(i) for i in range(invlists.nlist))
        # codes + 8-byte ids per row, plus the float32 centroids
        return int(codes * (invlists.code_size + 8) + self.index.nlist * self.index.d * 4)

    def extends(self, matrix: VectorMatrix) -> bool:
        """True when ``matrix`` numbers rows as this index does: one of their id tuples is a
        prefix of the other (a patch appended rows), and the training still fits."""
        ids = self.ids  # read once: a concurrent _add swaps it for a longer tuple
        n, m = len(ids), len(matrix.ids)
        if matrix.dims != self.index.d or m > RETRAIN_GROWTH * max(self.trained, 1):
            return False
        if matrix.ids is ids:
            return True
        return matrix.ids[:n] == ids if m >= n else ids[:m] == matrix.ids


def _build(faiss: ModuleType, matrix: VectorMatrix) -> _Codes:
    n, dims = len(matrix.ids), matrix.dims
    nlist = _nlist(n)
    rng = np.random.default_rng(n)  # deterministic training sample for one size
    train_rows = min(n, TRAIN_PER_LIST * nlist)
    sample = matrix.matrix[np.sort(rng.choice(n, train_rows, replace=False))]
    quantizer = faiss.IndexFlatIP(dims)
    index = faiss.IndexIVFScalarQuantizer(
        quantizer, dims, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
    )
    index.cp.seed = 1234
    index.train(sample)
    index.add_with_ids(matrix.matrix, np.arange(n, dtype=np.int64))
    return _Codes(index, matrix.ids, n, _nprobe(nlist, n), threading.Lock())


def _add(codes: _Codes, matrix: VectorMatrix) -> None:
    """Append the matrix rows the index does not have yet (another thread may have)."""
    with codes.lock:
        n = len(codes.ids)
        if len(matrix.ids) > n and matrix.ids[:n] == codes.ids:  # still the same lineage
            rows = np.ascontiguousarray(matrix.matrix[n:])
            codes.index.add_with_ids(rows, np.arange(n, len(matrix.ids), dtype=np.int64))
            codes.ids = matrix.ids


def exact_top_k(
    matrix: VectorMatrix, q: np.ndarray, k: int, allowed: np.ndarray | None
) -> list[tuple[str, float]]:
    """The exact lane over the ``allowed`` rows (None: every live row); ``q`` is unit-norm."""
    if allowed is not None and allowed.sum() <= EXACT_SHARE * len(allowed):
        rows = np.flatnonzero(allowed)
        cand = rows[candidates(matrix.matrix[rows] @ q, k, len(rows), matrix.dims)]
    else:
        scores = matrix.matrix @ q
        if allowed is not None:
            scores[~allowed] = -np.inf
        n = int(np.count_nonzero(scores > -np.inf))
        cand = candidates(scores, k, n, matrix.dims)
    return ranked(matrix.ids, matrix.matrix, cand, q, k)


@dataclass(frozen=True, eq=False)
class QuantizedLane:
    """The vector lane of one matrix version served from a faiss index (see module doc)."""

    matrix: VectorMatrix
    codes: _Codes

    @property
    def kind(self) -> str:
        return "quantized-ivf-sq8"

    @property
    def size(self) -> int:
        return self.matrix.size

    @property
    def nbytes(self) -> int:
        """The index's own bytes (the float32 matrix it re-scores from is counted apart)."""
        return self.codes.nbytes

    def top_k(
        self, query: np.ndarray, k: int, *, mask: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """As :meth:`VectorMatrix.top_k`, over the rows where ``mask`` (one bool per matrix
        row, True = may be returned) is True; k rows whenever k allowed rows exist."""
        m = self.matrix
        q = np.asarray(query, dtype=np.float32).ravel()
        if q.shape[0] != m.dims:
            raise EmbeddingMismatch(
                "query vector width does not match the base", dims=m.dims, got=q.shape[0]
            )
        norm = float(np.linalg.norm(q))
        if k <= 0 or m.size == 0 or not np.isfinite(norm) or norm == 0.0:
            return []
        q = q / norm
        allowed = m.alive
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != (len(m.ids),):
                raise ValueError(f"mask has shape {mask.shape}, the matrix {len(m.ids)} rows")
            allowed = mask if allowed is None else allowed & mask
        n_allowed = m.size if allowed is None else int(allowed.sum())
        want = min(max(RESCORE, 2 * k), n_allowed)
        if n_allowed == 0:
            return []
        if allowed is not None and n_allowed <= EXACT_SHARE * len(m.ids):
            return exact_top_k(m, q, k, allowed)
        found = self._candidates(q, want, allowed)
        if len(found) < min(k, n_allowed):  # the probed lists held too few allowed rows
            return exact_top_k(m, q, k, allowed)
        return ranked(m.ids, m.matrix, found, q, k)

    def _candidates(self, q: np.ndarray, want: int, allowed: np.ndarray | None) -> np.ndarray:
        faiss = faiss_module()
        assert faiss is not None
        n = len(self.matrix.ids)
        params = faiss.SearchParametersIVF(nprobe=self.codes.nprobe)
        with self.codes.lock:  # faiss may not search while another thread adds
            if allowed is not None or len(self.codes.ids) != n:
                # The bitmap also hides rows a newer version appended to the shared index: its
                # padding bits are 0, and faiss rejects ids past its length (given in bytes).
                bits = np.ones(n, dtype=bool) if allowed is None else allowed
                packed = np.packbits(bits, bitorder="little")
                selector = faiss.IDSelectorBitmap(len(packed), faiss.swig_ptr(packed))
                params.sel = selector  # the SWIG field keeps no reference: ``selector`` does
            _, found = self.codes.index.search(q[None, :], want, params=params)
        found = found[0]
        return found[found >= 0]


Lane = VectorMatrix | QuantizedLane


class BigLane:
    """One base's big-base lane across matrix versions: served, patched, built.

    A patch (rows appended) is applied on the spot: it costs what changed. A full build — the
    base crossing the threshold, a compaction, outgrown training — runs on a background
    thread (~30 s at 1M rows on one core) while the exact lane keeps answering, so no search
    waits for it; ``background=False`` builds inline (tests, the bench).
    """

    def __init__(self, *, background: bool = True) -> None:
        self.background = background
        self._lock = threading.Lock()
        self._lane: QuantizedLane | None = None
        self._building: threading.Thread | None = None
        self._failed: tuple[int, str] | None = None  # (matrix version, error) of a failed build

    def serve(self, matrix: VectorMatrix, *, min_rows: int) -> Lane:
        """The lane for ``matrix``: itself below ``min_rows`` live rows (0: always), without
        faiss, or while its index is being built; else a :class:`QuantizedLane`."""
        if min_rows <= 0 or matrix.size < min_rows:
            self._lane = None  # a base that shrank: let its index go
            return matrix
        faiss = faiss_module()
        if faiss is None:
            if not _warned.is_set():
                _warned.set()
                log.warning(
                    "a base has %d vectors (over %d) but faiss is not installed: serving the"
                    " exact lane (%s)",
                    matrix.size,
                    min_rows,
                    INSTALL,
                )
            return matrix
        with self._lock:
            lane = self._lane
            if lane is not None:
                if lane.matrix is matrix:
                    return lane
                if lane.codes.extends(matrix):
                    _add(lane.codes, matrix)
                    self._lane = QuantizedLane(matrix, lane.codes)
                    return self._lane
            if self._building is None and (self._failed or (None,))[0] != matrix.version:
                self._building = threading.Thread(
                    target=self._build, args=(matrix,), name="kb-big-lane", daemon=True
                )
                self._building.start()
            building = self._building
        if not self.background and building is not None:
            building.join()
            return self.serve(matrix, min_rows=min_rows)
        return matrix

    def _build(self, matrix: VectorMatrix) -> None:
        t0 = time.perf_counter()
        try:
            faiss = faiss_module()  # in this thread: it sets this thread's OpenMP threads
            assert faiss is not None
            codes = _build(faiss, matrix)
        except Exception as exc:  # the exact lane keeps serving; logged once per version
            log.exception("building the big-base lane (%d rows) failed", matrix.size)
            with self._lock:
                self._building, self._failed = None, (matrix.version, f"{type(exc).__name__}")
            return
        log.info(
            "big-base lane built: %d rows in %.1f s", len(matrix.ids), time.perf_counter() - t0
        )
        with self._lock:
            self._building, self._failed = None, None
            # A patch may have served a newer matrix meanwhile: keep whichever is newer.
            if self._lane is None or self._lane.matrix.version <= matrix.version:
                self._lane = QuantizedLane(matrix, codes)

    def wait(self, timeout: float | None = None) -> None:
        """Until the build in progress (if any) ends."""
        building = self._building
        if building is not None:
            building.join(timeout)

    @property
    def building(self) -> bool:
        return self._building is not None

    @property
    def lane(self) -> QuantizedLane | None:
        """The newest index served or built (None: none yet)."""
        return self._lane


def describe(
    big: BigLane | None, matrix: VectorMatrix | None, *, rows: int, dims: int, min_rows: int
) -> dict[str, Any]:
    """What ``kb status`` shows: the lane a search uses and its memory in bytes.

    ``big``/``matrix`` are what this process has (None: nothing loaded); without them the lane
    is the one a search would serve for ``rows`` units, its memory estimated (``loaded``
    false).
    """
    lane = big.lane if big is not None else None
    if lane is not None and (matrix is None or lane.matrix is matrix):
        return {
            "lane": lane.kind,
            "rows": lane.size,
            "matrix_bytes": lane.matrix.nbytes,
            "index_bytes": lane.nbytes,
            "min_rows": min_rows,
            "loaded": True,
        }
    if matrix is not None:
        rows = matrix.size
    big_base = 0 < min_rows <= rows
    has_faiss = faiss_module() is not None
    building = big is not None and big.building
    out: dict[str, Any] = {
        "lane": "quantized-ivf-sq8" if big_base and has_faiss and not building else "exact",
        "rows": rows,
        "matrix_bytes": matrix.nbytes if matrix is not None else rows * dims * 4,
        "min_rows": min_rows,
        "loaded": matrix is not None,
    }
    if big_base and has_faiss:  # codes and ids per row, the centroids
        out["index_bytes"] = rows * (dims + 8) + _nlist(rows) * dims * 4
    if building:
        out["reason"] = "the big-base lane's index is being built; the exact lane serves"
    elif big_base and not has_faiss:
        out["reason"] = f"over {min_rows} rows but faiss is not installed ({INSTALL})"
    return out
