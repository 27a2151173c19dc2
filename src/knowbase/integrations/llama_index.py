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

from knowbase.integrations.hits import HitSource


class KnowbaseRetriever(BaseRetriever):
    """Hybrid (or BM25-only) search of one base, as ``NodeWithScore`` objects.

    Each node's text is the cited passage, its id the chunk id, its ``metadata`` the citation
    (``concept_id``, ``locator``, ``score_kind``, ``title``, ``source``, offsets, base); the
    node's score is the search score. Filters (``under``, ``types``, ``since``) as ``kb search``.
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.top_k = top_k
        self.filters = {"under": under, "types": types, "since": since}
        self._source = HitSource(base, knowledge=knowledge, home=home, url=url, token=token)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self._source.search(query_bundle.query_str, self.top_k, self.filters)
        return [
            NodeWithScore(
                node=TextNode(text=h.text, id_=h.metadata.get("chunk_id"), metadata=h.metadata),
                score=h.score,
            )
            for h in hits
        ]

    def close(self) -> None:
        """Close the home this retriever opened (a ``knowledge`` given to it stays open)."""
        self._source.close()
