"""What a caller asks to add, validated before anything is written."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from knowbase.errors import (
    EmptyContent,
    InvalidInput,
    InvalidUrl,
    OriginMissing,
    UndecodableName,
)
from knowbase.pipeline.sources.directory import is_decodable, printable

NOTE_MAX_CHARS = 1_000_000
BATCH_MAX = 100
ItemType = Literal["file", "url", "note", "directory", "sitemap"]


@dataclass(frozen=True)
class AddInput:
    """One item to add. ``origin`` is kept for re-acquisition (None for uploads)."""

    type: ItemType
    source: str = ""  # display name; derived when empty
    path: str | None = None  # file / directory (absolute)
    url: str | None = None  # url / sitemap
    content: str | None = None  # note
    title: str | None = None  # note title
    origin: str | None = None  # absolute path or URL to re-acquire from
    indexed_path: str | None = None  # restore: processed .md to carry over
    snapshot_path: str | None = None  # restore: captured url snapshot
    # labels (catalog/labels.py): a folder's apply to everything under it
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # ``kb add --as-text GLOB``: files matching one are read as text whatever they hold
    as_text: tuple[str, ...] = ()

    def with_as_text(self, globs: Iterable[str]) -> AddInput:
        """This input with files matching ``globs`` (name or path below a folder) read as text."""
        return replace(self, as_text=tuple(globs))

    def forces_text(self) -> bool:
        """Whether this file input is itself named by one of its ``as_text`` globs."""
        import fnmatch

        name = Path(self.path or "").name
        return any(fnmatch.fnmatchcase(name, g) for g in self.as_text)

    def with_labels(
        self, tags: Iterable[str] | None = None, metadata: Mapping[str, Any] | None = None
    ) -> AddInput:
        """This input with tags and metadata to store on its item."""
        return replace(self, tags=tuple(tags or ()), metadata=dict(metadata or {}))

    @staticmethod
    def file(path: str | Path, *, source: str | None = None, keep_origin: bool = True) -> AddInput:
        p = resolve_local(path)
        return AddInput(
            "file", source or p.name, path=str(p), origin=str(p) if keep_origin else None
        )

    @staticmethod
    def directory(path: str | Path) -> AddInput:
        p = resolve_local(path)
        return AddInput("directory", str(p), path=str(p), origin=str(p))

    @staticmethod
    def web(url: str) -> AddInput:
        url = url.strip()
        kind: ItemType = "sitemap" if url.lower().split("?")[0].endswith(".xml") else "url"
        return AddInput(kind, url, url=url, origin=url)

    @staticmethod
    def note(content: str, *, title: str | None = None) -> AddInput:
        return AddInput("note", note_source(content, title), content=content, title=title)


def resolve_local(path: str | Path) -> Path:
    """The absolute, resolved form of a local path; InvalidInput for one that cannot be used
    (a symlink loop, a NUL byte, an unreadable parent) and UndecodableName for a name that is
    not UTF-8 (it could be neither stored nor shown)."""
    try:
        p = Path(path).expanduser().resolve()
    except (ValueError, OSError, RuntimeError) as exc:  # RuntimeError: a loop (Python < 3.13)
        shown = printable(str(path))
        raise InvalidInput(f"not a usable path: {printable(str(exc))}", path=shown) from exc
    check_name(str(p))
    return p


def check_name(path: str) -> None:
    """UndecodableName when ``path`` holds bytes that are not UTF-8 (surrogate escapes)."""
    if not is_decodable(path):
        shown = printable(path)
        raise UndecodableName(f"the name is not valid UTF-8: {shown}", path=shown)


def note_source(content: str, title: str | None) -> str:
    """title, else the first non-empty line (≤ 80 chars), else ``Untitled note`` (§8 kb_manage)."""
    if title and title.strip():
        return title.strip()
    first = next((ln.strip() for ln in (content or "").splitlines() if ln.strip()), "")
    return first[:80] or "Untitled note"


def validate(inp: AddInput) -> AddInput:
    """Refuse bad input with a clear code before any write (paths, types, urls, note text)."""
    from knowbase.pipeline.readers import is_supported
    from knowbase.pipeline.readers.content import text_verdict

    if inp.type == "file":
        if not inp.path or not os.path.isabs(inp.path):
            raise InvalidInput("a file needs an absolute path", path=inp.path)
        check_name(inp.path)
        p = Path(inp.path)
        if not p.is_file():
            raise OriginMissing(f"file not found: {inp.path}", path=inp.path)
        if not os.access(p, os.R_OK):
            raise OriginMissing(f"file cannot be read (permission denied): {inp.path}",
                                path=inp.path)  # fmt: skip
        verdict = None if is_supported(p.name) or inp.forces_text() else text_verdict(p)
        if verdict is not None:
            from knowbase.errors import UnsupportedFileType

            raise UnsupportedFileType(
                f"unsupported knowledge file type: {p.suffix or p.name} (no reader for its "
                f"name, and its content is not text: it {verdict}); "
                "kb add --as-text GLOB reads it as text anyway",
                path=inp.path,
                reason=verdict,
            )
    elif inp.type == "directory":
        if not inp.path or not os.path.isabs(inp.path):
            raise InvalidInput("a directory needs an absolute path", path=inp.path)
        check_name(inp.path)
        if not Path(inp.path).is_dir():
            raise OriginMissing(f"directory not found: {inp.path}", path=inp.path)
    elif inp.type in ("url", "sitemap"):
        url = (inp.url or "").strip()
        if not url.lower().startswith(("http://", "https://")):
            raise InvalidUrl(f"invalid knowledge url {url!r}: only http and https", url=url)
    elif inp.type == "note":
        if not inp.content or not inp.content.strip():
            raise EmptyContent("a note needs some text")
        if len(inp.content) > NOTE_MAX_CHARS:
            raise InvalidInput(
                f"a note is limited to {NOTE_MAX_CHARS:,} characters", length=len(inp.content)
            )
    else:
        raise InvalidInput(f"unsupported knowledge item type {inp.type!r}")
    if not (inp.source or "").strip():
        raise InvalidInput("an item needs a non-empty source")
    if inp.tags or inp.metadata:
        from knowbase.catalog.labels import normalize_metadata, normalize_tags

        return replace(
            inp,
            tags=tuple(normalize_tags(inp.tags)),
            metadata=normalize_metadata(inp.metadata),
        )
    return inp
