"""The job kinds of origin-spec §5 (plus our ``process-file``, DESIGN "File processing"), as
:class:`JobKind` values, and the per-base queue name. Handlers live in ``knowbase.tasks``."""

from __future__ import annotations

from knowbase.jobs.model import JobKind

MIN = 60.0

PREPARE_ROOT = JobKind("knowledge.prepare-root", 3, 2, 60, 10 * MIN, "abandon")
INDEX_DOCUMENTS = JobKind("knowledge.index-documents", 3, 1, 30, 30 * MIN, "abandon")
CHECK_FILE_PROCESSING = JobKind(
    "knowledge.check-file-processing-result", 3, 1, 30, 2 * MIN, "abandon"
)
DELETE_SUBTREE = JobKind("knowledge.delete-subtree", 3, 2, 60, 10 * MIN, "retry")
REINDEX_SUBTREE = JobKind("knowledge.reindex-subtree", 3, 2, 60, 10 * MIN, "abandon")
PROCESS_FILE = JobKind("knowledge.process-file", 2, 2, 60, 30 * MIN, "abandon")

ALL_KINDS = (
    PREPARE_ROOT,
    INDEX_DOCUMENTS,
    CHECK_FILE_PROCESSING,
    DELETE_SUBTREE,
    REINDEX_SUBTREE,
    PROCESS_FILE,
)

#: Prefix of every knowledge job kind (``list_jobs(kind_prefix=KNOWLEDGE_PREFIX)``).
KNOWLEDGE_PREFIX = "knowledge."


def queue_for_base(base_id: str) -> str:
    """Spec §5: one queue per base, ``base.<baseId>`` (5 running jobs per queue)."""
    return f"base.{base_id}"


__all__ = [
    "ALL_KINDS",
    "CHECK_FILE_PROCESSING",
    "DELETE_SUBTREE",
    "INDEX_DOCUMENTS",
    "KNOWLEDGE_PREFIX",
    "PREPARE_ROOT",
    "PROCESS_FILE",
    "REINDEX_SUBTREE",
    "queue_for_base",
]
