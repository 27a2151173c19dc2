"""The base's raw/ tree: safe relative paths, ``_N`` naming, reservation, copy/delete/prune (§2).

A base lives in ``<bases_dir>/<base_id>/``: ``raw/`` is the only material root (a Concept ID is a
path relative to it) and ``.kb/`` is reserved for derived state (``.kb/index.sqlite``). Stored
relative paths are read as POSIX everywhere (``\\`` and ``:`` are ordinary filename characters);
the host check then makes sure the host's own path rules cannot climb out of raw/ either.

Everything here is a pure function of strings except :class:`BaseStorage` and
:func:`list_orphan_base_dirs`, which touch the disk.
"""

from __future__ import annotations

import contextlib
import errno
import ntpath
import os
import posixpath
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePath, PureWindowsPath
from types import ModuleType
from urllib.parse import unquote, urlsplit

from knowbase.errors import FileExists, InvalidInput, UnsafePath

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
    "reserve_relative_path",
    "sanitize_filename",
    "url_snapshot_slug",
    "validate_relative_path",
]

RESERVED_DIR = ".kb"
MATERIAL_DIR = "raw"
INDEX_FILE = "index.sqlite"
# The spec caps names at 255 characters; ext4/APFS/NTFS-on-Linux cap at 255 *bytes*, so a long
# CJK name that fits the character cap still fails with ENAMETOOLONG. Capping bytes covers both.
MAX_NAME_BYTES = 255
SLUG_CHARS = 80

_ILLEGAL_CHARS = re.compile(r'[<>:"/\\|?*\x00-\x1f]')
_DEVICE_NAME = re.compile(r"^(CON|PRN|AUX|NUL|COM[1-9]|LPT[1-9])(\.|$)", re.IGNORECASE)
_UUID_NAME = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_H1 = re.compile(r"^ {0,3}#[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_LINES = re.compile(r"\r\n|\r|\n")


# --- path safety (§2.3) ----------------------------------------------------------------------
def _resolve_segments(rel: str) -> list[str] | None:
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
    segments = _resolve_segments(rel)
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
            segments = _resolve_segments(cand) if "\x00" not in cand else None
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
            if art in reserved or _resolve_segments(art) == [RESERVED_DIR]:
                return False
        return True

    chosen = _first_free(name_candidates(name), is_free)
    reserved.add(chosen)
    if reserve_artifact:
        reserved.add(validate_relative_path(artifact_path(chosen)))
    return chosen


def _first_segment(rel: str) -> str:
    segments = _resolve_segments(rel)
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


# --- the tree on disk (§2.1, §2.4) -----------------------------------------------------------
def _is_benign(exc: OSError) -> bool:
    # ENOTEMPTY: another item still lives there (EEXIST on some systems); ENOENT: already gone.
    return exc.errno in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR)


