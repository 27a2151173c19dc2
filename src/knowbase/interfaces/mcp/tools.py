"""The bodies of the MCP tools (§8) and the shape of their results.

:mod:`.mcp` registers the tools (names, argument schemas, approval) and calls these functions;
they take a :class:`~knowbase.interfaces.mcp.scope.Scope` and return a ``CallToolResult``: the
structured data plus a text block, with an ``error`` (and guidance) on failure. ``kb_tree`` and
``kb_grep`` share ``kb_list``'s outline and ``kb_read``'s grep. The SDK is imported inside
functions only, so that ``kb --help`` never imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from knowbase import Base
from knowbase.errors import InvalidInput, KnowbaseError, NotFound
from knowbase.interfaces.mcp import budget
from knowbase.interfaces.mcp.results import _camel, _fail, _from_error, _ok
from knowbase.interfaces.mcp.scope import OutOfScope

# --- result shapes (the JSON helpers live in mcp_results.py) ------------------------------------

if TYPE_CHECKING:
    from knowbase import SearchResult
    from knowbase.interfaces.mcp.scope import Scope

CITE_PREFIX = "kb"
LIST_DEFAULT_LIMIT = 20
LIST_MAX_LIMIT = 50
SAMPLE_SOURCES = 8
SEARCH_MAX_BASES = 20
MANAGE_MAX_IDS = 100
NOTE_MAX_CHARS = 1_000_000
QUERY_MIN_CHARS = 2
QUERY_MAX_CHARS = 200


def _not_found_guidance(exc: NotFound) -> str:
    """§8: base gone → kb_list; content missing → retry; otherwise → check the id."""
    kind = exc.details.get("kind")
    if kind == "concept_content":
        return "The document is being rebuilt; retry kb_read in a moment."
    if kind == "concept":
        return (
            "No readable document has this conceptId in this base. Check the id with kb_list "
            "(baseId for the outline) or kb_search; it must be copied exactly."
        )
    return "This knowledge base does not exist (any more). Call kb_list to see the bases."


class _Cites:
    """Cite ids ``kb-1``, ``kb-2``… unique for the server's lifetime."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"{CITE_PREFIX}-{self.n}"


# --- kb_search ---------------------------------------------------------------------------------
# An agent gets the paragraph that answers, not only the chunk that matched: each passage comes
# with its neighbouring chunks within this many tokens (search/context.py; ~2 MiniLM chunks).
KB_SEARCH_CONTEXT = 512


