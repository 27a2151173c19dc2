"""Names in a base's raw/ tree: safe relative paths, ``_N`` naming, reservation, slugs (§2.2, §2.3).

Stored relative paths are read as POSIX everywhere (``\\`` and ``:`` are ordinary filename
characters); the host check then makes sure the host's own path rules cannot climb out of raw/
either. Everything here is a pure function of strings; :mod:`knowbase.files.tree` touches the
disk.
"""

from __future__ import annotations

import ntpath
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import PurePath, PureWindowsPath
from types import ModuleType
from urllib.parse import unquote, urlsplit

from knowbase.errors import UnsafePath

RESERVED_DIR = ".kb"
MATERIAL_DIR = "raw"
INDEX_FILE = "index.sqlite"
# The spec caps names at 255 characters; ext4/APFS/NTFS-on-Linux cap at 255 *bytes*, so a long
# CJK name that fits the character cap still fails with ENAMETOOLONG. Capping bytes covers both.
MAX_NAME_BYTES = 255
SLUG_CHARS = 80

_ILLEGAL_CHARS = re.compile(r'[<>:"/\\|?*\x00-\x1f]')
_DEVICE_NAME = re.compile(r"^(CON|PRN|AUX|NUL|COM[1-9]|LPT[1-9])(\.|$)", re.IGNORECASE)
_H1 = re.compile(r"^ {0,3}#[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_LINES = re.compile(r"\r\n|\r|\n")


# --- path safety (§2.3) ----------------------------------------------------------------------
def resolve_segments(rel: str) -> list[str] | None:
    """POSIX segments of ``rel`` after ``.``/``..``; None when it climbs above the root."""
    out: list[str] = []
    for seg in rel.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(seg)
    return out


def validate_relative_path(rel: str) -> str:
    """Check a raw/-relative path against §2.3 and return it unchanged (Concept IDs are exact).

    Rejected with :class:`UnsafePath`: empty, NUL, a leading ``/``, anything that resolves
    outside raw/ or to raw/ itself (``../x``, ``a/..``, ``.``), and anything whose first resolved
    segment is ``.kb``. ``.kb\\x`` and ``a\\b.pdf`` are single legal names.

    >>> validate_relative_path("docs/a.pdf")
    'docs/a.pdf'
    """
    if not isinstance(rel, str) or rel == "":
        raise UnsafePath("relative path is empty", path=rel)
    if "\x00" in rel:
        raise UnsafePath("relative path contains a NUL byte", path=rel)
    if rel.startswith("/"):
        raise UnsafePath(f"relative path must not be absolute: {rel!r}", path=rel)
    segments = resolve_segments(rel)
    if segments is None:
        raise UnsafePath(f"relative path escapes the material root: {rel!r}", path=rel)
    if not segments:
        raise UnsafePath(f"relative path resolves to the material root itself: {rel!r}", path=rel)
    if segments[0] == RESERVED_DIR:
        raise UnsafePath(f"relative path is reserved ({RESERVED_DIR}): {rel!r}", path=rel)
    return rel


def host_relative_check(root: PurePath, rel: str) -> None:
    """Refuse ``rel`` when the host flavour of ``root`` would take it outside ``root`` (§2.3.3).

    A ``PureWindowsPath`` root reads ``\\`` as a separator and drive letters as absolute, so
    ``..\\outside.pdf`` and ``a\\..`` are refused there while ``a\\b\\..\\c.pdf`` is fine.
    """
    mod: ModuleType = ntpath if isinstance(root, PureWindowsPath) else posixpath
    base = mod.normpath(str(root))
    target = mod.normpath(mod.join(base, rel))
    prefix = base if base.endswith(mod.sep) else base + mod.sep
    # Windows compares case-insensitively; normcase is the identity on POSIX.
    inside = mod.normcase(target).startswith(mod.normcase(prefix))
    if not inside or mod.normcase(target) == mod.normcase(base):
        raise UnsafePath(
            f"relative path escapes the material root on this platform: {rel!r}", path=rel
        )


# --- names (§2.2) ----------------------------------------------------------------------------
def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _cut_bytes(text: str, limit: int) -> str:
    """Longest prefix of ``text`` whose UTF-8 form fits ``limit`` bytes (never splits a char)."""
    if _utf8_len(text) <= limit:
        return text
    out, used = [], 0
    for ch in text:
        used += _utf8_len(ch)
        if used > limit:
            break
        out.append(ch)
    return "".join(out)


def sanitize_filename(name: str) -> str:
    """Make ``name`` a portable filename (§2.2): ``<>:"/\\|?*`` and controls become ``_``,
    device names (CON, COM1…) get a ``_`` prefix, trailing dots/spaces go, ≤ 255 bytes
    (the stem is cut, the extension kept, as :func:`name_candidates` does), and an empty
    result is ``untitled``.

    >>> sanitize_filename('a/b: c. ')
    'a_b_ c'
    >>> sanitize_filename('x' * 300 + '.md')[-6:], len(sanitize_filename('x' * 300 + '.md'))
    ('xxx.md', 255)
    """
    text = _ILLEGAL_CHARS.sub("_", name).rstrip(" .")
    if _DEVICE_NAME.match(text):
        text = "_" + text
    if _utf8_len(text) > MAX_NAME_BYTES:
        stem, ext = posixpath.splitext(text)
        text = _fit(stem.rstrip(" ."), "", ext)
    text = text.rstrip(" .")
    return text or "untitled"


def _fit(stem: str, suffix: str, ext: str) -> str:
    budget = MAX_NAME_BYTES - _utf8_len(suffix) - _utf8_len(ext)
    if budget < 1 and ext:
        # An absurd extension leaves no room for a stem: treat the whole name as the stem.
        stem, ext = stem + ext, ""
        budget = MAX_NAME_BYTES - _utf8_len(suffix)
    return _cut_bytes(stem, budget) + suffix + ext


def name_candidates(name: str, *, is_dir_prefix: bool = False) -> Iterator[str]:
    """Yield ``name``, then ``_1``, ``_2``… variants inserted before the last extension.

    Only the last ``/`` segment changes (``docs/a.md → docs/a_1.md``); ``a.tar.gz → a.tar_1.gz``.
    A directory prefix keeps its dots (``report.v2 → report.v2_1``). The stem is cut so the
    filename stays ≤ 255 bytes; trailing dots/spaces are stripped from the extension part.
    """
    head, sep, last = name.rpartition("/")
    if is_dir_prefix:
        stem, ext = last, ""
    else:
        stem, ext = posixpath.splitext(last)
        ext = ext.rstrip(" .")
    yield name if _utf8_len(last) <= MAX_NAME_BYTES else head + sep + _fit(stem, "", ext)
    n = 1
    while True:
        yield head + sep + _fit(stem, f"_{n}", ext)
        n += 1


def artifact_path(rel: str) -> str:
    """The processed-Markdown sibling: ``docs/a.pdf → docs/a.md`` (``.env → .env.md``)."""
    head, sep, last = rel.rpartition("/")
    return f"{head}{sep}{posixpath.splitext(last)[0]}.md"


def _first_free(candidates: Iterator[str], is_free: Callable[[str], bool]) -> str:
    for cand in candidates:
        try:
            validate_relative_path(cand)
        except UnsafePath:
            # A bare top-level ".kb" only collides with the reserved dir: treat it as taken and
            # move on to ".kb_1". Anything else unsafe stays unsafe for every suffix.
            segments = resolve_segments(cand) if "\x00" not in cand else None
            if segments == [RESERVED_DIR] and not cand.startswith("/"):
                continue
            raise
        if is_free(cand):
            return cand
    raise AssertionError("name_candidates is infinite")  # pragma: no cover


def reserve_relative_path(name: str, reserved: set[str], *, reserve_artifact: bool = False) -> str:
    """Take the first candidate of ``name`` free in ``reserved``, add it there and return it.

    With ``reserve_artifact`` its ``<stem>.md`` sibling must be free too and is reserved as
    well, so ``x.pdf`` becomes ``x_1.pdf`` when ``x.md`` is taken (and the reverse).
    Raises :class:`UnsafePath` when ``name`` cannot be made safe by a suffix.
    """

    def is_free(cand: str) -> bool:
        if cand in reserved:
            return False
        if reserve_artifact:
            art = artifact_path(cand)
            if art in reserved or resolve_segments(art) == [RESERVED_DIR]:
                return False
        return True

    chosen = _first_free(name_candidates(name), is_free)
    reserved.add(chosen)
    if reserve_artifact:
        reserved.add(validate_relative_path(artifact_path(chosen)))
    return chosen


def _first_segment(rel: str) -> str:
    segments = resolve_segments(rel)
    return segments[0] if segments else rel.split("/", 1)[0]


def choose_directory_prefix(
    source: str, reserved: Iterable[str], *, pathmod: ModuleType = os.path
) -> str:
    """The top-level raw/ folder for a directory import (§2.2 "Directory prefix").

    The basename of the resolved ``source`` (a filesystem root becomes its drive letter, or
    ``root``), deduped case-sensitively with ``_N`` against the first segment of every reserved
    path. ``reserved`` must leave out the container itself. ``pathmod`` is the host flavour
    (``ntpath`` to plan for Windows sources).
    """
    resolved = pathmod.abspath(source)
    base = pathmod.basename(pathmod.normpath(resolved))
    if not base:
        drive = pathmod.splitdrive(resolved)[0]
        base = drive[0] if re.fullmatch(r"[A-Za-z]:", drive) else "root"
    taken = {_first_segment(p) for p in reserved}
    return _first_free(name_candidates(base, is_dir_prefix=True), lambda c: c not in taken)


def _slug(text: str) -> str | None:
    slug = sanitize_filename(text[:SLUG_CHARS].strip())
    return None if slug == "untitled" else slug


def _first_nonblank_line(text: str) -> str:
    return next((line for line in _LINES.split(text) if line.strip()), "")


def note_snapshot_slug(source: str) -> str:
    """Snapshot name (without ``.md``) of a note: its first non-blank line, ≤ 80 chars, sanitised;
    ``note`` when nothing usable is left."""
    return _slug(_first_nonblank_line(source)) or "note"


def url_snapshot_slug(title: str | None, markdown: str, url: str) -> str:
    """Snapshot name (without ``.md``) of a page: the title, else the first ``#`` heading, else
    the first non-empty line (≤ 80 chars, sanitised); then ``host-lastSegment``; then ``page``."""
    raw = (title or "").strip()
    if not raw:
        for line in _LINES.split(markdown):
            match = _H1.match(line)
            if match and match.group(1).strip():
                raw = match.group(1)
                break
    if not raw:
        raw = _first_nonblank_line(markdown)
    slug = _slug(raw)
    if slug:
        return slug
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
    except ValueError:
        parts, host = None, ""
    segments = [s for s in (parts.path if parts else "").split("/") if s]
    fallback = "-".join(x for x in (host, unquote(segments[-1]) if segments else "") if x)
    return _slug(fallback) or "page"


__all__ = [
    "INDEX_FILE",
    "MATERIAL_DIR",
    "MAX_NAME_BYTES",
    "RESERVED_DIR",
    "SLUG_CHARS",
    "artifact_path",
    "choose_directory_prefix",
    "host_relative_check",
    "name_candidates",
    "note_snapshot_slug",
    "reserve_relative_path",
    "resolve_segments",
    "sanitize_filename",
    "url_snapshot_slug",
    "validate_relative_path",
]
