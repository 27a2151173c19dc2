"""The base's raw/ tree (§2): :mod:`~knowbase.files.naming` (safe relative paths, ``_N``
naming, reservation, slugs) and :mod:`~knowbase.files.tree` (the files on disk).

Callers import from ``knowbase.files``; the two modules are the concepts.
"""

from knowbase.files.naming import (
    MAX_NAME_BYTES,
    RESERVED_DIR,
    artifact_path,
    choose_directory_prefix,
    host_relative_check,
    name_candidates,
    note_snapshot_slug,
    reserve_relative_path,
    sanitize_filename,
    url_snapshot_slug,
    validate_relative_path,
)
from knowbase.files.tree import BaseStorage, list_orphan_base_dirs, reserve_free_path

__all__ = [
    "MAX_NAME_BYTES",
    "RESERVED_DIR",
    "BaseStorage",
    "artifact_path",
    "choose_directory_prefix",
    "host_relative_check",
    "list_orphan_base_dirs",
    "name_candidates",
    "note_snapshot_slug",
    "reserve_free_path",
    "reserve_relative_path",
    "sanitize_filename",
    "url_snapshot_slug",
    "validate_relative_path",
]
