"""Keyword text and keyword queries for the FTS5 index (§7, DESIGN "One FTS5 keyword index").

The index holds a *keyword text*: the unit's body with every CJK run (Han, Hiragana, Katakana by
``Script_Extensions``, letters/digits/marks only) rewritten as space-separated overlapping
character bigrams, a 1-char run kept as is. A query gets the same rewrite, so ``学习`` matches
``机器学习`` (indexed as ``机器 器学 学习``).

How a query becomes a keyword query (the truth table). Tokens are ``[\\p{L}\\p{N}_]+``; each
token is split into CJK runs and other runs; other runs split into words at ``_`` (the
``unicode61`` tokenizer treats ``_`` as a separator). Then:

======================================  ==========================  ============================
words (minus stopwords) or bigrams      single-char CJK runs        result
======================================  ==========================  ============================
at least one                            none                        ``match``: OR of the terms
at least one                            some                        ``match`` + one ``LIKE`` filter
                                                                    per single char (the store
                                                                    re-runs once without the
                                                                    filters if they empty it)
none                                    some                        ``like``: AND of ``LIKE`` on
                                                                    every single char, shortest
                                                                    text first
none, but the query had stopwords       none                        ``match`` over the stopwords
                                                                    (a query of only stopwords
                                                                    still searches them)
nothing at all                          none                        ``none``: no hits
======================================  ==========================  ============================

Short Latin words (``Go``, ``AI``) are real tokens of ``unicode61``, so unlike the origin's
trigram index they are ordinary match terms, not ``LIKE`` filters. Match terms are capped at
:data:`MAX_TERMS`, words first, then bigrams.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import regex

MAX_TERMS = 64

# CJK = Han/Hiragana/Katakana by Script_Extensions (so ー and 々 stay inside a run), restricted to
# letters, digits and marks: ideographic punctuation (、。) has those scx too but is no word part.
_CJK_RUN = regex.compile(
    r"(?V1)[[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}]&&[\p{L}\p{N}\p{M}]]+"
)
_TOKEN = regex.compile(r"[\p{L}\p{N}_]+")
_WORD = regex.compile(r"[\p{L}\p{N}\p{M}]+")

# A short list on purpose: BM25's idf already discounts common words; these only cost OR-terms.
# fmt: off
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "do", "does", "for", "from", "has",
    "have", "how", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or", "that", "the",
    "their", "then", "there", "these", "this", "to", "was", "were", "what", "when", "where",
    "which", "who", "whom", "why", "will", "with", "you", "your",
})
# fmt: on

KeywordMode = Literal["match", "like", "none"]


@dataclass(frozen=True)
class KeywordQuery:
    """What the BM25 lane runs for one query.

    ``match`` is the FTS5 expression (``None`` unless ``mode == "match"``); ``filters`` are
    already escaped ``LIKE`` patterns (``%…%``, ``ESCAPE '\\'``) AND-ed to the match;
    ``like_terms`` are the escaped patterns of the ``like`` fallback.
    """

    mode: KeywordMode
    match: str | None = None
    terms: tuple[str, ...] = ()
    filters: tuple[str, ...] = ()
    like_terms: tuple[str, ...] = ()
    stopwords_dropped: tuple[str, ...] = ()
    truncated: bool = False
    single_chars: tuple[str, ...] = field(default=())

    def explain(self) -> dict[str, object]:
        """A JSON-able summary for ``--explain``."""
        return {
            "mode": self.mode,
            "match": self.match,
            "filters": list(self.filters),
            "like_terms": list(self.like_terms),
            "stopwords_dropped": list(self.stopwords_dropped),
            "truncated": self.truncated,
        }


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def keyword_text(text: str) -> str:
    """The text the FTS index holds: CJK runs become space-separated overlapping bigrams.

    >>> keyword_text("AI机器学习 rocks")
    'AI 机器 器学 学习  rocks'
    """
    # Spaces around each run: "AI机器" would otherwise stay one unicode61 token.
    return _CJK_RUN.sub(lambda m: " " + " ".join(_bigrams(m.group())) + " ", text).strip()


def extract_tokens(query: str) -> list[str]:
    """The searchable tokens of a query (§7 ``extractFtsTokens``): ``[\\p{L}\\p{N}_]+``."""
    return _TOKEN.findall(query)


def escape_like(s: str) -> str:
    """Escape ``\\``, ``%`` and ``_`` for ``LIKE … ESCAPE '\\'``."""
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def fts_quote(term: str) -> str:
    """One FTS5 string: double quotes inside are doubled (sqlite-utils ``quote_fts``)."""
    return '"' + term.replace('"', '""') + '"'


def _distinct(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def build_keyword_query(query: str) -> KeywordQuery:
    """Turn a raw query into the BM25 lane's plan; see the module docstring's truth table."""
    words: list[str] = []
    bigrams: list[str] = []
    singles: list[str] = []
    for token in extract_tokens(query):
        pos = 0
        for m in _CJK_RUN.finditer(token):
            words.extend(w.lower() for w in _WORD.findall(token[pos : m.start()]))
            run = m.group()
            (singles if len(run) == 1 else bigrams).extend(_bigrams(run))
            pos = m.end()
        words.extend(w.lower() for w in _WORD.findall(token[pos:]))
    words, bigrams, singles = _distinct(words), _distinct(bigrams), _distinct(singles)
    kept = [w for w in words if w not in STOPWORDS]
    dropped = [w for w in words if w in STOPWORDS]
    if not kept and not bigrams and not singles:
        kept, dropped = dropped, []
    terms = kept + bigrams
    truncated = len(terms) > MAX_TERMS
    terms = terms[:MAX_TERMS]
    patterns = tuple(f"%{escape_like(c)}%" for c in singles[:MAX_TERMS])
    base = KeywordQuery(
        mode="none",
        stopwords_dropped=tuple(dropped),
        truncated=truncated,
        single_chars=tuple(singles),
    )
    if terms:
        match = " OR ".join(fts_quote(t) for t in terms)
        return replace(base, mode="match", match=match, terms=tuple(terms), filters=patterns)
    if patterns:
        return replace(base, mode="like", like_terms=patterns)
    return base
