"""Ignore rules for folder import (DESIGN.md improvement 3).

The origin imported everything under a folder, ``node_modules`` included (#20201). We skip:

- directories whose name matches one of ``default_ignores`` (fnmatch, case-sensitive), anywhere;
- paths matched by a ``.gitignore`` or ``.kbignore`` at any level, which applies to its own
  subtree with gitignore semantics (``pathspec``'s ``GitIgnoreSpec``): deeper files override
  shallower ones, a ``!`` negation re-includes, and, as in git, nothing inside an ignored
  directory can be re-included because the walk never enters it;
- ``extra_patterns`` (gitignore syntax, rooted at the import root, reported as ``kbignore``);
- regular files larger than ``max_file_bytes``.

In one folder ``.kbignore`` is applied after ``.gitignore``, so it has the last word.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pathspec

DEFAULT_IGNORES: tuple[str, ...] = (
    # version control
    ".git",
    ".hg",
    ".svn",
    # dependencies and virtual environments
    "node_modules",
    "bower_components",
    ".venv",
    "venv",
    "__pypackages__",
    # build output
    "dist",
    "build",
    "target",
    "*.egg-info",
    ".next",
    ".nuxt",
    ".svelte-kit",
    ".gradle",
    ".terraform",
    # caches and tool state
    "__pycache__",
    ".cache",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    "coverage",
    "htmlcov",
    # editors
    ".idea",
    ".vscode",
)

MiB = 1024 * 1024
GITIGNORE = ".gitignore"
KBIGNORE = ".kbignore"
# An ignore file bigger than this is not a hand-written rule list; reading it would only cost.
_MAX_IGNORE_FILE_BYTES = 1 * MiB

IgnoreSource = Literal["gitignore", "kbignore"]


@dataclass(frozen=True)
class IgnoreRules:
    """What folder expansion leaves out. The defaults suit a source tree or a docs folder.

    >>> IgnoreRules(max_file_bytes=None, extra_patterns=("*.tmp",)).use_gitignore
    True
    """

    default_ignores: tuple[str, ...] = DEFAULT_IGNORES
    use_gitignore: bool = True
    use_kbignore: bool = True
    max_file_bytes: int | None = 50 * MiB
    extra_patterns: tuple[str, ...] = ()
    #: Folders never entered, as real paths: knowbase's own home, whose databases are live
    #: (reading one with the OS in a process holding a connection drops that process's locks).
    keep_out: tuple[str, ...] = ()

    def is_kept_out(self, path: str) -> bool:
        """True when the folder at ``path`` is one of :attr:`keep_out`."""
        return bool(self.keep_out) and os.path.realpath(path) in self.keep_out

    def is_default_ignored_dir(self, name: str) -> bool:
        """True when a directory called ``name`` is one of the default ignores."""
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.default_ignores)

    def is_too_large(self, size: int) -> bool:
        """True when a file of ``size`` bytes exceeds the cap (no cap when ``None``)."""
        return self.max_file_bytes is not None and size > self.max_file_bytes

    def ignore_files(self) -> list[tuple[str, IgnoreSource]]:
        """The ignore file names read in every folder, in the order they apply."""
        names: list[tuple[str, IgnoreSource]] = []
        if self.use_gitignore:
            names.append((GITIGNORE, "gitignore"))
        if self.use_kbignore:
            names.append((KBIGNORE, "kbignore"))
        return names


@dataclass(frozen=True)
class _ScopedSpec:
    base: str  # folder the rules live in, relative to the import root ('' = the root)
    spec: pathspec.GitIgnoreSpec
    source: IgnoreSource


class IgnoreStack:
    """The ignore specs in force for one folder of the walk: its ancestors' and its own.

    Immutable: ``push`` returns a new stack, so sibling folders never see each other's rules.
    """

    def __init__(self, scoped: tuple[_ScopedSpec, ...] = ()) -> None:
        self._scoped = scoped

    @classmethod
    def for_root(cls, rules: IgnoreRules) -> IgnoreStack:
        """A stack holding the rules' ``extra_patterns`` rooted at the import root."""
        if not rules.extra_patterns:
            return cls()
        spec = pathspec.GitIgnoreSpec.from_lines(rules.extra_patterns)
        return cls((_ScopedSpec("", spec, "kbignore"),))

    def push(self, base: str, lines: Sequence[str], source: IgnoreSource) -> IgnoreStack:
        """Add the rules of one ignore file found in folder ``base``."""
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
        if not spec.patterns:
            return self
        return IgnoreStack((*self._scoped, _ScopedSpec(base, spec, source)))

    def match(self, rel: str, *, is_dir: bool) -> IgnoreSource | None:
        """Which kind of rule ignores ``rel`` (a path relative to the root), or ``None``.

        The last decisive pattern wins, scanning from the root's rules to the deepest folder's,
        which is git's precedence; a negation (``!x``) that matches last re-includes.
        """
        verdict: IgnoreSource | None = None
        for scoped in self._scoped:
            if scoped.base and not rel.startswith(scoped.base + "/"):
                continue
            sub = rel[len(scoped.base) + 1 :] if scoped.base else rel
            if is_dir:
                sub += "/"
            result = scoped.spec.check_file(sub)
            if result.include is True:
                verdict = scoped.source
            elif result.include is False:
                verdict = None
        return verdict


def read_ignore_lines(path: Path) -> list[str] | None:
    """The lines of an ignore file, or ``None`` when it is absent, too big or unreadable.

    An unreadable ignore file is treated as absent: failing the whole import over a rule file
    would be worse than importing a little too much, and the skip report shows what came in.
    """
    try:
        if not path.is_file() or path.is_symlink():
            return None
        if path.stat().st_size > _MAX_IGNORE_FILE_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None


def load_folder_rules(
    stack: IgnoreStack, folder: Path, base: str, files: Iterable[tuple[str, IgnoreSource]]
) -> IgnoreStack:
    """``stack`` plus the ignore files found directly in ``folder`` (``base`` = its rel path)."""
    for name, source in files:
        lines = read_ignore_lines(folder / name)
        if lines:
            stack = stack.push(base, lines, source)
    return stack
