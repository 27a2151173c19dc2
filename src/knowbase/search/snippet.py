"""The part of a hit worth reading: the snippet a result list shows (issue 42).

A chunk runs to ~1,000 tokens; its opening paragraph is rarely the answer. The snippet is the
hit's best-matching lines and the lines around them, within :data:`SNIPPET_CHARS`:

1. each line of the hit is scored by the query words it holds, a word weighing less the more
   lines hold it (:func:`_line_scores`), matched as the keyword lane matches them: case-folded,
   on a light stem (the lane's ``porter`` tokenizer finds ``descale`` for ``descaled``), CJK
   by bigram;
2. the best line is the centre; lines are added before and after it in turn while they fit
   (a line longer than the budget is cut around its densest run of matches, at words);
3. a matched table row keeps its table's header row, shown above it (``header``) when the
   header is not inside the window already;
4. a hit without a matching line (a vector-only hit) is centred on the sentence nearest the
   query when the caller found it (``nearest``: :mod:`.nearest` embeds the sentences of the
   hits shown), else shows its opening sentences (:func:`passage`);
5. ``marks`` are the spans of matched words in ``text``, for a surface to highlight.

Pure text in, text out: no index, no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import regex

from knowbase.index.fts_query import STOPWORDS, build_keyword_query

SNIPPET_CHARS = 400
_WORD = regex.compile(r"[\p{L}\p{N}_]+")
_CJK = regex.compile(r"[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}]")
# Inflections the porter stemmer folds; enough to find the line, not a stemmer.
_SUFFIXES = ("ingly", "ings", "ing", "edly", "ed", "ies", "es", "s", "ly", "e")
# A sentence ends at . ! ? (or their CJK forms), maybe closed by quotes/brackets, before a space;
# a blank line ends a paragraph.
_RULE = regex.compile(r"[ \t]*\|[\s:|-]+\|[ \t]*$", regex.M)
_SENTENCE_END = regex.compile(r"(?:[.!?](?:[\"')\]]*)(?=\s)|[。！？]|\n\s*\n)")


@dataclass(frozen=True)
class Snippet:
    """``text`` (lines kept) cut from a hit; ``start``/``end`` its offsets in the hit's text;
    ``marks`` the matched words' spans in ``text``; ``header`` the table header row above a
    matched row when the window leaves it out; ``matched`` whether any line matched;
    ``before``/``after`` whether the window starts/ends inside a sentence of a line (a surface
    shows … there); ``nearest`` whether the centre is the sentence nearest the query (a hit
    without a matching line)."""

    text: str
    start: int
    end: int
    marks: list[tuple[int, int]] = field(default_factory=list)
    header: str | None = None
    matched: bool = False
    before: bool = False
    after: bool = False
    nearest: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "start": self.start,
            "end": self.end,
            "marks": [list(m) for m in self.marks],
            "header": self.header,
            "matched": self.matched,
            "before": self.before,
            "after": self.after,
            "nearest": self.nearest,
        }


def stem(word: str) -> str:
    """A light stem: case-folded, one common English suffix off when three letters remain.

    >>> stem("Descaled"), stem("descaling"), stem("descale"), stem("weeks")
    ('descal', 'descal', 'descal', 'week')
    """
    w = word.casefold()
    for suffix in _SUFFIXES:
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            return w[: -len(suffix)]
    return w


def query_terms(query: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """(stems of the query's words, its CJK bigrams and single characters), stopwords dropped
    unless nothing else is left — the terms the keyword lane searched."""
    plan = build_keyword_query(query)
    words = [t for t in plan.terms if not _CJK.search(t)]
    cjk = tuple(t for t in (*plan.terms, *plan.single_chars) if _CJK.search(t))
    if not words and not cjk:
        words = [w for w in _WORD.findall(query.casefold()) if w in STOPWORDS]
    return frozenset(stem(w) for w in words), cjk


def mark_spans(text: str, query: str) -> list[tuple[int, int]]:
    """The spans of ``text`` that match a query word (on its stem) or a CJK term, in order."""
    stems, cjk = query_terms(query)
    return _marks(text, stems, cjk)


def _marks(text: str, stems: frozenset[str], cjk: tuple[str, ...]) -> list[tuple[int, int]]:
    spans = [m.span() for m in _WORD.finditer(text) if stem(m.group()) in stems]
    for term in cjk:
        spans.extend(m.span() for m in regex.finditer(regex.escape(term), text))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for s, e in spans:  # CJK bigrams overlap: one mark per run
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
        else:
            merged.append((s, e))
    return merged


def _line_terms(line: str, stems: frozenset[str], cjk: tuple[str, ...]) -> list[str]:
    """The query terms in ``line``, once per occurrence."""
    found = [stem(w) for w in _WORD.findall(line) if stem(w) in stems]
    return found + [t for t in cjk for _ in regex.finditer(regex.escape(t), line)]


def _line_scores(
    text: str, lines: list[tuple[int, int]], stems: frozenset[str], cjk: tuple[str, ...]
) -> list[float]:
    """Each line's score: its distinct query terms, each weighing 1 / its occurrences in the
    hit (a word on every line, like the topic of the page, points at no line in particular);
    a table row also counts its header row's terms (``| Task | How often |`` answers "how
    often" for every row under it)."""
    terms = [_line_terms(text[s:e], stems, cjk) for s, e in lines]
    seen: dict[str, int] = {}
    for found in terms:
        for t in found:
            seen[t] = seen.get(t, 0) + 1
    scores = []
    for i, found in enumerate(terms):
        distinct = set(found)
        head = _table_top(text, lines, i)
        if head is not None and head != i:
            distinct |= set(terms[head])
        scores.append(sum(1 / seen[t] for t in distinct) if set(found) else 0.0)
    return scores


def snippet(
    text: str, query: str, limit: int = SNIPPET_CHARS, nearest: tuple[int, int] | None = None
) -> Snippet:
    """The window of ``text`` around its best-matching lines; see the module docstring.
    ``nearest``: the (start, end) of the sentence to centre on when no line matches.

    >>> snippet("Intro line.\\n\\n| Task | Every |\\n|---|---|\\n| descale | 6 weeks |",
    ...         "how often descaled", limit=40).header
    '| Task | Every |'
    """
    stems, cjk = query_terms(query)
    lines = _lines(text)
    scores = _line_scores(text, lines, stems, cjk)
    best = max(range(len(lines)), key=lambda i: (scores[i], -i)) if lines else 0
    focus = None  # the span a long line is cut around (None: its matches)
    if not lines or scores[best] == 0:
        at = _line_of(lines, nearest) if nearest is not None else None
        if at is None:
            # offsets of the whole hit: passage() trims sentences and whitespace
            shown = passage(text, limit)
            return Snippet(shown, 0, len(text), _marks(shown, stems, cjk))
        best, focus = at, [(nearest[0], min(nearest[1], nearest[0] + limit))]
    lo = hi = best
    start, end = lines[best]
    if end - start > limit:
        spans = focus or _span_marks(text, start, end, stems, cjk)
        start, end = _cut_line(text, start, end, spans, limit)
    else:
        turn_before = True
        while True:
            grown = False
            for j in (lo - 1, hi + 1) if turn_before else (hi + 1, lo - 1):
                if not 0 <= j < len(lines):
                    continue
                s, e = min(start, lines[j][0]), max(end, lines[j][1])
                if e - s <= limit:
                    start, end = s, e
                    lo, hi = min(lo, j), max(hi, j)
                    grown = True
                    break
            turn_before = not turn_before
            if not grown:
                break
    header = _table_header(text, lines, best, lo)
    if header is not None and _RULE.match(text, lines[lo][0]) and lo < best:
        start = lines[lo + 1][0]  # the header shown above makes its |---| rule noise
    shown = text[start:end].strip("\n")
    start += len(text[start:end]) - len(text[start:end].lstrip("\n"))
    if start == 0 and shown and not _starts_sentence(shown) and " " in shown:
        # the chunk starts inside a word (an overlap restarts anywhere): "mple outputs"
        cut = shown.index(" ") + 1
        shown, start = shown[cut:], cut
    end = start + len(shown)
    # cut inside a line and a sentence: the surface shows "…" there
    before = start > 0 and text[start - 1] not in "\n" and not _after_sentence(text, start)
    after = end < len(text) and text[end] != "\n" and not _ends_sentence(shown)
    return Snippet(
        shown, start, end, _marks(shown, stems, cjk), header, matched=focus is None,
        before=before, after=after, nearest=focus is not None,
    )  # fmt: skip


def _lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of each non-blank line."""
    out = []
    pos = 0
    for line in text.split("\n"):
        if line.strip():
            out.append((pos, pos + len(line)))
        pos += len(line) + 1
    return out


def _line_of(lines: list[tuple[int, int]], span: tuple[int, int]) -> int | None:
    """The index of the line holding ``span``'s start (None: no line does)."""
    return next((i for i, (s, e) in enumerate(lines) if s <= span[0] < e), None)


def _span_marks(
    text: str, start: int, end: int, stems: frozenset[str], cjk: tuple[str, ...]
) -> list[tuple[int, int]]:
    """The matched words' spans in ``text[start:end]``, as offsets in ``text``."""
    return [(s + start, e + start) for s, e in _marks(text[start:end], stems, cjk)]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of each non-blank line (a table row is one), whitespace
    trimmed, in order."""
    out = []
    for s, e in _lines(text):
        pos = s
        for m in [*_SENTENCE_END.finditer(text, s, e), None]:
            cut = e if m is None else m.end()
            piece = text[pos:cut]
            if piece.strip():
                lead = len(piece) - len(piece.lstrip())
                out.append((pos + lead, pos + len(piece.rstrip())))
            pos = cut
    return out


def _cut_line(
    text: str, start: int, end: int, spans: list[tuple[int, int]], limit: int
) -> tuple[int, int]:
    """A ``limit``-wide window of one long line around its densest run of ``spans`` (the
    matched words, or the one sentence to centre on), at words."""
    best_at, best_n = spans[0][0], 0
    for s, _ in spans:
        n = len({stem(text[a:b]) for a, b in spans if s <= a and b <= s + limit})
        if n > best_n:
            best_at, best_n = s, n
    run_end = max(b for a, b in spans if best_at <= a and b <= best_at + limit)
    # centre the run of matches in the window
    lo = max(start, min(best_at - (limit - (run_end - best_at)) // 2, end - limit))
    if lo > start:
        # start at a sentence: the one holding ``lo`` when it begins close by, else the next
        back = [m.end() for m in _SENTENCE_END.finditer(text, max(start, lo - limit // 4), lo)]
        ahead = _SENTENCE_END.search(text, lo, best_at)
        space = text.find(" ", lo, best_at)
        if back or lo - start <= limit // 4:
            lo = back[-1] if back else start
        else:
            lo = ahead.end() if ahead else (space + 1 if space != -1 else lo)
        lo += len(text[lo:best_at]) - len(text[lo:best_at].lstrip())
    hi = min(end, lo + limit)
    if hi < end:
        # the last sentence end in the window that keeps the first match
        first_end = next(b for a, b in spans if a == best_at)
        ends = [m.end() for m in _SENTENCE_END.finditer(text, first_end, hi)]
        space = text.rfind(" ", run_end, hi)
        hi = ends[-1] if ends else (space if space != -1 else hi)
    return lo, hi


def _table_top(text: str, lines: list[tuple[int, int]], row: int) -> int | None:
    """The index of the header line of the Markdown table holding line ``row`` (None: not a
    table row)."""
    if not text[slice(*lines[row])].lstrip().startswith("|"):
        return None
    top = row
    while top > 0 and text[slice(*lines[top - 1])].lstrip().startswith("|"):
        if lines[top - 1][1] + 1 != lines[top][0]:
            break  # a blank line between: another table
        top -= 1
    return top


def _table_header(text: str, lines: list[tuple[int, int]], best: int, lo: int) -> str | None:
    """The header row of the Markdown table whose row ``best`` is, when the window (from line
    ``lo``) starts below it."""
    top = _table_top(text, lines, best)
    if top is None or top >= lo or top == best:
        return None
    return text[slice(*lines[top])].strip()


def passage(text: str, limit: int = SNIPPET_CHARS) -> str:
    """``text`` shown as whole sentences: start at a sentence, stop at a sentence end.

    A chunk that starts inside a sentence begins at its next sentence (when one starts early),
    else with ``…``; the cut falls on the last sentence end within ``limit`` characters, or the
    next one up to twice that, else on a word with ``…``. Whitespace runs become one space.

    >>> passage("ends here. Next one starts. And goes on", 30)
    '… Next one starts.'
    """
    body = text.strip()
    lead = ""
    if body and not _starts_sentence(body):
        first = _SENTENCE_END.search(body, 0, limit // 2)
        if first is not None and body[first.end() :].strip():
            body = body[first.end() :].lstrip()
        lead = "… "
    cut = None
    for m in _SENTENCE_END.finditer(body, 0, min(len(body), 2 * limit)):
        if m.end() <= limit or cut is None:
            cut = m.end()
        if m.end() > limit:
            break
    if len(body) <= limit and (cut is None or _ends_sentence(body)):
        shown, tail = body, ""
    elif cut is not None and cut >= limit // 3:
        shown, tail = body[:cut], ""
    else:
        shown = body[:limit].rsplit(" ", 1)[0] if " " in body[:limit] else body[:limit]
        tail = " …"
    return lead + " ".join(shown.split()) + tail


def _starts_sentence(text: str) -> bool:
    """Upper case, a digit, a caseless letter (CJK), an opening mark or Markdown block start."""
    ch = text[0]
    if ch.isalpha():
        return not ch.islower()
    return ch.isdigit() or ch in "\"'([#*-|>`"


def _after_sentence(text: str, at: int) -> bool:
    """Whether position ``at`` starts a sentence: a sentence ended just before it."""
    head = text[:at].rstrip()
    return not head or bool(_SENTENCE_END.search(head + " ", max(0, len(head) - 3)))


def _ends_sentence(text: str) -> bool:
    return bool(_SENTENCE_END.search(text + " ", max(0, len(text) - 3)))
