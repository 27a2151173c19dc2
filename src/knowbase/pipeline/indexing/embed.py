"""Embed what the store lacks (§4.4 "Embedding").

Bodies are deduplicated by their ``text_hash`` (the store's ``embedding_text_hash``), hashes the
store already holds are skipped, and the rest go to the provider in batches. Every answer is
checked before it can reach the index: a wrong count, an empty row, a wrong width or a
non-finite value raises :class:`~knowbase.errors.EmbeddingMismatch`.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from knowbase.errors import EmbeddingMismatch, InvalidInput
from knowbase.pipeline.indexing.batcher import EmbeddingBatcher, query_batcher_for
from knowbase.providers.base import EmbeddingProvider
from knowbase.units.hashing import text_hash

DEFAULT_BATCH_SIZE = 10
EXISTING_LOOKUP_BATCH = 500  # hashes per ``existing`` call: stays under SQLite's variable limit


def embed_missing(
    bodies: Sequence[str],
    *,
    existing: Callable[[list[str]], set[str]],
    provider: EmbeddingProvider,
    dims: int,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_progress: Callable[[int, int], None] | None = None,
    check_cancelled: Callable[[], None] | None = None,
    batcher: EmbeddingBatcher | None = None,
    texts: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Return ``{text_hash: float32 vector}`` for each distinct body the store does not hold yet.

    ``texts`` (same order as ``bodies``) is what the model reads for each body: its contextual
    unit text (:mod:`knowbase.units.context`); the vector is still keyed by the body's hash.
    None: the bodies.

    ``existing(hashes)`` answers which of the given hashes the store already has (asked 500 at a
    time). Batches use ``provider.batch_size`` when it is set, else ``batch_size``.
    ``check_cancelled()`` runs before every batch and stops the work by raising;
    ``on_progress(done, total)`` follows every batch (with a ``batcher``: the rows answered so
    far, polled), counted in distinct bodies to embed.
    Nothing is called at all for empty input, and the provider is not called when every hash
    already exists. With a ``batcher`` the missing bodies go to it in one request and share
    provider calls with other jobs' texts (``check_cancelled`` is polled while waiting).
    """
    unique: dict[str, str] = {}
    for n, body in enumerate(bodies):
        unique.setdefault(text_hash(body), body if texts is None else texts[n])
    return embed_unique(
        unique,
        existing=existing,
        provider=provider,
        dims=dims,
        batch_size=batch_size,
        on_progress=on_progress,
        check_cancelled=check_cancelled,
        batcher=batcher,
    )


def embed_unique(
    unique: Mapping[str, str],
    *,
    existing: Callable[[list[str]], set[str]],
    provider: EmbeddingProvider,
    dims: int,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_progress: Callable[[int, int], None] | None = None,
    check_cancelled: Callable[[], None] | None = None,
    batcher: EmbeddingBatcher | None = None,
) -> dict[str, np.ndarray]:
    """:func:`embed_missing` for ``{key: text to embed}`` (keys: the bodies' hashes)."""
    _check_dims(dims, provider)
    if not unique:
        return {}

    hashes = list(unique)
    have: set[str] = set()
    for i in range(0, len(hashes), EXISTING_LOOKUP_BATCH):
        have |= existing(hashes[i : i + EXISTING_LOOKUP_BATCH])
    missing = [h for h in hashes if h not in have]
    if not missing:
        return {}

    if batcher is not None:
        answer = batcher.embed(
            [unique[h] for h in missing], check_cancelled=check_cancelled, on_progress=on_progress
        )
        rows = _checked(answer, len(missing), dims, provider)
        if on_progress is not None:
            on_progress(len(missing), len(missing))
        return dict(zip(missing, rows, strict=True))

    size = _batch_size(provider, batch_size)
    vectors: dict[str, np.ndarray] = {}
    for i in range(0, len(missing), size):
        if check_cancelled is not None:
            check_cancelled()
        batch = missing[i : i + size]
        rows = _checked(provider.embed([unique[h] for h in batch]), len(batch), dims, provider)
        vectors.update(zip(batch, rows, strict=True))
        if on_progress is not None:
            on_progress(len(vectors), len(missing))
    return vectors


QUERY_CACHE_SIZE = 512  # query vectors kept per provider (an agent loop repeats its queries)