def kb_search(
    scope: Scope,
    cites: _Cites,
    *,
    query: str,
    base_ids: list[str],
    under: str | None = None,
    types: list[str] | None = None,
    since: str | None = None,
    context: int | None = None,
    tags: list[str] | None = None,
    where: dict[str, Any] | list[str] | None = None,
    top_k: int | None = None,
    max_chars: int = budget.DEFAULT_MAX_CHARS,
    also: list[str] | None = None,
    group: str | None = None,
) -> Any:
    """Search the bases (``Knowledge.search_many``: in parallel, merged, one copy of each
    passage text), each passage with ``context`` tokens of surroundings (default
    :data:`KB_SEARCH_CONTEXT`), clamp and round scores, cite. ``under``/``types``/``since``
    filter inside each base's lanes (``search/scope.py``); a malformed one is a tool error
    naming the filter. ``top_k`` passages at most (per base and merged); the reply holds
    ``max_chars`` characters at most (:mod:`.budget`). ``group="document"``: one passage per
    document, its best passages' places in ``citations`` (``search/grouping.py``)."""
    kb = scope.kb
    query = query.strip()
    if not QUERY_MIN_CHARS <= len(query) <= QUERY_MAX_CHARS:
        return _fail(
            f"The query must be {QUERY_MIN_CHARS} to {QUERY_MAX_CHARS} characters long "
            f"(got {len(query)}); search with a word or a phrase.",
            code="invalid_input",
        )
    refs = list(dict.fromkeys(base_ids))
    targets, errors, unknown = _targets(scope, refs)
    try:
        found = kb.search_many(
            targets,
            query,
            top_k=top_k,
            limit=top_k,
            dedupe_text=True,
            under=under,
            types=types,
            since=since,
            tags=tags,
            where=where,
            context=context or KB_SEARCH_CONTEXT,
            also=[a.strip() for a in also or ()],
            group=group,
        )
    except InvalidInput as exc:
        return _from_error(exc)
    invalid = [e for e in found.errors.values() if isinstance(e, InvalidInput)]
    if invalid:
        return _from_error(invalid[0])
    errors.update({base_id: exc.message for base_id, exc in found.errors.items()})
    merged = found.results
    if errors and not merged and unknown == set(refs):
        return _fail(
            "None of the requested bases is available to this assistant (out of scope or no "
            "such base); retrying will not change that. Call kb_list for the bases you can "
            "search, or tell the user.",
            code="not_found",
            bases=errors,
        )
    if errors and not merged and len(errors) == len(refs):
        return _fail(
            "Knowledge search failed for every requested base; tell the user the knowledge "
            "bases could not be searched right now.",
            bases=errors,
        )
    filters = {"under": under, "types": types, "since": since, "tags": tags, "where": where}
    used = {k: v for k, v in filters.items() if v}
    passages = [_passage(m.base_id, m.result) for m in merged]
    notices = scope_notices(targets, found.modes, used)
    return _reply(cites, query, passages, max_chars, errors, notices, filtered=bool(used))


def _targets(scope: Scope, refs: list[str]) -> tuple[list[Base], dict[str, str], set[str]]:
    """The bases to search, the refused ones' messages, and those refused for good (out of
    scope or no such base: retrying will not change it)."""
    errors: dict[str, str] = {}
    unknown: set[str] = set()
    targets: list[Base] = []
    for ref in refs:
        try:
            targets.append(scope.base(ref))
        except OutOfScope as exc:
            errors[ref] = str(exc)
            unknown.add(ref)
        except NotFound as exc:
            errors[ref] = exc.message
            unknown.add(ref)
        except KnowbaseError as exc:
            errors[ref] = exc.message
    return targets, errors, unknown


def _reply(
    cites: _Cites,
    query: str,
    passages: list[dict[str, Any]],
    max_chars: int,
    errors: dict[str, str],
    notices: list[str],
    *,
    filtered: bool,
) -> Any:
    """The passages that fit ``max_chars``, each with a cite id, and the notices: filters, what
    was cut or left out, and what to try when nothing matched."""
    shown, left_out = budget.fit(passages, max_chars)
    items = [{"id": cites.next(), **h} for h in shown]
    data: dict[str, Any] = {"items": items}
    if errors:
        data["failedBases"] = errors
    if left_out:
        notices.append(
            f"{left_out} more passage(s) did not fit in maxChars={max_chars}; raise maxChars "
            "or narrow the search (topK, filters) to see them."
        )
    if any(h.get("truncated") for h in shown):
        notices.append(
            "Passages marked truncated were cut to fit maxChars; kb_read (conceptId, charStart, "
            "charEnd) reads around them."
        )
    if notices:
        data["notices"] = notices
    if not items and not left_out:  # (passages that did not fit are not "no match")
        return _ok(
            data,
            f"No passages match {query!r}"
            + (
                " within the filters (under/types/since/tags/where); try without them"
                if filtered
                else ""
            )
            + ". Try other words, or call kb_list (with baseId for an outline) to see what "
            "these bases hold.",
        )
    return _ok(data)


