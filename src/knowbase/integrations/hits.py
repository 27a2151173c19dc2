"""Where a framework retriever gets its hits: an embedded home or a ``kb serve`` URL.

Both answer the same plain :class:`Hit` list, so the framework adapters only translate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowbase.errors import (
    Conflict,
    InvalidInput,
    KnowbaseError,
    NotFound,
    ProviderError,
    Unavailable,
)

# kb serve's status → the error class a local call would have raised
_BY_STATUS: dict[int, type[KnowbaseError]] = {
    404: NotFound, 409: Conflict, 422: InvalidInput, 502: ProviderError, 503: Unavailable,
}

if TYPE_CHECKING:
    from knowbase.service import Knowledge


@dataclass(frozen=True)
class Hit:
    """One search result, as the adapters hand it on (metadata keeps the citation)."""

    text: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)


def metadata_of(result: dict[str, Any]) -> dict[str, Any]:
    """The citation fields of a search result (a dict shaped like the HTTP API's)."""
    keys = (
        "concept_id", "title", "source", "item_type", "locator", "score", "score_kind",
        "char_start", "char_end", "chunk_id", "item_id", "base_id", "base_name", "rank",
    )
    return {k: result[k] for k in keys if result.get(k) not in (None, {}, "")}


class HitSource:
    """Searches one base: embedded (``knowledge`` or ``home``) or remote (``url``).

    Exactly one of ``knowledge``, ``home`` and ``url`` is used, in that order of preference;
    with none of them the default home (``KNOWBASE_HOME`` or the platform's data dir) is opened.
    """

    def __init__(
        self,
        base: str,
        *,
        knowledge: Knowledge | None = None,
        home: str | Path | None = None,
        url: str | None = None,
        token: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        if not base:
            raise InvalidInput("a base name or id is required")
        self.base, self.url, self.token, self.timeout = base, url, token, timeout
        self._knowledge, self._home, self._owned = knowledge, home, False

    def _kb(self) -> Knowledge:
        if self._knowledge is None:
            from knowbase import Knowledge, load_settings

            self._knowledge = Knowledge(load_settings(self._home))
            self._owned = True
        return self._knowledge

    def search(self, query: str, top_k: int, filters: dict[str, Any]) -> list[Hit]:
        if self.url and self._knowledge is None and self._home is None:
            return self._remote(query, top_k, filters)
        kb = self._kb()
        response = kb.search(self.base, query, top_k=top_k, **filters)
        base = kb.get_base(self.base)
        hits = []
        for r in response.results:
            result = {**vars(r), "base_id": base.id, "base_name": base.name}
            hits.append(Hit(r.text, float(r.score), metadata_of(result)))
        return hits

    def _remote(self, query: str, top_k: int, filters: dict[str, Any]) -> list[Hit]:
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        body = {"query": query, "top_k": top_k, **{k: v for k, v in filters.items() if v}}
        endpoint = f"{self.url.rstrip('/')}/bases/{self.base}/search"  # type: ignore[union-attr]
        try:
            r = httpx.post(endpoint, json=body, headers=headers, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise Unavailable(f"kb serve at {self.url} cannot be reached: {exc}") from exc
        if r.status_code != 200:
            try:
                error = r.json()
            except ValueError:
                error = {"message": r.text[:200]}
            cls = _BY_STATUS.get(r.status_code, KnowbaseError)
            message = error.get("message") or f"HTTP {r.status_code}"
            raise cls(message, remote_code=error.get("code"), status=r.status_code)
        return [Hit(x["text"], float(x["score"]), metadata_of(x)) for x in r.json()["results"]]

    def close(self) -> None:
        if self._owned and self._knowledge is not None:
            self._knowledge.close()
        self._knowledge, self._owned = None, False
