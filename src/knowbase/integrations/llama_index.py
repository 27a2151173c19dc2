"""A LlamaIndex retriever over one knowbase base (``pip install 'knowbase[llama-index]'``).

from knowbase.integrations.llama_index import KnowbaseRetriever

retriever = KnowbaseRetriever(base="docs", top_k=5)          # the embedded default home
nodes = retriever.retrieve("when does the vpn key rotate?")
nodes[0].score, nodes[0].node.metadata["concept_id"], nodes[0].node.get_content()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from knowbase.integrations.hits import Hit, HitSource

#: What the LLM sees of a node besides its text: enough to cite it. The ids, offsets, scores
#: and locators stay in ``metadata`` for the program but out of the prompt and the embedding
#: text (they were 430 characters around an 80-character passage).
LLM_METADATA_KEYS = ("title", "concept_id")


class KnowbaseRetriever(BaseRetriever):
    """Hybrid (or BM25-only) search of one base, as ``NodeWithScore`` objects.

    Each node's text is the cited passage, its id the chunk id, its ``metadata`` the citation
    (``concept_id``, ``locator``, ``score_kind``, ``title``, ``source``, offsets, base); the
    node's score is the search score; only ``title`` and ``concept_id`` reach the LLM
    (:data:`LLM_METADATA_KEYS`), none of it the embedding text. Filters (``under``, ``types``,
    ``since``, ``tags``, ``where``) and ``context`` as ``kb search``. ``aretrieve`` does not
    block the event loop.
    """

    def __init__(
        self,
        base: str,
        *,
        top_k: int = 5,
        home: str | Path | None = None,
        url: str | None = None,
        token: str | None = None,
        knowledge: Any = None,
        under: str | None = None,
        types: list[str] | None = None,
        since: str | None = None,
        tags: list[str] | None = None,
        where: dict[str, Any] | list[str] | None = None,
        context: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.top_k = top_k
        self.filters = {
            "under": under,
            "types": types,
            "since": since,
            "tags": tags,
            "where": where,
            "context": context,
        }
        self._source = HitSource(base, knowledge=knowledge, home=home, url=url, token=token)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return _nodes(self._source.search(query_bundle.query_str, self.top_k, self.filters))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = await self._source.asearch(query_bundle.query_str, self.top_k, self.filters)
        return _nodes(hits)

    def close(self) -> None:
        """Close the home this retriever opened (a ``knowledge`` given to it stays open)."""
        self._source.close()


def _nodes(hits: list[Hit]) -> list[NodeWithScore]:
    out = []
    for h in hits:
        hidden = [k for k in h.metadata if k not in LLM_METADATA_KEYS]
        node = TextNode(
            text=h.text,
            id_=h.metadata.get("chunk_id"),
            metadata=h.metadata,
            excluded_llm_metadata_keys=hidden,
            excluded_embed_metadata_keys=list(h.metadata),
        )
        out.append(NodeWithScore(node=node, score=h.score))
    return out
