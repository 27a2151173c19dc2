"""Directory expansion (§4.1 "Directory expansion", DESIGN.md improvement 3).

One pure function, :func:`expand`, turns a folder into the sub-folders and files to import plus
what it skipped and why. It only reads the tree; the workflow creates rows and copies files.

Rules, checked in this order for every entry:

1. a directory named in ``rules.default_ignores`` → ``ignored_default`` (so ``.git`` is reported
   as a default ignore rather than as a dot entry);
2. a name starting with ``.`` → ``dot_entry`` (``.gitignore``/``.kbignore`` are read, never
   imported);
3. a symlink → ``symlink``; anything that is not a plain file or directory → ``not_regular``;
4. matched by a ``.gitignore`` / ``.kbignore`` / ``extra_patterns`` → ``ignored_gitignore`` /
   ``ignored_kbignore``;
5. a file whose type the readers do not handle → ``unsupported_type``;
6. a file over ``rules.max_file_bytes`` → ``too_large``;
7. a file or folder that cannot be stat'ed, listed or read → ``unreadable``;
8. a name that is not valid UTF-8 (bytes from another system) → ``undecodable_name``, checked
   first of all: such a name can be neither a Concept ID nor stored, so it is reported with its
   bytes escaped (:func:`printable`) and the rest of the folder is imported.

A skipped folder is reported once; nothing below it is visited. Folders left without files
after filtering are dropped silently (they are not a skip, there was nothing to import).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from knowbase.errors import InvalidInput, OriginMissing
from knowbase.pipeline.sources.ignore import IgnoreRules, IgnoreStack, load_folder_rules

SKIP_REASONS: tuple[str, ...] = (
    "dot_entry",
    "symlink",
    "not_regular",
    "unsupported_type",
    "ignored_default",
    "ignored_gitignore",
    "ignored_kbignore",
    "too_large",
    "unreadable",
    "undecodable_name",
)


@dataclass(frozen=True)
class ExpandedDir:
    """A folder to create under the import prefix; ``rel`` is POSIX, relative to the root."""

    rel: str


@dataclass(frozen=True)
class ExpandedFile:
    """A file to import: ``rel`` (POSIX, relative to the root), where it is, its size."""

    rel: str
    abs_path: Path
    size: int


@dataclass(frozen=True)
class Skipped:
    """An entry left out, with one of :data:`SKIP_REASONS`."""

    rel: str
    reason: str


@dataclass
class Expansion:
    """The result of :func:`expand`.

    Order is deterministic: a folder's files (sorted by name), then its sub-folders' contents
    (sorted by name), recursively; a folder in ``dirs`` always precedes its sub-folders.
    """

    dirs: list[ExpandedDir] = field(default_factory=list)
    files: list[ExpandedFile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def skip_report(self, max_examples: int = 5) -> dict[str, dict[str, object]]:
        """Per reason: how many entries were skipped and the first few of them.

        >>> Expansion(skipped=[Skipped("a.bin", "unsupported_type")]).skip_report()
        {'unsupported_type': {'count': 1, 'examples': ['a.bin']}}
        """
        report: dict[str, dict[str, object]] = {}
        for skip in self.skipped:
            entry = report.setdefault(skip.reason, {"count": 0, "examples": []})
            entry["count"] = int(entry["count"]) + 1  # type: ignore[call-overload]
            examples = entry["examples"]
            assert isinstance(examples, list)
            if len(examples) < max_examples:
                examples.append(skip.rel)
        return report


def printable(name: str) -> str:
    """``name`` as text that can be stored and shown: bytes that are not UTF-8 (the surrogate
    escapes ``os`` decodes them to) become ``\\xff`` escapes; a UTF-8 name is unchanged.

    >>> printable("bad\\udcff.txt")
    'bad\\\\xff.txt'
    """
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def is_decodable(name: str) -> bool:
    """Whether ``name`` is valid UTF-8 text (no surrogate escapes of undecodable bytes)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _default_is_supported(name: str) -> bool:
    # Imported lazily: the readers package pulls in heavy converters we don't need to list a tree.
    from knowbase.pipeline.readers import is_supported

    return is_supported(name)


