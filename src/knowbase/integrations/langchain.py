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

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, PrivateAttr, SecretStr

from knowbase.integrations.hits import Hit, HitSource


class KnowbaseRetriever(BaseRetriever):
    """Hybrid (or BM25-only) search of one base, as LangChain ``Document`` objects.

    ``metadata`` carries the citation: ``concept_id``, ``locator`` (page, sheet, heading…),
    ``score`` and ``score_kind``, ``title``, ``source``, char offsets and the base. Filters
    (``under``, ``types``, ``since``, ``tags``, ``where``) narrow the search as ``kb search``
    does; ``context`` (tokens) returns each hit with its surroundings. ``token`` is a
    ``SecretStr``: ``repr`` and ``model_dump`` (and so tracing) never show it. ``ainvoke``
    does not block the event loop.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base: str
    top_k: int = 5
    home: str | Path | None = None
    url: str | None = None
    token: SecretStr | None = None
    knowledge: Any = None  # a knowbase.Knowledge to reuse instead of opening one
    under: str | None = None
    types: list[str] | None = None
    since: str | None = None
    tags: list[str] | None = None
    where: dict[str, Any] | list[str] | None = None
    context: int | None = None
    _source: HitSource | None = PrivateAttr(default=None)

    def _hits(self) -> HitSource:
        if self._source is None:
            self._source = HitSource(
                self.base,
                knowledge=self.knowledge,
                home=self.home,
                url=self.url,
                token=self.token,
            )
        return self._source

    def _filters(self) -> dict[str, Any]:
        names = ("under", "types", "since", "tags", "where", "context")
        return {name: getattr(self, name) for name in names}

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return _documents(self._hits().search(query, self.top_k, self._filters()))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return _documents(await self._hits().asearch(query, self.top_k, self._filters()))

    def close(self) -> None:
        """Close the home this retriever opened (a ``knowledge`` given to it stays open)."""
        if self._source is not None:
            self._source.close()
            self._source = None


def _documents(hits: list[Hit]) -> list[Document]:
    return [
        Document(page_content=h.text, metadata=h.metadata, id=h.metadata.get("chunk_id"))
        for h in hits
    ]
