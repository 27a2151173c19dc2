"""A LangChain retriever over one knowbase base (``pip install 'knowbase[langchain]'``).

    from knowbase.integrations.langchain import KnowbaseRetriever

    retriever = KnowbaseRetriever(base="docs", top_k=5)          # the embedded default home
    retriever = KnowbaseRetriever(base="docs", url="http://127.0.0.1:8765")   # a kb serve
    docs = retriever.invoke("when does the vpn key rotate?")
    docs[0].metadata["concept_id"], docs[0].metadata["locator"], docs[0].metadata["score"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, PrivateAttr

from knowbase.integrations.hits import HitSource


class KnowbaseRetriever(BaseRetriever):
    """Hybrid (or BM25-only) search of one base, as LangChain ``Document`` objects.

    ``metadata`` carries the citation: ``concept_id``, ``locator`` (page, sheet, heading…),
    ``score`` and ``score_kind``, ``title``, ``source``, char offsets and the base. Filters
    (``under``, ``types``, ``since``) narrow the search as ``kb search`` does.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base: str
    top_k: int = 5
    home: str | Path | None = None
    url: str | None = None
    token: str | None = None
    knowledge: Any = None  # a knowbase.Knowledge to reuse instead of opening one
    under: str | None = None
    types: list[str] | None = None
    since: str | None = None
    _source: HitSource | None = PrivateAttr(default=None)

    def _hits(self) -> HitSource:
        if self._source is None:
            self._source = HitSource(
                self.base, knowledge=self.knowledge, home=self.home, url=self.url,
                token=self.token,
            )
        return self._source

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        filters = {"under": self.under, "types": self.types, "since": self.since}
        hits = self._hits().search(query, self.top_k, filters)
        return [
            Document(page_content=h.text, metadata=h.metadata, id=h.metadata.get("chunk_id"))
            for h in hits
        ]

    def close(self) -> None:
        """Close the home this retriever opened (a ``knowledge`` given to it stays open)."""
        if self._source is not None:
            self._source.close()
            self._source = None
