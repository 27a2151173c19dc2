"""HTTP rerankers: ``POST {base_url}/rerank`` as Jina, Cohere, Voyage, TEI and vLLM serve it.

The request is ``{"model", "query", "documents", "top_n"}``; the answer is
``{"results": [{"index", "relevance_score"}]}`` (a bare list, or ``score`` instead of
``relevance_score`` as TEI sends, is accepted too). Entries with an index that is not one of the
documents, repeated, or with a score that is not a finite number are dropped: the spec keeps only
the returned indices (§7 step 8). Errors are mapped like the embeddings client's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx

from knowbase.errors import ProviderError
from knowbase.providers.base import RerankResult
from knowbase.providers.openai_http import post_json
from knowbase.settings import ProviderProfile


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_rerank_results(body: Any, n_documents: int, top_n: int) -> list[RerankResult]:
    """Valid results of a rerank answer, best first (ties by index), at most ``top_n``."""
    entries = body.get("results", body.get("data")) if isinstance(body, dict) else body
    if not isinstance(entries, list):
        raise ProviderError("the rerank answer has no 'results' list")
    seen: set[int] = set()
    results: list[RerankResult] = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        index = entry.get("index")
        score = entry.get("relevance_score", entry.get("score"))
        if isinstance(index, bool) or not isinstance(index, int) or not _finite_number(score):
            continue
        if not 0 <= index < n_documents or index in seen:
            continue
        seen.add(index)
        results.append(RerankResult(index=index, score=float(score)))
    results.sort(key=lambda r: (-r.score, r.index))
    return results[:top_n]


class HttpReranker:
    """A rerank model behind a provider profile, e.g. ``jina:jina-reranker-v2-base-multilingual``.

    >>> reranker = HttpReranker(ProviderProfile("jina", "https://api.jina.ai/v1", "JINA_KEY"),
    ...                         "jina-reranker-v2-base-multilingual")
    >>> reranker.rerank("password reset", ["flour", "reset your login"], 1)  # doctest: +SKIP
    [RerankResult(index=1, score=0.93)]
    """

    def __init__(
        self,
        profile: ProviderProfile,
        model: str,
        *,
        client: httpx.Client | None = None,
        timeout: float = 60,
    ) -> None:
        self.profile = profile
        self.model = model
        self.model_id = f"{profile.name}:{model}"
        self._owns_client = client is None
        self._client = client or httpx.Client(timeout=timeout)
        self.url = profile.base_url.rstrip("/") + "/rerank"

    def rerank(self, query: str, documents: Sequence[str], top_n: int) -> list[RerankResult]:
        """Return the chosen documents by index with relevance scores, best first."""
        if not documents or top_n <= 0:
            return []
        payload = {
            "model": self.model,
            "query": query,
            "documents": list(documents),
            "top_n": min(top_n, len(documents)),
        }
        body = post_json(
            self._client, self.url, payload, api_key=self.profile.api_key(), model_id=self.model_id
        )
        try:
            return parse_rerank_results(body, len(documents), top_n)
        except ProviderError as exc:
            raise ProviderError(f"{self.model_id}: {exc.message}", model_id=self.model_id) from exc

    def close(self) -> None:
        """Close the HTTP client if this reranker created it."""
        if self._owns_client:
            self._client.close()
