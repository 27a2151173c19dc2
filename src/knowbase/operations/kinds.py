"""The job kinds of knowbase (§5 table) and their idempotency keys."""

from __future__ import annotations

from collections.abc import Iterable

from knowbase.jobs.model import JobKind

# Interrupted work resumes (DESIGN, turn 3): a job whose process died goes back to the queue
# ("retry") while attempts remain, and only a job that keeps dying fails its item
# ``indexing_interrupted``. Each of these re-runs safely: prepare-root purges a previous
# expansion first, index-documents rebuilds its material in one transaction, process-file
# rewrites its Markdown, reindex-subtree schedules with per-item idempotency keys.
PREPARE_ROOT = JobKind("knowledge.prepare-root", 3, 2.0, 60.0, 600.0, "retry")
INDEX_DOCUMENTS = JobKind("knowledge.index-documents", 3, 1.0, 30.0, 1800.0, "retry")
PROCESS_FILE = JobKind("knowledge.process-file", 2, 2.0, 60.0, 1800.0, "retry")
CHECK_FILE_PROCESSING = JobKind(
    "knowledge.check-file-processing-result", 3, 1.0, 30.0, 120.0, "retry"
)
DELETE_SUBTREE = JobKind("knowledge.delete-subtree", 3, 2.0, 60.0, 600.0, "retry")
REINDEX_SUBTREE = JobKind("knowledge.reindex-subtree", 3, 2.0, 60.0, 600.0, "retry")
# One `kb sync`: re-fetch due pages, then add / reindex / prune in one transaction. Abandoned
# when its process dies: its children (index / delete jobs) resume on their own, and the next
# `kb sync` re-plans what is left (a re-run would reindex again what its children finished).
SYNC_BASE = JobKind("knowledge.sync", 3, 2.0, 60.0, 1800.0, "abandon")
# A model switch (operations/model_switch/): long (a whole base's bodies through a model), and
# resumable — a worker killed mid-build hands it to the next, which keeps the vectors written.
SWITCH_MODEL = JobKind("knowledge.switch-model", 3, 2.0, 60.0, 86400.0, "retry")

ALL_KINDS = (
    PREPARE_ROOT,
    INDEX_DOCUMENTS,
    PROCESS_FILE,
    CHECK_FILE_PROCESSING,
    DELETE_SUBTREE,
    REINDEX_SUBTREE,
    SYNC_BASE,
    SWITCH_MODEL,
)
ITEM_KINDS = {
    PREPARE_ROOT.name,
    INDEX_DOCUMENTS.name,
    PROCESS_FILE.name,
    CHECK_FILE_PROCESSING.name,
}


def prepare_key(base_id: str, item_id: str) -> str:
    return f"knowledge:{base_id}:{item_id}:prepare"


def index_key(base_id: str, item_id: str, parent_job_id: str | None = None) -> str:
    key = f"knowledge:{base_id}:{item_id}:index"
    return f"{key}:{parent_job_id}" if parent_job_id else key


def process_key(base_id: str, item_id: str) -> str:
    return f"knowledge:{base_id}:{item_id}:process"


def delete_key(base_id: str, root_ids: Iterable[str]) -> str:
    return f"knowledge:{base_id}:{','.join(sorted(root_ids))}:delete"


def reindex_key(base_id: str, root_ids: Iterable[str]) -> str:
    return f"knowledge:{base_id}:{','.join(sorted(root_ids))}:reindex"