def _check_root(root: Path) -> None:
    try:
        st = os.stat(root)
    except FileNotFoundError as exc:
        raise OriginMissing(f"Folder not found: {root}", path=str(root)) from exc
    except OSError as exc:
        raise OriginMissing(f"Folder cannot be read: {root} ({exc})", path=str(root)) from exc
    if not stat.S_ISDIR(st.st_mode):
        raise InvalidInput(f"Not a folder: {root}", path=str(root))
    if not os.access(root, os.R_OK | os.X_OK):
        raise OriginMissing(f"Folder cannot be read: {root}", path=str(root))


def _join(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


def expand(
    root: Path,
    rules: IgnoreRules,
    *,
    is_supported: Callable[[str], bool] = _default_is_supported,
    on_progress: Callable[[int], None] | None = None,
    check_cancelled: Callable[[], None] | None = None,
) -> Expansion:
    """Walk ``root`` and return what to import, in a deterministic order (see :class:`Expansion`).

    ``on_progress`` is called after each folder with the number of entries examined so far;
    ``check_cancelled`` is called before each folder and may raise to abort the walk.
    Raises :class:`OriginMissing` when ``root`` is gone or unreadable and :class:`InvalidInput`
    when it is not a folder.

    >>> expand(Path("docs"), IgnoreRules())  # doctest: +SKIP
    Expansion(dirs=[ExpandedDir(rel='guide')], files=[...], skipped=[...])
    """
    root = Path(root)
    _check_root(root)
    ignore_files = rules.ignore_files()
    files: list[ExpandedFile] = []
    skipped: list[Skipped] = []
    examined = 0
    # Depth-first with an explicit stack (deep trees must not hit the recursion limit); children
    # are pushed in reverse so they pop in sorted order, which yields a sorted pre-order listing.
    stack: list[tuple[str, IgnoreStack]] = [("", IgnoreStack.for_root(rules))]
    while stack:
        if check_cancelled is not None:
            check_cancelled()
        rel_dir, inherited = stack.pop()
        folder = root / rel_dir if rel_dir else root
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            skipped.append(Skipped(rel_dir, "unreadable"))
            continue
        ignores = load_folder_rules(inherited, folder, rel_dir, ignore_files)
        subdirs: list[str] = []
        for entry in entries:
            examined += 1
            rel = _join(rel_dir, entry.name)
            if not is_decodable(entry.name):
                skipped.append(Skipped(printable(rel), "undecodable_name"))
                continue
            reason, size = _classify(entry, rel, rules, ignores, is_supported)
            if reason is not None:
                skipped.append(Skipped(rel, reason))
            elif size is None:
                subdirs.append(rel)
            else:
                files.append(ExpandedFile(rel, Path(entry.path), size))
        stack.extend((sub, ignores) for sub in reversed(subdirs))
        if on_progress is not None:
            on_progress(examined)
    return Expansion(dirs=_dirs_of(files), files=files, skipped=skipped)


def _classify(
    entry: os.DirEntry[str],
    rel: str,
    rules: IgnoreRules,
    ignores: IgnoreStack,
    is_supported: Callable[[str], bool],
) -> tuple[str | None, int | None]:
    """(skip reason, None) or (None, None) for a folder to enter or (None, size) for a file."""
    name = entry.name
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return "unreadable", None
    is_dir = stat.S_ISDIR(st.st_mode)
    if is_dir and rules.is_default_ignored_dir(name):
        return "ignored_default", None
    if is_dir and rules.is_kept_out(entry.path):
        return "knowbase_home", None
    if name.startswith("."):
        return "dot_entry", None
    if stat.S_ISLNK(st.st_mode):
        return "symlink", None
    if not is_dir and not stat.S_ISREG(st.st_mode):
        return "not_regular", None
    source = ignores.match(rel, is_dir=is_dir)
    if source is not None:
        return f"ignored_{source}", None
    if is_dir:
        return None, None
    if not is_supported(name):
        return "unsupported_type", None
    if rules.is_too_large(st.st_size):
        return "too_large", None
    if not os.access(entry.path, os.R_OK):
        return "unreadable", None
    return None, st.st_size


def _dirs_of(files: list[ExpandedFile]) -> list[ExpandedDir]:
    """Every folder holding at least one file, parents first, in the files' pre-order."""
    seen: set[str] = set()
    dirs: list[ExpandedDir] = []
    for file in files:
        parts = file.rel.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            rel = "/".join(parts[:depth])
            if rel not in seen:
                seen.add(rel)
                dirs.append(ExpandedDir(rel))
    return dirs
