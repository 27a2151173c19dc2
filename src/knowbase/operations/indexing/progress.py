"""How far an import got, counted in chunks (issue 42): on a base with an embedding model the
work is embedding chunks, and files differ a thousandfold in how many they hold, so a count of
files stands still for minutes and an estimate made from it swings.

Every index job says how many chunks its file made once it is chunked (``chunks`` in its
progress details: noted while it runs, written by the heartbeat, kept by its completion). A job
that completed has embedded and written all of them. :func:`chunk_progress` adds that up over
any set of jobs (one add's job tree, or a base's current run); the surfaces estimate from it.
A job still embedding says how many of its chunks are embedded so far (``embedded``, noted
as the model answers, written by the heartbeat): one file of thousands of chunks moves the
count while it is embedded, not only once it is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from knowbase.jobs.model import Job
from knowbase.operations.kinds import INDEX_DOCUMENTS


@dataclass(frozen=True)
class ChunkProgress:
    """Index jobs of a run and their chunks.

    ``files``: index jobs seen; ``files_chunked``: those whose chunk count is known (failed ones
    left out); ``files_done``: ended (completed or failed); ``chunks_known``: the chunks of the
    files chunked so far; ``chunks_done``: the chunks of completed files (embedded and written)
    and those embedded so far of files still running;
    ``files_failed``: failed or cancelled (no work left in them).
    """

    files: int = 0
    files_chunked: int = 0
    files_done: int = 0
    chunks_known: int = 0
    chunks_done: int = 0
    files_failed: int = 0

    def estimated_total(self, files_total: int | None = None) -> int:
        """The run's chunks: those known, plus the files not chunked yet at the mean so far.

        >>> ChunkProgress(files=4, files_chunked=2, chunks_known=30).estimated_total()
        60
        """
        files = max(files_total or 0, self.files)
        if not self.files_chunked:
            return self.chunks_known
        rest = max(files - self.files_chunked - self.files_failed, 0)
        return self.chunks_known + round(rest * self.chunks_known / self.files_chunked)

    def to_dict(self, files_total: int | None = None) -> dict[str, int]:
        return {**asdict(self), "chunks_estimated": self.estimated_total(files_total)}


def chunk_progress(jobs: Iterable[Job]) -> ChunkProgress:
    """Add up the index jobs among ``jobs`` (other kinds are ignored)."""
    files = chunked = done = known = finished = failed = 0
    for job in jobs:
        if job.kind != INDEX_DOCUMENTS.name:
            continue
        files += 1
        ended = job.status in ("completed", "failed", "cancelled")
        done += ended
        if job.status in ("failed", "cancelled"):
            failed += 1
            continue
        chunks = job.progress_details.get("chunks")
        if isinstance(chunks, int):
            chunked += 1
            known += chunks
            if job.status == "completed":
                finished += chunks
            else:
                embedded = job.progress_details.get("embedded")
                finished += min(embedded, chunks) if isinstance(embedded, int) else 0
    return ChunkProgress(files, chunked, done, known, finished, failed)


__all__ = ["ChunkProgress", "chunk_progress"]
