"""Issue 42: an import counted in chunks (``operations/indexing/progress.py``) and the runs an
index batch embeds and writes in (``index_batch._embed_runs``)."""

from __future__ import annotations

from knowbase.jobs.model import Job
from knowbase.operations.add.inputs import AddInput
from knowbase.operations.indexing.index_batch import EMBED_RUN_CHUNKS, _embed_runs, _Entry
from knowbase.operations.indexing.progress import ChunkProgress, chunk_progress
from knowbase.operations.kinds import INDEX_DOCUMENTS


def _job(status: str, chunks: int | None = None, kind: str = INDEX_DOCUMENTS.name) -> Job:
    details = {} if chunks is None else {"chunks": chunks}
    return Job(
        id=f"{status}-{chunks}", kind=kind, queue="q", payload={}, status=status,
        idempotency_key=None, parent_id=None, attempts=1, max_attempts=3, run_at=0,
        locked_by=None, lease_until=None, cancel_requested=False, progress_stage=None,
        progress_percent=None, progress_details=details,
    )  # fmt: skip


def test_chunks_are_counted_from_the_jobs_of_a_run() -> None:
    jobs = [
        _job("completed", 10),
        _job("completed", 30),
        _job("running", 20),  # chunked, embedding
        _job("pending"),  # not read yet
        _job("failed", 7),  # its chunks are not work left
        _job("completed", 99, kind="knowledge.prepare-root"),  # another kind: ignored
    ]
    progress = chunk_progress(jobs)
    assert progress == ChunkProgress(
        files=5, files_chunked=3, files_done=3, chunks_known=60, chunks_done=40, files_failed=1
    )
    # the file not chunked yet counts at the mean so far (60 / 3); the failed one not at all
    assert progress.estimated_total() == 80
    assert progress.estimated_total(files_total=7) == 60 + 3 * 20
    assert progress.to_dict()["chunks_estimated"] == 80


def test_nothing_chunked_yet_estimates_nothing() -> None:
    assert chunk_progress([_job("pending"), _job("running")]).estimated_total(10) == 0


def test_the_first_file_is_embedded_alone_then_runs_of_chunks() -> None:
    entries = []
    for n in (5, 40, 30, 10, EMBED_RUN_CHUNKS + 5, 3):
        entry = _Entry(ctx=None)  # type: ignore[arg-type]
        entry.chunks = [object()] * n
        entries.append(entry)
    runs = [[len(e.chunks) for e in run] for run in _embed_runs(entries)]
    assert runs == [[5], [40], [30, 10], [EMBED_RUN_CHUNKS + 5], [3]]
    assert sum(len(r) for r in runs) == len(entries)


def test_one_big_file_moves_the_chunk_count_while_it_is_embedded(kb, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A single file of hundreds of chunks: chunks done move while it is embedded (``embedded``
    noted as the model answers, written by the heartbeat), not only when the file is written.
    Before: 0 until the file completed, then all at once."""
    import threading
    import time

    kb.rt.jobs.heartbeat_s = 0.3  # the heartbeat writes noted progress (5 s in a real run)
    base = kb.create_base(
        "big", embedding_model_id="hash:d64?delay=0.1", file_processor_id=None, chunk_size=64,
        chunk_overlap=0,
    )  # fmt: skip
    big = tmp_path / "big.txt"
    big.write_text(
        "\n\n".join(
            f"Paragraph {n} says walrus number {n} travels by train." * 6 for n in range(200)
        ),
        "utf-8",
    )
    result = kb.add(base.id, [AddInput.file(big)])
    runner = threading.Thread(target=kb.wait, args=(result.job_ids,), daemon=True)
    runner.start()
    seen: list[tuple[int, int, int]] = []
    while runner.is_alive():
        p = kb.activity.chunk_progress(result.job_ids)
        seen.append((p.files_done, p.chunks_done, p.chunks_known))
        time.sleep(0.1)
    runner.join()
    known = max(k for _, _, k in seen)
    assert known > 100
    moving = {d for f, d, k in seen if f == 0 and 0 < d < k}
    assert len(moving) >= 2, seen[::10]  # counted up while the one file was embedded
