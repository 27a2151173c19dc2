"""One embedding batcher per provider per process: many jobs' texts, few model calls.

An index job hands its chunk texts to :meth:`EmbeddingBatcher.embed` and waits. Dispatcher
threads (at most ``max_in_flight``: 1 for the local model, which uses every core for one
batch; the profile's setting for an HTTP model) take up to ``batch_size`` texts from the front
of the queue, whoever they belong to, call the provider once, and hand each job its own rows.
While one batch runs, the next fills from every job that arrived meanwhile, so batches grow
with the load and a lone job never waits for company (beyond ``linger_s``).

Per job: a cancel (``check_cancelled`` raising, polled while waiting) takes the job's texts that
were not sent yet out of the queue; rows of a batch already in flight are dropped on return. A
failed provider call fails exactly the jobs with texts in that batch (each gets the exception
and decides its retry by its own policy); every other job is untouched.

The batcher is pure queueing: the provider call is the ``embed`` callable it is given, and
:func:`batcher_for` builds one per provider instance from the provider's attributes
(``batch_size``, optional ``max_in_flight`` and ``sort_by_length``).

Queries get a batcher of their own (:func:`query_batcher_for`): concurrent searches hand their
query texts to it, so a loaded server encodes many queries per model call (a call of 16 short
queries costs a few times one query, not 16 times), while a lone query never waits: it lingers
0 s, and company only forms behind a call already running. It calls the provider's
``embed_queries`` where the model has one (E5's ``query:`` prefix; MiniLM's queries jump the
import's queue), else ``embed``.
"""

from __future__ import annotations

import copy
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from knowbase.errors import EmbeddingMismatch

log = logging.getLogger(__name__)

Embed = Callable[[list[str]], np.ndarray]
IDLE_EXIT_S = 5.0  # a dispatcher with nothing to do for this long ends (threads are cheap)
POLL_S = 0.05  # how often a waiting job looks at its cancel flag


@dataclass(eq=False)
class Ticket:
    """One job's request: its texts, the rows answered so far, and how it ended."""

    texts: list[str]
    rows: list[np.ndarray | None] = field(default_factory=list)
    sent: int = 0  # texts handed to a batch so far (a prefix: texts go out in order)
    answered: int = 0
    error: BaseException | None = None
    cancelled: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.rows = [None] * len(self.texts)


@dataclass
class BatcherStats:
    """Counters for tests and benchmarks: provider calls and the texts they carried."""

    calls: int = 0
    texts: int = 0
    largest: int = 0
    # The latest calls only: a long-lived worker must not keep one entry per call forever.
    tickets_per_call: deque[int] = field(default_factory=lambda: deque(maxlen=1024))