class _QueryCache:
    """An LRU of query vectors per provider instance (read-only arrays, shared by callers)."""

    def __init__(self, size: int = QUERY_CACHE_SIZE) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._per_provider: weakref.WeakKeyDictionary[object, OrderedDict[str, np.ndarray]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, provider: object, text: str) -> np.ndarray | None:
        with self._lock:
            entries = self._per_provider.get(provider)
            vector = None if entries is None else entries.get(text)
            if vector is not None:
                entries.move_to_end(text)  # type: ignore[union-attr]
            return vector

    def put(self, provider: object, text: str, vector: np.ndarray) -> None:
        vector.setflags(write=False)
        with self._lock:
            entries = self._per_provider.setdefault(provider, OrderedDict())
            entries[text] = vector
            entries.move_to_end(text)
            while len(entries) > self.size:
                entries.popitem(last=False)


QUERY_CACHE = _QueryCache()


def cached_query(text: str, provider: EmbeddingProvider, dims: int) -> np.ndarray | None:
    """The query's vector if :func:`embed_query` computed it recently, else None."""
    vector = QUERY_CACHE.get(provider, text)
    return vector if vector is not None and vector.shape == (dims,) else None


def embed_query(text: str, provider: EmbeddingProvider, dims: int) -> np.ndarray:
    """The query's float32 vector of width ``dims``, checked like :func:`embed_missing`'s.

    Answers repeat from a per-provider LRU of :data:`QUERY_CACHE_SIZE` queries; the array is
    read-only. A miss goes to the provider's query batcher (:func:`query_batcher_for`): queries
    of concurrent searches share model calls, and a lone one is sent at once.
    """
    _check_dims(dims, provider)
    vector = cached_query(text, provider, dims)
    if vector is None:
        # A model trained with distinct query/passage inputs (E5's "query: ") says so by having
        # ``embed_queries`` (the batcher calls it); ``embed`` is what indexed text went through.
        try:
            batcher = query_batcher_for(provider)
        except TypeError:  # a provider without weakref support: called directly
            embed = getattr(provider, "embed_queries", None) or provider.embed
            rows = embed([text])
        else:
            rows = batcher.embed([text])
        vector = _checked(rows, 1, dims, provider)[0]
        with contextlib.suppress(TypeError):  # a provider without weakref support: uncached
            QUERY_CACHE.put(provider, text, vector)
    return vector


def _batch_size(provider: EmbeddingProvider, fallback: int) -> int:
    size = getattr(provider, "batch_size", None)
    if isinstance(size, int) and size > 0:
        return size
    return max(1, fallback)


def _check_dims(dims: int, provider: EmbeddingProvider) -> None:
    if isinstance(dims, bool) or not isinstance(dims, int | np.integer) or dims <= 0:
        raise InvalidInput(
            f"embedding width must be a positive integer, got {dims!r}",
            model_id=getattr(provider, "model_id", None),
            dims=dims,
        )


def _checked(
    result: object, expected: int, dims: int, provider: EmbeddingProvider
) -> list[np.ndarray]:
    """Split the provider's answer into ``expected`` float32 rows of width ``dims``, or raise."""
    model_id = getattr(provider, "model_id", None)
    if isinstance(result, np.ndarray) and result.ndim != 2:
        raise EmbeddingMismatch(
            f"{model_id}: expected a 2-D array of vectors, got shape {result.shape}",
            model_id=model_id,
            shape=result.shape,
        )
    try:
        rows = list(result)  # type: ignore[call-overload]
    except TypeError as exc:
        raise EmbeddingMismatch(
            f"{model_id}: expected a list of vectors, got {type(result).__name__}",
            model_id=model_id,
        ) from exc
    if len(rows) != expected:
        raise EmbeddingMismatch(
            f"{model_id}: asked for {expected} vectors, got {len(rows)}",
            model_id=model_id,
            expected=expected,
            got=len(rows),
        )
    out: list[np.ndarray] = []
    for index, row in enumerate(rows):
        try:
            vector = np.asarray(row, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise EmbeddingMismatch(
                f"{model_id}: vector {index} is not a list of numbers",
                model_id=model_id,
                index=index,
            ) from exc
        if vector.size == 0:
            raise EmbeddingMismatch(
                f"{model_id}: vector {index} of the batch is empty", model_id=model_id, index=index
            )
        if vector.size != dims:
            raise EmbeddingMismatch(
                f"{model_id}: vector {index} has width {vector.size}, the base expects {dims}",
                model_id=model_id,
                index=index,
                expected=dims,
                got=int(vector.size),
            )
        if not np.isfinite(vector).all():
            raise EmbeddingMismatch(
                f"{model_id}: vector {index} holds NaN or infinite values",
                model_id=model_id,
                index=index,
            )
        out.append(vector)
    return out
