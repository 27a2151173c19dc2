"""Which bases an MCP server may see (``kb mcp --base``), and how a tool asks for one.

``Scope.base`` raises :class:`OutOfScope` for a base outside the scope (the answer is the same
whether it exists or not: a scoped server does not reveal the others).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from knowbase import Base, Principal
from knowbase.errors import NotFound
from knowbase.service import Knowledge

log = logging.getLogger(__name__)


class OutOfScope(Exception):
    """A base this assistant may not see (or that does not exist: the two read the same)."""

    def __init__(self, ref: str) -> None:
        super().__init__(f'Knowledge base "{ref}" is not available to this assistant.')


@dataclass
class Scope:
    """Which bases the server may see: ``None`` = every base, else exactly these ids."""

    kb: Knowledge
    base_ids: list[str] | None = None
    _allowed: frozenset[str] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._allowed = None if self.base_ids is None else frozenset(self.base_ids)

    @property
    def empty(self) -> bool:
        return self._allowed is not None and not self._allowed

    def bases(self) -> list[Base]:
        if self.empty:
            return []
        return [b for b in self.kb.list_bases() if self._allowed is None or b.id in self._allowed]

    def narrowed(self, principal: Principal) -> Scope:
        """This scope as a key sees it: only the key's bases among the server's."""
        if principal.base_ids is None:
            return self
        mine = principal.base_ids
        ids = mine if self._allowed is None else mine & self._allowed
        return Scope(self.kb, sorted(ids))

    def base(self, ref: str) -> Base:
        """The base ``ref`` names (name or id) when in scope; else :class:`OutOfScope`."""
        if self.empty:
            raise OutOfScope(ref)
        try:
            b = self.kb.get_base(ref)
        except NotFound:
            if self._allowed is None:
                raise
            raise OutOfScope(ref) from None
        if self._allowed is not None and b.id not in self._allowed:
            raise OutOfScope(ref)
        return b


def resolve_scope(kb: Knowledge, refs: list[str] | None) -> list[str] | None:
    """``--base`` names/ids → ids. None → every base; a list matching nothing refuses to start."""
    if refs is None:
        return None
    ids: list[str] = []
    for ref in refs:
        try:
            ids.append(kb.get_base(ref).id)
        except NotFound:
            log.warning("--base %r matches no knowledge base; ignored", ref)
    if not ids:
        raise NotFound(
            f"--base {', '.join(refs)} matches no knowledge base; refusing to start",
            hint="list the bases with kb base list",
            bases=refs,
        )
    return list(dict.fromkeys(ids))