def scope_notices(targets: list[Base], modes: dict[str, str], filters: dict[str, Any]) -> list[str]:
    """What an agent should know about how its search ran: the filters that narrowed it, and
    the bases that answered keyword-only (no model, or one that cannot read the query)."""
    notices = []
    if filters:
        shown = ", ".join(f"{k}={v}" for k, v in filters.items())
        notices.append(f"Only documents matching {shown} were searched.")
    keyword_only = [b.name for b in targets if modes.get(b.id) == "bm25"]
    if keyword_only:
        notices.append(
            "Keyword-only search (no embedding model, or one that cannot read this query) in: "
            + ", ".join(keyword_only)
            + ". Use the words the documents would use."
        )
    return notices


def _passage(base_id: str, r: SearchResult) -> budget.Passage:
    """A search result as ``kb_search`` shows it: camelCase, the score clamped to [0, 1] and
    rounded to 4 digits, its kind (``hybrid``, ``keyword``, ``vector``: one absolute scale;
    ``rrf``: ranks only; ``relevance``: a reranker's), and the locator (page, sheet, heading
    path…); with where the hit lies inside its passage (for the budget)."""
    item = {
        "baseId": base_id,
        "conceptId": r.concept_id,
        "title": r.title,
        "type": r.item_type,
        "content": r.text,
        "score": round(min(max(float(r.score), 0.0), 1.0), 4),
        "scoreKind": r.score_kind,
        "charStart": r.char_start,
        "charEnd": r.char_end,
        "locator": r.locator or None,
        # the document's best passages by place (kb_read reads them): text would crowd the budget
        "citations": [
            {
                "charStart": c["char_start"],
                "charEnd": c["char_end"],
                "score": round(min(max(float(c["score"]), 0.0), 1.0), 4),
                **({"locator": c["locator"]} if c["locator"] else {}),
            }
            for c in r.citations
        ]
        if r.citations is not None
        else None,
    }
    context = r.context or {}
    return budget.Passage(
        {k: v for k, v in item.items() if v is not None},
        context.get("hit_start", r.char_start),
        context.get("hit_end", r.char_end),
    )


# --- kb_read -----------------------------------------------------------------------------------
def kb_read(
    scope: Scope,
    cites: _Cites,
    *,
    base_id: str,
    concept_id: str,
    char_start: int | None,
    char_end: int | None,
    pattern: str | None,
    ignore_case: bool,
    max_matches: int | None,
) -> Any:
    """A slice of the document, or with ``pattern`` its matching lines; both get a cite id."""
    kb = scope.kb
    try:
        b = scope.base(base_id)
        if pattern is not None:
            found = kb.concepts.grep_concept(
                b.id, concept_id, pattern, ignore_case=ignore_case, max_matches=max_matches
            )
            data = _camel(found)
            data["type"] = data.pop("itemType")
            data = {"id": cites.next(), **data}
            if found.get("partial"):
                # Only the structured content said so: an agent reading the text took a scan
                # that gave up for a document without the line.
                return _ok(data, _partial_text(concept_id, pattern, found))
            if not found["matches"]:
                return _ok(data, f"No line of {concept_id!r} matches {pattern!r}.")
            return _ok(data)
        page = _camel(
            kb.concepts.read_concept(b.id, concept_id, char_start=char_start, char_end=char_end)
        )
        return _ok({"id": cites.next(), **page})
    except OutOfScope as exc:
        return _fail(str(exc))
    except NotFound as exc:
        return _from_error(exc, _not_found_guidance(exc))
    except KnowbaseError as exc:
        return _from_error(exc)


def _partial_text(concept_id: str, pattern: str, found: dict[str, Any]) -> str:
    """What a grep that stopped early covered, and what to do about it."""
    n = len(found["matches"])
    head = f"The search of {concept_id!r} for {pattern!r} stopped early: {found.get('reason')}. "
    if not n:
        return head + (
            "No match was found in the part searched; this does not mean the document has "
            "none. Use a simpler pattern (no nested repetition such as (a+)+) or kb_read the "
            "rest."
        )
    import json

    listed = json.dumps(_camel({"matches": found["matches"]}), ensure_ascii=False)
    return head + f"{n} match(es) in the part searched: {listed}"
