"""One base's search as the facade runs it: its settings, its scope, a leased index store,
visibility, documents ranked as one entry each (``group``), the surroundings a caller asked for
(``context``), and each hit's snippet (a vector-only hit's centred on its sentence nearest the
query, :mod:`.nearest`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from knowbase.catalog.models import Base
from knowbase.providers.base import EmbeddingProvider
from knowbase.runtime import Runtime
from knowbase.search.context import with_context
from knowbase.search.fusion import FusionSettings
from knowbase.search.grouping import PASSAGES_PER_DOCUMENT, Group, group_documents
from knowbase.search.scope import SearchFilters, resolve
from knowbase.search.search import (
    DEFAULT_TOP_K,
    SearchConfig,
    SearchResponse,
    SearchResult,
    search,
)
from knowbase.search.snippet import snippet

if TYPE_CHECKING:
    import numpy as np

    from knowbase.search.visibility import VisibilityCache


def search_base(
    rt: Runtime,
    visible: VisibilityCache,
    b: Base,
    query: str,
    *,
    top_k: int | None,
    filters: SearchFilters,
    context: int | None = None,
    group: Group = "passage",
) -> SearchResponse:
    """Search ``b`` with its own settings; filters resolved in the catalog first. The caller
    has checked that the base can be searched (``ingestion.guards.assert_base_runnable``).
    ``group="document"``: ``top_k`` documents, each its best passage with ``citations``
    (``search/grouping.py``), ranked from :data:`PASSAGES_PER_DOCUMENT` × ``top_k`` passages."""
    wanted = top_k or b.document_count or DEFAULT_TOP_K
    config = SearchConfig(
        # passages: the caller's or the base's (None keeps the search's own defaults)
        top_k=wanted * PASSAGES_PER_DOCUMENT if group == "document" else top_k or b.document_count,
        threshold=b.threshold,
        dims=b.dimensions,
        fusion=FusionSettings.of_base(b),
    )
    scope = resolve(rt.catalog, b.id, filters)
    embedder = rt.embedder(b)
    with rt.lease(b) as store:  # a base update meanwhile closes it after us
        response = search(
            store,
            query,
            config=config,
            embedder=embedder,
            reranker=rt.reranker(b),
            visible=visible.for_base(b.id),
            scope=scope,
        )
        results = response.results
        if group == "document":
            results = group_documents(results, wanted)
            response.explain["group"] = {"by": "document", "passages": len(response.results)}
        if context:
            results = with_context(store, results, context)
        # on the passage as returned (with its context): what a reader sees first
        vector = None
        if response.mode == "hybrid" and embedder is not None and b.dimensions:
            # the dense side's modules load numpy, which a BM25-only search never needs
            from knowbase.pipeline.indexing.embed import cached_query

            vector = cached_query(query.strip(), embedder, b.dimensions)
        results = with_snippets(results, query, embedder, vector)
        return replace(response, results=results)


def with_snippets(
    results: list[SearchResult],
    query: str,
    embedder: EmbeddingProvider | None,
    query_vector: np.ndarray | None,
) -> list[SearchResult]:
    """Each result with its snippet: centred on its best-matching lines, or, for a hit without
    one when the search computed the query's vector, on its sentence nearest the query (one
    batched ``embed`` of those hits' sentences, bounded by :mod:`.nearest`)."""
    snips = [snippet(r.text, query) for r in results]
    blind = [i for i, s in enumerate(snips) if not s.matched]
    if blind and embedder is not None and query_vector is not None:
        from knowbase.search.nearest import nearest_units

        spans = nearest_units([results[i].text for i in blind], query_vector, embedder)
        for i, span in zip(blind, spans, strict=True):
            if span is not None:
                snips[i] = snippet(results[i].text, query, nearest=span)
    return [replace(r, snippet=s.to_dict()) for r, s in zip(results, snips, strict=True)]
