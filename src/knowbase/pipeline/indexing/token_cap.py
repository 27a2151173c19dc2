"""Re-split spans that exceed a model's token window (§4.4 "Local-model token cap", DESIGN 9).

The splitter sizes chunks with a character estimate; a model reads word pieces and silently
drops what lies past its window. This pass counts each span with the model's own tokenizer and
re-splits the ones that do not fit, keeping exact offsets into the same text.

The counter may be a real tokenizer, so it is called sparingly: once per span, then a binary
search per cut (``O(log n)`` calls) for the longest fitting prefix and for the overlap start.
"""

from __future__ import annotations

from collections.abc import Callable

from knowbase.pipeline.indexing.splitter import trim_span
from knowbase.pipeline.indexing.tables import TableMap

PREFERRED_BOUNDARIES: tuple[str, ...] = (
    "\n\n",
    "\n",
    "。",
    "！",
    "？",
    ". ",
    "! ",
    "? ",
    "；",
    "; ",
    "，",
    ", ",
    " ",
)
"""Where a re-split prefers to end, best first; the boundary stays with the earlier piece."""


def apply_token_cap(
    text: str,
    spans: list[tuple[int, int]],
    *,
    max_tokens: int,
    overlap_tokens: int,
    count_tokens: Callable[[str], int],
) -> list[tuple[int, int]]:
    """Return ``spans`` with every span over ``max_tokens`` re-split into pieces that fit.

    A piece is the longest prefix that fits (binary search), stepped back to the best
    :data:`PREFERRED_BOUNDARIES` boundary when one lies past half of it. The next piece starts
    where the last ``overlap_tokens`` of the piece begin (binary search), always after the
    previous start. Neither a cut nor a start falls inside a Markdown table row unless the row
    alone is over the limit (:mod:`.tables`). Pieces are trimmed of whitespace; offsets index
    ``text``. A piece exceeds ``max_tokens`` only when a single character does.

    The result is sorted by start, and a piece contained in another is dropped: re-split tails
    may reach into the next span's overlap, and callers expect strictly increasing starts.

        >>> words = lambda s: len(s.split())
        >>> apply_token_cap("a b c d e", [(0, 9)], max_tokens=2, overlap_tokens=0,
        ...                 count_tokens=words)
        [(0, 3), (4, 7), (8, 9)]
    """
    max_tokens = max(1, max_tokens)
    overlap_tokens = max(0, min(overlap_tokens, max_tokens - 1))
    out: list[tuple[int, int]] = []
    tables = TableMap(text) if "|" in text else None
    for start, end in spans:
        if count_tokens(text[start:end]) <= max_tokens:
            out.append((start, end))
        else:
            out.extend(_resplit(text, start, end, max_tokens, overlap_tokens, count_tokens, tables))
    return _drop_contained(out)


def _resplit(
    text: str,
    start: int,
    end: int,
    max_tokens: int,
    overlap_tokens: int,
    count: Callable[[str], int],
    tables: TableMap | None = None,
) -> list[tuple[int, int]]:
    pieces: list[tuple[int, int]] = []
    cursor = start
    known_over = True  # the caller counted text[start:end] and found it too long
    while cursor < end:
        if not known_over and count(text[cursor:end]) <= max_tokens:
            piece = trim_span(text, cursor, end)
            if piece is not None:
                pieces.append(piece)
            break
        known_over = False
        cut = _longest_fitting_prefix(text, cursor, end, max_tokens, count)
        cut = _step_back_to_boundary(text, cursor, cut)
        if tables:
            cut = tables.cut_back(cut, cursor)  # a table row stays whole when it fits
        piece = trim_span(text, cursor, cut)
        if piece is not None:
            pieces.append(piece)
        if cut >= end:
            break
        nxt = _overlap_start(text, cursor, cut, overlap_tokens, count)
        if tables:
            nxt = tables.start_at_row(nxt, cursor, cut)
        cursor = nxt if nxt > cursor else cut
    return pieces


def _longest_fitting_prefix(
    text: str, cursor: int, end: int, max_tokens: int, count: Callable[[str], int]
) -> int:
    """The largest ``cut`` in ``(cursor, end)`` whose ``text[cursor:cut]`` fits; at least one char.

    ``text[cursor:end]`` is known not to fit, so ``end`` itself is never probed.
    """
    lo, hi = cursor + 1, end - 1  # answer in [lo, hi]; lo is taken even if it does not fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[cursor:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _step_back_to_boundary(text: str, cursor: int, cut: int) -> int:
    """End at the best preferred boundary in ``text[cursor:cut]`` if it lies past its middle."""
    half = cursor + (cut - cursor) / 2
    for boundary in PREFERRED_BOUNDARIES:
        i = text.rfind(boundary, cursor, cut)
        if i != -1 and i + len(boundary) > half:
            return i + len(boundary)
    return cut


def _overlap_start(
    text: str, cursor: int, cut: int, overlap_tokens: int, count: Callable[[str], int]
) -> int:
    """The smallest ``o`` in ``(cursor, cut]`` with ``text[o:cut]`` within ``overlap_tokens``."""
    if overlap_tokens <= 0:
        return cut
    lo, hi = cursor + 1, cut  # hi always qualifies: no overlap at all
    while lo < hi:
        mid = (lo + hi) // 2
        if count(text[mid:cut]) <= overlap_tokens:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _drop_contained(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    kept: list[tuple[int, int]] = []
    for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
        # Longest first among equal starts, so any span not reaching past the last kept end
        # lies inside it.
        if not kept or end > kept[-1][1]:
            kept.append((start, end))
    return kept
