"""Which local files ``kb_manage`` may add: the same roots as ``kb serve --allow-path``.

An agent names a path on the user's machine. With MCP elicitation the user sees the path and
approves each add; with ``--allow-writes`` nobody does, so the server's roots decide alone:

- roots given (``kb mcp --allow-path DIR``): the path must resolve (symlinks followed) inside
  one of them, whether the user approves adds or ``--allow-writes`` pre-grants them;
- no roots and ``--allow-writes``: local-file adds are refused, as ``kb serve`` refuses
  local-path adds without roots (notes and URLs still work);
- no roots, writes approved by the user one by one: any readable absolute path.

    >>> check_local_file("/etc/passwd", [Path("/home/me/docs")], pre_granted=True)  # doctest: +SKIP
    UnsafePath: kb_manage adds local files only under the server's --allow-path roots
"""

from __future__ import annotations

from pathlib import Path

from knowbase import resolve_local
from knowbase.errors import UnsafePath


def resolve_roots(roots: list[str] | list[Path] | None) -> list[Path]:
    """``--allow-path`` values as resolved absolute folders."""
    return [resolve_local(r) for r in roots or []]


def check_local_file(path: str, roots: list[Path], *, pre_granted: bool) -> None:
    """Refuse (UnsafePath) a local file the server may not add; see the module docstring.
    A path that cannot be resolved (a symlink loop) is InvalidInput."""
    if not roots:
        if pre_granted:
            raise UnsafePath(
                "with --allow-writes, kb_manage adds local files only under the server's "
                "--allow-path roots, and none were given",
                hint="start kb mcp with --allow-path DIR, or add the file as the user",
                path=path,
                reason="no_local_path_roots",
            )
        return
    resolved = resolve_local(path)
    if not any(resolved.is_relative_to(root) for root in roots):
        raise UnsafePath(
            "kb_manage adds local files only under the server's --allow-path roots",
            hint="move the file under one of the roots, or start kb mcp with --allow-path DIR",
            path=path,
            reason="outside_local_path_roots",
            roots=[str(r) for r in roots],
        )


__all__ = ["check_local_file", "resolve_roots"]
