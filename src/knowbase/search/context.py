"""Small-to-big results: each hit with its surroundings, within a token budget (issue 29).

A chunk that answers a question is often the paragraph after the one that names its topic. With
``context=TOKENS`` a search returns, for each hit, a passage of its document: the hit's own
chunk, then its neighbouring chunks (the next, then the previous, in turn) while the passage
stays within ``TOKENS`` (:func:`knowbase.pipeline.indexing.tokens.estimate_tokens`). Hits of one
document whose passages touch or overlap become one passage at the rank of the better hit (its
score and kind kept; the merged hits are listed in ``context["chunks"]``). ``text`` is then the
exact slice ``content_text[char_start:char_end]`` of the passage; the hit's own offsets stay in
``context["hit_start"]``/``["hit_end"]``. A budget smaller than the hit itself returns the hit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from knowbase.errors import InvalidInput
from knowbase.index.base import IndexStore, UnitRecord
from knowbase.pipeline.indexing.tokens import estimate_tokens
from knowbase.search.search import SearchResult

MAX_CONTEXT_TOKENS = 8000
JOIN_GAP = 2  # documents are joined with "\n\n": passages this close touch


def check_budget(tokens: int | None) -> None:
    """InvalidInput unless ``tokens`` is None or 1..8000."""
    if tokens is not None and not 1 <= tokens <= MAX_CONTEXT_TOKENS:
        raise InvalidInput(f"context must be 1..{MAX_CONTEXT_TOKENS} tokens", context=tokens)


def _grow(text: str, units: list[UnitRecord], at: int, budget: int) -> tuple[int, int]:
    """The span of units around position ``at`` that fits ``budget`` tokens."""
    lo = hi = at
    start, end = units[at].char_start, units[at].char_end
    turn_after = True
    while True:
        options = [("after", hi + 1), ("before", lo - 1)]
        if not turn_after:
            options.reverse()
        grown = False
        for side, j in options:
            if not 0 <= j < len(units):
                continue
            s = min(start, units[j].char_start)
            e = max(end, units[j].char_end)
            if estimate_tokens(text[s:e]) <= budget:
                start, end = s, e
                lo, hi = (lo, j) if side == "after" else (j, hi)
                grown = True
                break
        if not grown:
            return start, end
        turn_after = not turn_after


def with_context(store: IndexStore, results: list[SearchResult], budget: int) -> list[SearchResult]:
    """``results`` (best first) with each hit's surroundings; see the module."""
    check_budget(budget)
    texts: dict[str, str | None] = {}
    units: dict[str, list[UnitRecord]] = {}
    spans: list[tuple[SearchResult, int, int]] = []
    for r in results:
        if r.item_id not in texts:
            texts[r.item_id] = store.content_text(r.item_id)
            units[r.item_id] = store.list_units(r.item_id)
        text, own = texts[r.item_id], units[r.item_id]
        at = next((n for n, u in enumerate(own) if u.unit_id == r.chunk_id), None)
        if text is None or at is None:  # gone since the search: the hit as it was
            spans.append((r, r.char_start, r.char_end))
            continue
        spans.append((r, *_grow(text, own, at, budget)))
    merged: list[list[Any]] = []  # [result, start, end, chunk ids]
    for r, start, end in spans:
        for m in merged:
            same = m[0].item_id == r.item_id
            if same and start <= m[2] + JOIN_GAP and m[1] <= end + JOIN_GAP:
                m[1], m[2] = min(m[1], start), max(m[2], end)
                m[3].append(r.chunk_id)
                break
        else:
            merged.append([r, start, end, [r.chunk_id]])
    out = []
    for rank, (r, start, end, chunk_ids) in enumerate(merged, start=1):
        text = texts.get(r.item_id)
        passage = text[start:end] if text is not None else r.text
        context = {"hit_start": r.char_start, "hit_end": r.char_end, "chunks": chunk_ids}
        out.append(
            replace(r, rank=rank, text=passage, char_start=start, char_end=end, context=context)
        )
    return out
