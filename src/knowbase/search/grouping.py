"""Document-level ranking (issue 40 item 4): one entry per document, its best passages cited.

A passage list can hold four chunks of one paper above a second paper that answers better, and
a top 10 of passages may show only five documents. With ``group="document"`` a search ranks
documents instead: each document's passages among the ranked candidates score it, the
document's entry is its best passage (its text, offsets and locator, as a passage result), and
``citations`` lists its best passages (at most :data:`MAX_CITATIONS`), best first.

A document's score is its best passage's (``max``): measured on the judged sets whose qrels are
per document (docs/eval.md, "Document grouping"), adding a damped sum of the next passages
(``s1 + β·s2 + β²·s3 …``) did not rank better, and ``max`` keeps the score on the passage scale
that thresholds and multi-base merges read. :func:`document_scores` takes ``damping`` so the
bench can replay the alternatives.

    >>> [(d, round(s, 3)) for d, s, _ in document_scores([("a", 0.9), ("b", 0.8), ("a", 0.5)])]
    [('a', 0.9), ('b', 0.8)]
    >>> [(d, round(s, 3)) for d, s, _ in document_scores([("a", 0.6), ("b", 0.5), ("b", 0.5)], 0.5)]
    [('b', 0.75), ('a', 0.6)]
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any, Literal

from knowbase.errors import InvalidInput
from knowbase.search.search import SearchResult

Group = Literal["passage", "document"]
GROUPS: tuple[str, ...] = ("passage", "document")
#: Passages cited per document entry.
MAX_CITATIONS = 3
#: Passages asked of the search per document wanted: enough that a document's next passages
#: and the documents below the first few are among the candidates.
PASSAGES_PER_DOCUMENT = 5
#: The damping of a document's next passages (0: the best passage alone; see the module).
DEFAULT_DAMPING = 0.0


def check_group(group: str | None) -> Group:
    """``group`` as one of :data:`GROUPS` (None → ``passage``); InvalidInput otherwise."""
    if group is None:
        return "passage"
    if group not in GROUPS:
        raise InvalidInput(f"group must be one of {', '.join(GROUPS)}", group=group)
    return group  # type: ignore[return-value]


def document_scores(
    hits: Sequence[tuple[Hashable, float]], damping: float = DEFAULT_DAMPING
) -> list[tuple[Hashable, float, list[int]]]:
    """``(document, score, positions of its hits)`` from ``hits`` (document, passage score) best
    first: the best passage plus ``damping**i`` × its i-th next. Equal scores keep the order
    of each document's first hit (the search's own tie order)."""
    positions: dict[Hashable, list[int]] = {}
    for n, (doc, _) in enumerate(hits):
        positions.setdefault(doc, []).append(n)
    scored = []
    for first, (doc, at) in enumerate(positions.items()):
        ordered = sorted(at, key=lambda n: -hits[n][1])
        score = sum(hits[n][1] * damping**i for i, n in enumerate(ordered) if i == 0 or damping)
        scored.append((first, doc, score, ordered))
    scored.sort(key=lambda t: (-t[2], t[0]))
    return [(doc, score, at) for _, doc, score, at in scored]


def _citation(r: SearchResult) -> dict[str, Any]:
    return {
        "chunk_id": r.chunk_id,
        "score": r.score,
        "unit_index": r.unit_index,
        "char_start": r.char_start,
        "char_end": r.char_end,
        "locator": dict(r.locator),
        "text": r.text,
    }


def group_documents(
    results: Sequence[SearchResult], top_k: int, damping: float = DEFAULT_DAMPING
) -> list[SearchResult]:
    """``results`` (passages, best first) as at most ``top_k`` document entries, ranked from 1:
    each its best passage with the document's score and ``citations``."""
    ranked = document_scores([(r.item_id, r.score) for r in results], damping)[:top_k]
    out = []
    for rank, (_, score, at) in enumerate(ranked, start=1):
        best = results[at[0]]
        cites = [_citation(results[n]) for n in at[:MAX_CITATIONS]]
        out.append(replace(best, rank=rank, score=score, citations=cites))
    return out


__all__ = [
    "GROUPS",
    "MAX_CITATIONS",
    "PASSAGES_PER_DOCUMENT",
    "Group",
    "check_group",
    "document_scores",
    "group_documents",
]
