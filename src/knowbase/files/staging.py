"""Copies made outside the base lock (DESIGN: "the base lock never covers copying").

An add copies its files into ``<base>/.kb/staging/<owner>/`` without holding the base lock;
then, under the lock, it reserves names, moves the copies into raw/ (a rename on the same
filesystem: no bytes move) and writes the rows. A crash in between leaves only a staging
folder whose owner process is gone, never a file in raw/ that no row owns; the recovery sweep
removes such folders (:func:`remove_stale_staging`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
import uuid
from pathlib import Path
from types import TracebackType

from knowbase.files import BaseStorage, validate_relative_path
from knowbase.processes import pid_alive, this_host

__all__ = ["STAGING_DIR", "Staging", "copy_synced", "remove_stale_staging"]

STAGING_DIR = "staging"
#: A staging folder of another host (a shared home) is removed only after this long untouched.
FOREIGN_GRACE_S = 86_400.0
_SEP = "~"  # hostnames never hold it; pids and ms are digits


def _owner_name() -> str:
    return _SEP.join(
        [this_host(), str(os.getpid()), str(int(time.time() * 1000)), uuid.uuid4().hex[:12]]
    )


class Staging:
    """One add's private staging folder under ``.kb/staging/``; removed on exit.

    Whatever was not moved into raw/ by then goes with it, so a failed or cancelled add leaves
    nothing behind.
    """

    def __init__(self, storage: BaseStorage) -> None:
        self.root = storage.kb_dir / STAGING_DIR / _owner_name()
        self.root.mkdir(parents=True)
        self._n = 0

    def copy(self, src: Path) -> Path:
        """Copy ``src`` to a fresh name in the staging folder (fsynced) and return it."""
        self._n += 1
        return self._copy(src, self.root / "files" / str(self._n))

    def copy_to(self, src: Path, rel: str) -> Path:
        """Copy ``src`` to ``tree/<rel>`` (a folder import keeps its layout for one move)."""
        return self._copy(src, self.tree / validate_relative_path(rel))

    def spool_path(self, name: str) -> Path:
        """A fresh path named ``name`` (its folder made) for bytes the caller writes itself:
        an HTTP upload is spooled here, so a server killed mid-upload leaves a folder the
        recovery sweep removes, never a temp folder nobody owns."""
        self._n += 1
        path = self.root / "spool" / str(self._n) / name
        path.parent.mkdir(parents=True)
        return path

    @property
    def tree(self) -> Path:
        """The staged copy of a folder, moved into raw/ as a whole."""
        return self.root / "tree"

    @staticmethod
    def _copy(src: Path, dest: Path) -> Path:
        dest.parent.mkdir(parents=True, exist_ok=True)
        copy_synced(src, dest)
        return dest

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Staging:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def copy_synced(src: Path, dest: Path) -> None:
    """Copy ``src`` to the new file ``dest`` and fsync it through the descriptor that wrote it.

    The row that will own the copy commits right after it is moved into raw/: its bytes must be
    on disk before then, as ``copy_in`` guarantees for a direct copy. ``shutil.copyfile`` and
    a reopen for the fsync cost 1.4-1.8x the wall time of this over a folder of small files
    (two stats for its same-file test, a special-file test, a second open)."""
    with open(src, "rb", buffering=0) as fin, open(dest, "xb", buffering=0) as fout:
        if not _sendfile_all(fin.fileno(), fout.fileno()):
            shutil.copyfileobj(fin, fout, _CHUNK)
        os.fsync(fout.fileno())


_CHUNK = 1 << 20
_NO_SENDFILE = {errno.EINVAL, errno.ENOTSOCK, errno.ENOSYS, errno.EOPNOTSUPP}


def _sendfile_all(fin: int, fout: int) -> bool:
    """Copy all of ``fin`` to ``fout`` in the kernel; False, having written nothing, where
    ``sendfile`` cannot copy between two files (it can on Linux)."""
    offset = 0
    while True:
        try:
            sent = os.sendfile(fout, fin, offset, _CHUNK)
        except (OSError, AttributeError) as exc:
            if offset == 0 and getattr(exc, "errno", errno.ENOSYS) in _NO_SENDFILE:
                return False
            raise
        if sent == 0:
            return True
        offset += sent


def _is_stale(entry: os.DirEntry[str], now: float) -> bool:
    parts = entry.name.split(_SEP)
    if len(parts) == 4 and parts[0] == this_host():
        try:
            return not pid_alive(int(parts[1]), int(parts[2]))
        except ValueError:
            pass
    with contextlib.suppress(OSError):
        return entry.stat(follow_symlinks=False).st_mtime < now - FOREIGN_GRACE_S
    return False


def remove_stale_staging(storage: BaseStorage, *, now: float | None = None) -> list[str]:
    """Remove staging folders whose owner process on this host is gone (a crash mid-add), or,
    from another host or unnamed, untouched for :data:`FOREIGN_GRACE_S`. Returns their names.
    Needs no base lock: a staging folder belongs to its owner process alone."""
    now = time.time() if now is None else now
    try:
        entries = list(os.scandir(storage.kb_dir / STAGING_DIR))
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed: list[str] = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and _is_stale(entry, now):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
    return removed
