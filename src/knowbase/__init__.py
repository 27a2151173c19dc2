"""knowbase: local-first knowledge-base engine.

The public face: the facade, what it takes and returns, and the error hierarchy::

    from knowbase import Knowledge, AddInput, load_settings

    with Knowledge(load_settings()) as kb:
        base = kb.create_base("docs")
        kb.add(base.id, [AddInput.directory("notes")], wait=True)
        print(kb.search(base.id, "vpn key").results)

Besides the facade (``Knowledge``) and its settings, the face exports the data the facade
takes and returns (``AddInput``, ``Base``, ``Item``, ``Job``, ``SearchResponse``…), the base
settings' declaration, the limits it enforces on what it takes and the rules it applies to it
(a file name, a URL, a local path, an add input), so that a caller, and every surface in
``interfaces/``, can check a request before handing it over. Surfaces import from here, from
``knowbase.service`` and ``knowbase.errors`` and ``knowbase.settings``, and from nowhere else
(``tests/test_house_layering.py``).

Everything but the errors loads on first use (PEP 562), each name from its own module only, so
``import knowbase`` and ``kb --help`` stay light; the errors are plain classes and load at once.
"""

from __future__ import annotations

import sys
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
    from knowbase.catalog.base_settings import SETTINGS as BASE_SETTINGS
    from knowbase.catalog.base_settings import BaseSetting
    from knowbase.catalog.models import OPEN, Base, Item, Principal
    from knowbase.conflict_strategy import DEFAULT_STRATEGY, STRATEGIES, ConflictStrategy
    from knowbase.files import sanitize_filename
    from knowbase.jobs.model import Job
    from knowbase.operations.add.inputs import (
        BATCH_MAX,
        NOTE_MAX_CHARS,
        AddInput,
        resolve_local,
    )
    from knowbase.operations.add.inputs import validate as validate_input
    from knowbase.operations.add.workflow import AddResult
    from knowbase.pipeline.readers import is_readable
    from knowbase.pipeline.readers.formats import FORMATS, TEXT_NAMES
    from knowbase.pipeline.sources.ssrf import check_url, parse_url
    from knowbase.providers.base import MAX_DIMENSIONS
    from knowbase.search.search import MAX_QUERY_CHARS, SearchResponse, SearchResult
    from knowbase.search.snippet import mark_spans, passage
    from knowbase.service import Knowledge
    from knowbase.settings import Settings, load_settings

# name -> the module that defines it (``module:name`` where the face renames it); resolved on
# first attribute access, so each name costs its own module's import and nothing more.
_LAZY = {
    # the facade and its settings
    "Knowledge": "knowbase.service",
    "Settings": "knowbase.settings",
    "load_settings": "knowbase.settings",
    # what the facade takes and returns
    "AddInput": "knowbase.operations.add.inputs",
    "AddResult": "knowbase.operations.add.workflow",
    "ConflictStrategy": "knowbase.conflict_strategy",
    "STRATEGIES": "knowbase.conflict_strategy",
    "DEFAULT_STRATEGY": "knowbase.conflict_strategy",
    "Base": "knowbase.catalog.models",
    "Item": "knowbase.catalog.models",
    "Principal": "knowbase.catalog.models",
    "OPEN": "knowbase.catalog.models",
    "Job": "knowbase.jobs.model",
    "SearchResponse": "knowbase.search.search",
    "SearchResult": "knowbase.search.search",
    # the one declaration of a base's settings (``create_base(**settings)``, ``Base`` fields)
    "BaseSetting": "knowbase.catalog.base_settings",
    "BASE_SETTINGS": "knowbase.catalog.base_settings:SETTINGS",
    # the limits the facade enforces on what it takes
    "BATCH_MAX": "knowbase.operations.add.inputs",
    "NOTE_MAX_CHARS": "knowbase.operations.add.inputs",
    "MAX_QUERY_CHARS": "knowbase.search.search",
    "MAX_DIMENSIONS": "knowbase.providers.base",
    # the rules it applies to what it takes, for a caller to check a request first
    "validate_input": "knowbase.operations.add.inputs:validate",
    "resolve_local": "knowbase.operations.add.inputs",
    "sanitize_filename": "knowbase.files",
    "is_readable": "knowbase.pipeline.readers",
    "parse_url": "knowbase.pipeline.sources.ssrf",
    "check_url": "knowbase.pipeline.sources.ssrf",
    # the files it reads, and where a hit's text matches the query (for showing results)
    "FORMATS": "knowbase.pipeline.readers.formats",
    "TEXT_NAMES": "knowbase.pipeline.readers.formats",
    "mark_spans": "knowbase.search.snippet",
    "passage": "knowbase.search.snippet",
}

__all__ = [
    "Knowledge",
    "Settings",
    "load_settings",
    "AddInput",
    "AddResult",
    "ConflictStrategy",
    "STRATEGIES",
    "DEFAULT_STRATEGY",
    "Base",
    "Item",
    "Principal",
    "OPEN",
    "Job",
    "SearchResponse",
    "SearchResult",
    "BaseSetting",
    "BASE_SETTINGS",
    "BATCH_MAX",
    "NOTE_MAX_CHARS",
    "MAX_QUERY_CHARS",
    "MAX_DIMENSIONS",
    "validate_input",
    "resolve_local",
    "sanitize_filename",
    "is_readable",
    "parse_url",
    "check_url",
    "FORMATS",
    "TEXT_NAMES",
    "mark_spans",
    "passage",
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
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'knowbase' has no attribute {name!r}")
    module, _, attribute = where.partition(":")
    __import__(module)  # not importlib.import_module, which ``python -X importtime`` does not list
    value = getattr(sys.modules[module], attribute or name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