class EmbeddingBatcher:
    """Queue texts of many callers into provider calls of up to ``batch_size`` texts.

    >>> b = EmbeddingBatcher(lambda texts: np.ones((len(texts), 2), np.float32), batch_size=4)
    >>> [r.tolist() for r in b.embed(["a", "b"])]
    [[1.0, 1.0], [1.0, 1.0]]
    """

    def __init__(
        self,
        embed: Embed,
        *,
        batch_size: int,
        max_in_flight: int = 1,
        sort_by_length: bool = False,
        linger_s: float = 0.002,
        name: str = "",
    ) -> None:
        if batch_size < 1 or max_in_flight < 1:
            raise ValueError("batch_size and max_in_flight must be >= 1")
        self._embed = embed
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self.sort_by_length = sort_by_length
        self.linger_s = linger_s
        self.name = name
        self.stats = BatcherStats()
        self._queue: deque[Ticket] = deque()
        self._queued_texts = 0
        self._cond = threading.Condition()
        self._threads = 0
        self._idle = 0

    # --- callers ---------------------------------------------------------------------------
    def submit(self, texts: Sequence[str]) -> Ticket:
        """Queue ``texts``; the ticket's ``done`` is set once every row is in (or it failed)."""
        ticket = Ticket(list(texts))
        if not ticket.texts:
            ticket.done.set()
            return ticket
        with self._cond:
            self._queue.append(ticket)
            self._queued_texts += len(ticket.texts)
            self._wake_or_spawn()
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Take the ticket's unsent texts out of the queue; rows still in flight are dropped."""
        with self._cond:
            if ticket.done.is_set():
                return
            ticket.cancelled = True
            if ticket in self._queue:
                self._queue.remove(ticket)
                self._queued_texts -= len(ticket.texts) - ticket.sent
            ticket.done.set()

    def wait(
        self,
        ticket: Ticket,
        check_cancelled: Callable[[], None] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> list[np.ndarray]:
        """Block until the ticket is answered; re-raise its batch's error; obey cancels.
        ``on_progress(answered, total)`` follows the rows answered so far (polled, in memory):
        one big file's chunks go out in many batches, and its import shows them move."""
        told = 0
        polled = check_cancelled is not None or on_progress is not None
        while not ticket.done.wait(POLL_S if polled else None):
            try:
                if check_cancelled is not None:
                    check_cancelled()
            except BaseException:
                self.cancel(ticket)
                raise
            if on_progress is not None and ticket.answered != told:
                told = ticket.answered
                on_progress(told, len(ticket.texts))
        if ticket.error is not None:
            raise _copy(ticket.error)
        if check_cancelled is not None:
            check_cancelled()
        return ticket.rows  # type: ignore[return-value]

    def embed(
        self,
        texts: Sequence[str],
        *,
        check_cancelled: Callable[[], None] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> list[np.ndarray]:
        """One row per text, in order: :meth:`submit` then :meth:`wait`."""
        return self.wait(self.submit(texts), check_cancelled, on_progress)

    # --- dispatchers -----------------------------------------------------------------------
    def _wake_or_spawn(self) -> None:
        """Under the lock, with work queued: an idle dispatcher takes it, or a new one starts
        while fewer than ``max_in_flight`` exist."""
        if self._idle:
            self._cond.notify_all()
        elif self._threads < self.max_in_flight:
            self._threads += 1
            threading.Thread(
                target=self._dispatch, name=f"kb-embed-{self.name}", daemon=True
            ).start()

    def _dispatch(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._idle += 1
                    self._cond.wait_for(lambda: bool(self._queue), IDLE_EXIT_S)
                    self._idle -= 1
                    if not self._queue:
                        self._threads -= 1
                        return
                if self.linger_s and self._queued_texts < self.batch_size:
                    # A moment for the jobs starting alongside this one to add their texts.
                    self._cond.wait_for(
                        lambda: self._queued_texts >= self.batch_size, self.linger_s
                    )
                batch = self._take()
                if self._queue:  # more than one batch waits: use another request slot
                    self._wake_or_spawn()
            if batch:
                self._run(batch)

    def _take(self) -> list[tuple[Ticket, int]]:
        """Up to ``batch_size`` (ticket, text index) pairs from the front of the queue."""
        batch: list[tuple[Ticket, int]] = []
        while self._queue and len(batch) < self.batch_size:
            ticket = self._queue[0]
            take = min(len(ticket.texts) - ticket.sent, self.batch_size - len(batch))
            batch.extend((ticket, i) for i in range(ticket.sent, ticket.sent + take))
            ticket.sent += take
            if ticket.sent == len(ticket.texts):
                self._queue.popleft()
        self._queued_texts -= len(batch)
        return batch

    def _run(self, batch: list[tuple[Ticket, int]]) -> None:
        if self.sort_by_length:  # fewer pad tokens per batch; the rows go back by position
            batch.sort(key=lambda pair: len(pair[0].texts[pair[1]]))
        texts = [t.texts[i] for t, i in batch]
        error: BaseException | None = None
        rows: np.ndarray | None = None
        try:
            rows = self._embed(texts)
            if len(rows) != len(texts):
                raise EmbeddingMismatch(
                    f"{self.name}: asked for {len(texts)} vectors, got {len(rows)}",
                    model_id=self.name,
                    expected=len(texts),
                    got=len(rows),
                )
        except BaseException as exc:  # noqa: BLE001 - handed to the jobs of this batch
            error = exc
        tickets = {id(t): t for t, _ in batch}
        with self._cond:
            self.stats.calls += 1
            self.stats.texts += len(texts)
            self.stats.largest = max(self.stats.largest, len(texts))
            self.stats.tickets_per_call.append(len(tickets))
            if error is not None:
                for ticket in tickets.values():
                    self._fail(ticket, error)
                return
            assert rows is not None
            for (ticket, index), row in zip(batch, rows, strict=True):
                if ticket.done.is_set():
                    continue  # cancelled or failed meanwhile: its rows are not wanted
                ticket.rows[index] = row
                ticket.answered += 1
                if ticket.answered == len(ticket.texts):
                    ticket.done.set()

    def _fail(self, ticket: Ticket, error: BaseException) -> None:
        """Under the lock: end the ticket with ``error`` and drop its unsent texts."""
        if ticket.done.is_set():
            return
        ticket.error = error
        if ticket in self._queue:
            self._queue.remove(ticket)
            self._queued_texts -= len(ticket.texts) - ticket.sent
        ticket.done.set()


def _copy(error: BaseException) -> BaseException:
    """A fresh exception per job: several threads raising one instance share a traceback."""
    try:
        clone = copy.copy(error)
    except Exception:  # an exception type copy cannot rebuild: share the original
        return error
    return clone.with_traceback(None)


_batchers: weakref.WeakKeyDictionary[object, EmbeddingBatcher] = weakref.WeakKeyDictionary()
_batchers_lock = threading.Lock()


def batcher_for(provider: object) -> EmbeddingBatcher:
    """The process's batcher for this provider instance (the registry keeps one per model)."""
    with _batchers_lock:
        batcher = _batchers.get(provider)
        if batcher is None:
            batcher = _batchers[provider] = EmbeddingBatcher(
                _bound_embed(provider),
                batch_size=max(1, int(getattr(provider, "batch_size", 0) or 10)),
                max_in_flight=max(1, int(getattr(provider, "max_in_flight", 1) or 1)),
                sort_by_length=bool(getattr(provider, "sort_by_length", False)),
                name=str(getattr(provider, "model_id", "")),
            )
        return batcher


_query_batchers: weakref.WeakKeyDictionary[object, EmbeddingBatcher] = weakref.WeakKeyDictionary()
QUERY_BATCH_SIZE = 32  # queries per model call at most: short texts, one pass


def query_batcher_for(provider: object) -> EmbeddingBatcher:
    """The process's batcher for this provider's queries: no linger, one call in flight per
    model (the profile's ``max_in_flight`` for an HTTP model)."""
    with _batchers_lock:
        batcher = _query_batchers.get(provider)
        if batcher is None:
            method = "embed_queries" if hasattr(provider, "embed_queries") else "embed"
            batcher = _query_batchers[provider] = EmbeddingBatcher(
                _bound_embed(provider, method),
                batch_size=QUERY_BATCH_SIZE,
                max_in_flight=max(1, int(getattr(provider, "max_in_flight", 1) or 1)),
                linger_s=0.0,
                name=f"{getattr(provider, 'model_id', '')}:queries",
            )
        return batcher


def _bound_embed(provider: object, method: str = "embed") -> Embed:
    # A weak reference: the dispatcher threads must not keep a dropped provider alive.
    ref = weakref.ref(provider)

    def embed(texts: list[str]) -> np.ndarray:
        target = ref()
        if target is None:
            raise RuntimeError("the embedding provider was dropped")
        return getattr(target, method)(texts)  # type: ignore[no-any-return]

    return embed


__all__ = ["BatcherStats", "EmbeddingBatcher", "Ticket", "batcher_for", "query_batcher_for"]