class BaseStorage:
    """The files of one base: ``<bases_dir>/<base_id>/raw/…`` and ``.kb/``.

    Every path argument is a raw/-relative POSIX path, checked by :func:`validate_relative_path`
    and :func:`host_relative_check` before the disk is touched.
    """

    def __init__(self, bases_dir: Path, base_id: str) -> None:
        # A bogus id ("", "..", "a/b") would point remove_all() at bases_dir or outside it.
        if (
            not base_id
            or base_id in (".", "..")
            or any(c in base_id for c in "/\\\x00")
            or base_id != base_id.strip()
        ):
            raise InvalidInput(f"invalid base id: {base_id!r}", base_id=base_id)
        self.base_id = base_id
        self._root = Path(bases_dir) / base_id

    @property
    def root(self) -> Path:
        """The base dir, ``<bases_dir>/<base_id>``."""
        return self._root

    @property
    def raw(self) -> Path:
        """The material root; Concept IDs are paths relative to it."""
        return self._root / MATERIAL_DIR

    @property
    def kb_dir(self) -> Path:
        """The reserved dir for derived state."""
        return self._root / RESERVED_DIR

    @property
    def index_path(self) -> Path:
        """The base's derived index, ``.kb/index.sqlite``."""
        return self.kb_dir / INDEX_FILE

    def ensure(self) -> None:
        """Create raw/ and .kb/ (idempotent)."""
        self.raw.mkdir(parents=True, exist_ok=True)
        self.kb_dir.mkdir(parents=True, exist_ok=True)

    def path_of(self, rel: str) -> Path:
        """The absolute path of ``rel`` under raw/, after both safety checks."""
        validate_relative_path(rel)
        host_relative_check(PurePath(self.raw), rel)
        return Path(os.path.normpath(os.path.join(self.raw, rel)))

    def exists(self, rel: str) -> bool:
        """Whether anything occupies ``rel`` (a dangling symlink counts, as for copy_in)."""
        return os.path.lexists(self.path_of(rel))

    def copy_in(self, src: Path, rel: str, *, overwrite: bool = False) -> Path:
        """Copy ``src`` to raw/``rel`` and return the target; parents are created.

        Without ``overwrite`` an existing target (even a dangling symlink) raises
        :class:`FileExists`. The bytes land in a temp file first and are moved into place, so a
        crash never leaves a half-written file under the final name.
        """
        return self._commit(rel, overwrite, lambda tmp: shutil.copyfile(src, tmp))

    def move_in(self, staged: Path, rel: str) -> Path:
        """Move a file staged on this base's filesystem (``.kb/staging``) to raw/``rel``.

        A rename, not a copy, so it may run under the base lock. Same rule as copy_in: an
        existing target raises :class:`FileExists` and is left alone.
        """
        target = self.path_of(rel)
        if os.path.lexists(target):
            raise FileExists(
                f"file already exists in the base: {target}", path=rel, base_id=self.base_id
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        self._link_no_clobber(str(staged), target, rel)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)
        return target

    def move_dir_in(self, staged: Path, prefix: str) -> Path:
        """Move a staged folder to raw/``prefix`` in one rename; an existing target raises
        :class:`FileExists`."""
        target = self.path_of(prefix)
        if os.path.lexists(target):
            raise FileExists(
                f"file already exists in the base: {target}", path=prefix, base_id=self.base_id
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staged, target)
        return target

    def write_text(self, rel: str, text: str, *, overwrite: bool = False) -> Path:
        """Write ``text`` (UTF-8, newlines untouched) to raw/``rel``; same rules as copy_in."""

        def fill(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)

        return self._commit(rel, overwrite, fill)

    def _commit(self, rel: str, overwrite: bool, fill: Callable[[str], object]) -> Path:
        target = self.path_of(rel)
        if not overwrite and os.path.lexists(target):
            raise FileExists(
                f"file already exists in the base: {target}", path=rel, base_id=self.base_id
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        # The temp file sits next to the target (same filesystem, so the rename is atomic) under
        # a dot-name no reader picks up; a crash leaves at most that stray temp behind.
        fd, tmp = tempfile.mkstemp(prefix=".kb-tmp-", dir=target.parent)
        os.close(fd)
        try:
            fill(tmp)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            if overwrite:
                os.replace(tmp, target)
            else:
                self._link_no_clobber(tmp, target, rel)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return target

    def _link_no_clobber(self, tmp: str, target: Path, rel: str) -> None:
        # link() fails if the name exists, which closes the race between the lstat check and
        # the move when two writers pick the same name. Filesystems without hard links fall
        # back to a re-check + replace.
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise FileExists(
                f"file already exists in the base: {target}", path=rel, base_id=self.base_id
            ) from None
        except OSError:
            if os.path.lexists(target):
                raise FileExists(
                    f"file already exists in the base: {target}", path=rel, base_id=self.base_id
                ) from None
            os.replace(tmp, target)

    def delete_paths(self, files: Iterable[str], dir_prefixes: Iterable[str] = ()) -> list[str]:
        """Best-effort delete (§2.4): ``rm -r`` each prefix, unlink each file, then prune empty
        ancestor dirs deepest first (never raw/ itself). Missing paths and non-empty dirs are
        silent; any other failure (unsafe path, permission…) is returned as a message. Never
        raises."""
        problems: list[str] = []
        touched: list[list[str]] = []

        def note(rel: str, exc: BaseException) -> None:
            problems.append(f"{rel}: {exc}")

        for prefix in dir_prefixes:
            try:
                path = self.path_of(prefix)
                touched.append(_resolve_segments(prefix) or [])
                if path.is_symlink() or (path.exists() and not path.is_dir()):
                    path.unlink()
                else:
                    _rmtree(path, prefix, note)
            except FileNotFoundError:
                pass
            except Exception as exc:  # best effort by contract: report, never raise
                note(prefix, exc)
        for rel in files:
            try:
                path = self.path_of(rel)
                touched.append(_resolve_segments(rel) or [])
                path.unlink()
            except FileNotFoundError:
                pass
            except Exception as exc:
                note(rel, exc)
        for rel_dir in _ancestors_deepest_first(touched):
            try:
                os.rmdir(self.path_of(rel_dir))
            except OSError as exc:
                if not _is_benign(exc):
                    note(rel_dir, exc)
            except Exception as exc:
                note(rel_dir, exc)
        return problems

    def remove_all(self) -> None:
        """``rm -r`` the whole base dir (raw/ and .kb/); a missing dir is fine."""
        if self._root.is_symlink():
            self._root.unlink()
            return
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self._root)


def _rmtree(path: Path, rel: str, note: Callable[[str, BaseException], None]) -> None:
    def on_exc(_func: object, failed: str, exc: BaseException) -> None:
        if not (isinstance(exc, OSError) and exc.errno == errno.ENOENT):
            note(f"{rel} ({failed})", exc)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=on_exc)
    else:  # pragma: no cover - 3.11 only knows onerror (deprecated from 3.12)
        shutil.rmtree(path, onerror=lambda f, p, info: on_exc(f, p, info[1]))


def _ancestors_deepest_first(paths: Iterable[list[str]]) -> list[str]:
    dirs: set[tuple[str, ...]] = set()
    for segments in paths:
        for depth in range(1, len(segments)):
            dirs.add(tuple(segments[:depth]))
    return ["/".join(d) for d in sorted(dirs, key=lambda d: (-len(d), d))]


def list_orphan_base_dirs(
    bases_dir: Path, known_ids: set[str], *, now: float, min_age_s: float = 300
) -> list[Path]:
    """Base dirs with a UUID name and no catalog row (§2.4), sorted by name.

    Symlinks are skipped, and so is a dir when it or one of its direct children was modified
    within ``min_age_s`` of ``now`` (a base being created right now has no row yet). The caller
    removes them under the base lock, re-checking that the id is still unknown.
    """
    try:
        entries = sorted(os.scandir(bases_dir), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    orphans: list[Path] = []
    for entry in entries:
        if not _UUID_NAME.match(entry.name) or entry.name in known_ids:
            continue
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            uuid.UUID(entry.name)
            if _recently_modified(Path(entry.path), now - min_age_s):
                continue
        except (OSError, ValueError):
            continue
        orphans.append(Path(entry.path))
    return orphans


def _recently_modified(path: Path, cutoff: float) -> bool:
    if path.lstat().st_mtime > cutoff:
        return True
    with os.scandir(path) as children:
        return any(child.stat(follow_symlinks=False).st_mtime > cutoff for child in children)
