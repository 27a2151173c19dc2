"""How much of a query the embedding model can read: the letters its scripts cover.

The dense lane votes only for a query its model reads (DESIGN Turn 2); ``search.py`` asks
:func:`script_coverage` before it embeds.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import regex

from knowbase.search.fusion import FULL_COVERAGE

log = logging.getLogger(__name__)


def script_coverage(query: str, scripts: frozenset[str] | None) -> dict[str, Any]:
    """How many of the query's letters the model's scripts cover.

    A letter counts as covered when one of its ``Script_Extensions`` is in ``scripts`` or it is
    Common/Inherited. ``covered`` is True when at least 90% of the letters are covered (the
    dense lane's vote follows coverage, DESIGN Turn 2: a Chinese question naming an English title
    is not "covered"); a query without letters (digits only) is covered. ``scripts=None`` covers
    all.
    """
    letters = regex.findall(r"\p{L}", query)
    if scripts is None or not letters:
        return {"covered": True, "letters": len(letters), "uncovered": 0}
    known = _script_class(frozenset(scripts))
    uncovered = [ch for ch in letters if not known.match(ch)]
    return {
        "covered": len(letters) - len(uncovered) >= FULL_COVERAGE * len(letters),
        "letters": len(letters),
        "uncovered": len(uncovered),
        "model_scripts": sorted(scripts),
    }


@functools.lru_cache(maxsize=32)
def _script_class(scripts: frozenset[str]) -> regex.Pattern[str]:
    parts = []
    for name in sorted(scripts | {"Common", "Inherited"}):
        try:
            regex.compile(rf"\p{{scx={name}}}")
        except regex.error:
            log.warning("unknown script name %r declared by a provider; ignored", name)
            continue
        parts.append(rf"\p{{scx={name}}}")
    return regex.compile("[" + "".join(parts) + "]")
