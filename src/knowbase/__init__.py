"""knowbase: local-first knowledge-base engine.

The public face: the facade, its inputs and settings, and the error hierarchy::

    from knowbase import Knowledge, AddInput, load_settings

    with Knowledge(load_settings()) as kb:
        base = kb.create_base("docs")
        kb.add(base.id, [AddInput.directory("notes")], wait=True)
        print(kb.search(base.id, "vpn key").results)

The facade, inputs and settings load on first use (PEP 562), so ``import knowbase`` and
``kb --help`` stay light; the errors are plain classes and load at once.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from knowbase.errors import (
    ArchiveInvalid,
    ArchiveUnsafe,
    BaseBusy,
    BaseExists,
    BaseFailed,
    CatalogRevisionUnknown,
    CatalogUnavailable,
    Conflict,
    CopyVerificationFailed,
    DatabaseBusy,
    DatabaseCannotOpen,
    DatabaseIOError,
    DiskFull,
    EmbeddingMismatch,
    EmbeddingModelChanged,
    EmptyContent,
    EncryptedFile,
    FileExists,
    FileSystemError,
    FileTooLarge,
    IndexingInterrupted,
    InvalidFilter,
    InvalidInput,
    InvalidPattern,
    InvalidUrl,
    ItemFailed,
    KeyExists,
    KeyNotAllowed,
    KnowbaseError,
    MissingExtra,
    ModelChecksumMismatch,
    NoIndexableFiles,
    NoSearchableTokens,
    NoTextExtracted,
    NotFound,
    OriginMissing,
    ProviderError,
    ProviderUnavailable,
    RouteWithoutScope,
    Unauthorized,
    Unavailable,
    UndecodableName,
    UnreadableFile,
    UnsafePath,
    UnsupportedFileType,
    VectorStoreUnavailable,
)

if TYPE_CHECKING:
    from knowbase.operations.add.inputs import AddInput
    from knowbase.service import Knowledge
    from knowbase.settings import Settings, load_settings

# name -> the module that defines it; resolved on first attribute access.
_LAZY = {
    "Knowledge": "knowbase.service",
    "AddInput": "knowbase.operations.add.inputs",
    "Settings": "knowbase.settings",
    "load_settings": "knowbase.settings",
}

__all__ = [
    "AddInput",
    "Knowledge",
    "Settings",
    "load_settings",
    "KnowbaseError",
    "CopyVerificationFailed",
    "DatabaseBusy",
    "DatabaseCannotOpen",
    "DatabaseIOError",
    "InvalidInput",
    "UnsafePath",
    "EmptyContent",
    "NoSearchableTokens",
    "UnsupportedFileType",
    "InvalidUrl",
    "InvalidPattern",
    "ArchiveInvalid",
    "ArchiveUnsafe",
    "InvalidFilter",
    "UndecodableName",
    "Unauthorized",
    "KeyNotAllowed",
    "NotFound",
    "Conflict",
    "BaseFailed",
    "FileExists",
    "BaseExists",
    "CatalogRevisionUnknown",
    "KeyExists",
    "BaseBusy",
    "RouteWithoutScope",
    "Unavailable",
    "VectorStoreUnavailable",
    "CatalogUnavailable",
    "FileSystemError",
    "ProviderUnavailable",
    "EmbeddingModelChanged",
    "MissingExtra",
    "ModelChecksumMismatch",
    "DiskFull",
    "ProviderError",
    "EmbeddingMismatch",
    "ItemFailed",
    "NoTextExtracted",
    "UnreadableFile",
    "FileTooLarge",
    "EncryptedFile",
    "NoIndexableFiles",
    "OriginMissing",
    "IndexingInterrupted",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'knowbase' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
