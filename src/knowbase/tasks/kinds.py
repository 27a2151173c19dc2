"""The job kinds of knowbase (§5 table) and their idempotency keys."""

from __future__ import annotations

from collections.abc import Iterable

from knowbase.jobs.model import JobKind

PREPARE_ROOT = JobKind("knowledge.prepare-root", 3, 2.0, 60.0, 600.0, "abandon")
INDEX_DOCUMENTS = JobKind("knowledge.index-documents", 3, 1.0, 30.0, 1800.0, "abandon")
PROCESS_FILE = JobKind("knowledge.process-file", 2, 2.0, 60.0, 1800.0, "abandon")
CHECK_FILE_PROCESSING = JobKind(
    "knowledge.check-file-processing-result", 3, 1.0, 30.0, 120.0, "abandon"
)
DELETE_SUBTREE = JobKind("knowledge.delete-subtree", 3, 2.0, 60.0, 600.0, "retry")
REINDEX_SUBTREE = JobKind("knowledge.reindex-subtree", 3, 2.0, 60.0, 600.0, "abandon")
# One `kb sync`: re-fetch due pages, then add / reindex / prune in one transaction.
SYNC_BASE = JobKind("knowledge.sync", 3, 2.0, 60.0, 1800.0, "abandon")
# A model switch (ingestion/model_switch.py): long (a whole base's bodies through a model), and
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
