"""The search half of the facade: one base, several bases, phrasings fused, judged-set
contexts and Concept IDs (``search/``). :class:`~knowbase.service.Knowledge` inherits it; it
reaches the runtime and base lookups through the same instance."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from knowbase.catalog.guards import assert_base_runnable
from knowbase.catalog.models import Base
from knowbase.search.base_search import search_base
from knowbase.search.context import check_budget
from knowbase.search.multi_base import MultiSearch, search_bases
from knowbase.search.scope import SearchFilters, parse_filters
from knowbase.search.search import SearchResponse

if TYPE_CHECKING:
    from knowbase.eval.context import EvalContext
    from knowbase.runtime import Runtime
    from knowbase.search.concepts import ConceptService
    from knowbase.search.visibility import VisibilityCache


class SearchFacade:
    """Search methods of the facade (mixed into ``Knowledge``)."""

    rt: Runtime
    _visible: VisibilityCache
    _concepts: ConceptService | None

    def get_base(self, name_or_id: str) -> Base:  # provided by Knowledge
        raise NotImplementedError

    def search(
        self,
        base: str | Base,
        query: str,
        *,
        top_k: int | None = None,
        under: str | None = None,
        types: Iterable[str] | str | None = None,
        since: str | date | datetime | None = None,
        tags: Iterable[str] | str | None = None,
        where: Any = None,
        conditions: Any = None,
        context: int | None = None,
        also: Iterable[str] = (),
    ) -> SearchResponse:
        """Hybrid (or BM25-only) search over one base's completed items (§7).

        ``base`` is a name, an id, or a ``Base`` the caller has just resolved (saves a lookup).
        Filters (``search/scope.py``) restrict both lanes before their cut: ``under`` a Concept
        ID folder, ``types`` source types (``pdf``, ``md``, ``url``, ``note``…), ``since`` an
        ISO date/datetime of the last update; ``tags`` (all required) and ``where`` metadata
        conditions (``search/label_filters.py``); ``conditions`` Dify's ``metadata_condition``
        (``search/conditions.py``: ``and``/``or`` over Dify's operators). A malformed filter
        raises ``InvalidFilter``. ``context`` (tokens) returns each hit with its surroundings
        (``search/context.py``). ``also``: up to four more phrasings of the same intent; each
        runs through both lanes and the lists fuse by reciprocal rank (``search/phrasings.py``).
        """
        from knowbase.search.phrasings import check_phrasings

        check_budget(context)
        phrasings = check_phrasings(query, list(also))
        filters = parse_filters(
            under=under, types=types, since=since, tags=tags, where=where, conditions=conditions
        )
        b = base if isinstance(base, Base) else self.get_base(base)
        return self._search_phrasings(b, phrasings, top_k=top_k, filters=filters, context=context)

    def _search_phrasings(
        self,
        b: Base,
        phrasings: list[str],
        *,
        top_k: int | None,
        filters: SearchFilters,
        context: int | None,
    ) -> SearchResponse:
        from knowbase.search.phrasings import fuse_phrasings
        from knowbase.search.search import DEFAULT_TOP_K

        responses = [
            self._search(b, q, top_k=top_k, filters=filters, context=context) for q in phrasings
        ]
        if len(responses) == 1:
            return responses[0]
        return fuse_phrasings(phrasings, responses, top_k or b.document_count or DEFAULT_TOP_K)

    def _search(
        self,
        b: Base,
        query: str,
        *,
        top_k: int | None,
        filters: SearchFilters,
        context: int | None = None,
    ) -> SearchResponse:
        assert_base_runnable(b, "searching")
        return search_base(
            self.rt, self._visible, b, query, top_k=top_k, filters=filters, context=context
        )

    def eval_context(
        self, base: str, qrels: Mapping[str, Mapping[str, int]], *, model: str | None = None
    ) -> EvalContext:
        """What ``kb eval`` needs to run each lane of ``base`` (``eval/judged.py``); ``model``
        "shadow" scores a model switch's shadow vectors. The caller calls ``ctx.close()``."""
        from knowbase.eval.judged import context_for

        b = self.get_base(base)
        return context_for(self.rt, self._visible.for_base(b.id), b, qrels, model=model)

    def search_many(
        self,
        bases: Iterable[str | Base],
        query: str,
        *,
        top_k: int | None = None,
        limit: int | None = None,
        dedupe_text: bool = False,
        under: str | None = None,
        types: Iterable[str] | str | None = None,
        since: str | date | datetime | None = None,
        tags: Iterable[str] | str | None = None,
        where: Any = None,
        context: int | None = None,
        also: Iterable[str] = (),
    ) -> MultiSearch:
        """Search several bases and merge the results into one list (``search/multi_base.py``).

        Every base is resolved first (NotFound before any search) and the filters are checked
        once (``InvalidFilter`` before any search), then apply in each base as in
        :meth:`search`; ``top_k`` is per base (None: each base's default), ``limit`` bounds
        the merged list (None: no bound). A base whose search fails is listed in ``errors``;
        the others still merge. ``context`` and ``also`` as in :meth:`search`.
        """
        from knowbase.search.phrasings import check_phrasings

        check_budget(context)
        phrasings = check_phrasings(query, list(also))
        filters = parse_filters(under=under, types=types, since=since, tags=tags, where=where)
        resolved = [b if isinstance(b, Base) else self.get_base(b) for b in bases]
        return search_bases(
            lambda b: self._search_phrasings(
                b, phrasings, top_k=top_k, filters=filters, context=context
            ),
            resolved,
            limit=limit,
            dedupe_text=dedupe_text,
        )

    # --- concepts (search/concepts.py) ----------------------------------------------------------
    @property
    def concepts(self) -> ConceptService:
        """Concept ID read / grep / tree / delete / refresh (§8), as a ``ConceptService``."""
        from knowbase.operations.delete.workflow import delete_items
        from knowbase.operations.reindex.workflow import reindex_items
        from knowbase.search.concepts import ConceptService

        if self._concepts is None:
            rt = self.rt
            delete, reindex = partial(delete_items, rt), partial(reindex_items, rt)
            self._concepts = ConceptService(rt, delete=delete, reindex=reindex)
        return self._concepts


__all__ = ["SearchFacade"]
