"""The base's raw/ tree on disk: copy, move, delete and prune under ``raw/``, and orphan base
directories (§2.1, §2.4).

A base lives in ``<bases_dir>/<base_id>/``: ``raw/`` is the only material root (a Concept ID is a
path relative to it) and ``.kb/`` is reserved for derived state (``.kb/index.sqlite``). Names and
path safety are :mod:`knowbase.files.naming`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath

from knowbase.errors import FileExists, InvalidInput
from knowbase.files.naming import (
    INDEX_FILE,
    MATERIAL_DIR,
    RESERVED_DIR,
    artifact_path,
    host_relative_check,
    reserve_relative_path,
    resolve_segments,
    validate_relative_path,
)

log = logging.getLogger(__name__)

_UUID_NAME = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)


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

    def index_bytes(self) -> int | None:
        """Bytes of the SQLite index on disk (with its WAL), or None when not built yet."""
        path = self.index_path
        files = [path, *(path.with_name(path.name + s) for s in ("-wal", "-shm"))]
        sizes = [f.stat().st_size for f in files if f.exists()]
        return sum(sizes) if sizes else None

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

    def move_files_in(self, staged_root: Path, prefix: str, rels: Iterable[str]) -> None:
        """Move staged files ``staged_root/<rel>`` to raw/``prefix``/``<rel>``: renames on one
        filesystem (no bytes move), folders made as needed. The prefix is the caller's own (a
        folder's, emptied before its first part), so nothing there is overwritten."""
        target = self.path_of(prefix)
        made: set[Path] = set()
        for rel in rels:
            dest = target / validate_relative_path(rel)
            if dest.parent not in made:
                dest.parent.mkdir(parents=True, exist_ok=True)
                made.add(dest.parent)
            os.rename(staged_root / rel, dest)

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
                touched.append(resolve_segments(prefix) or [])
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
                touched.append(resolve_segments(rel) or [])
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


def reserve_free_path(
    storage: BaseStorage, name: str, reserved: set[str], *, reserve_artifact: bool = False
) -> str:
    """:func:`~knowbase.files.naming.reserve_relative_path`, also skipping names something
    already occupies on disk.

    A crash between copying a file and committing its row leaves an unowned file behind; the
    catalog cannot know it, so without this check that name would fail every later copy.
    """
    while True:
        rel = reserve_relative_path(name, reserved, reserve_artifact=reserve_artifact)
        taken = storage.exists(rel) or (reserve_artifact and storage.exists(artifact_path(rel)))
        if not taken:
            return rel
        log.warning("skipping %s: the file exists but no item owns it", rel)


__all__ = ["BaseStorage", "list_orphan_base_dirs", "reserve_free_path"]
