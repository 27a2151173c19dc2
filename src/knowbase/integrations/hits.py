"""Where a framework retriever gets its hits: an embedded home or a ``kb serve`` URL.

Both answer the same plain :class:`Hit` list and raise the same errors for the same request, so
the framework adapters only translate: ``top_k`` is checked here, once, for both modes, and an
error ``kb serve`` answers is raised as the class its ``code`` names (``no_searchable_tokens``
→ :class:`~knowbase.errors.NoSearchableTokens`, as the embedded search raises it). The token is
kept as a ``SecretStr``: a retriever's ``repr`` and a trace never show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pydantic import SecretStr

from knowbase.errors import (
    Conflict,
    InvalidInput,
    KnowbaseError,
    NotFound,
    ProviderError,
    Unavailable,
    all_error_classes,
)

# kb serve's status → the error class a local call would have raised (when its code is unknown)
_BY_STATUS: dict[int, type[KnowbaseError]] = {
    404: NotFound,
    409: Conflict,
    422: InvalidInput,
    502: ProviderError,
    503: Unavailable,
}
_BY_CODE: dict[str, type[KnowbaseError]] = {c.code: c for c in all_error_classes()}
MAX_TOP_K = 1000  # what kb serve's search accepts

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
        "concept_id",
        "title",
        "source",
        "item_type",
        "locator",
        "score",
        "score_kind",
        "char_start",
        "char_end",
        "chunk_id",
        "item_id",
        "base_id",
        "base_name",
        "rank",
    )
    return {k: result[k] for k in keys if result.get(k) not in (None, {}, "")}


def check_top_k(top_k: Any) -> None:
    """InvalidInput unless ``top_k`` is a whole number in 1..1000 (in both modes: embedded,
    0 would have meant "the base's default" and over HTTP an error)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInput(f"top_k must be 1..{MAX_TOP_K}", top_k=top_k)


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
        token: str | SecretStr | None = None,
        timeout: float = 60.0,
    ) -> None:
        if not base:
            raise InvalidInput("a base name or id is required")
        self.base, self.url, self.timeout = base, url, timeout
        self.token = SecretStr(token) if isinstance(token, str) else token
        self._knowledge, self._home, self._owned = knowledge, home, False

    @property
    def remote(self) -> bool:
        return bool(self.url) and self._knowledge is None and self._home is None

    def _kb(self) -> Knowledge:
        if self._knowledge is None:
            from knowbase import Knowledge, load_settings

            self._knowledge = Knowledge(load_settings(self._home))
            self._owned = True
        return self._knowledge

    def search(self, query: str, top_k: int, filters: dict[str, Any]) -> list[Hit]:
        """The base's hits for ``query``; ``filters`` as ``Knowledge.search`` takes them
        (``under``, ``types``, ``since``, ``tags``, ``where``, ``context``; None: unset)."""
        check_top_k(top_k)
        if self.remote:
            return self._answer(self._post(query, top_k, filters))
        kb = self._kb()
        set_filters = {k: v for k, v in filters.items() if v is not None}
        response = kb.search(self.base, query, top_k=top_k, **set_filters)
        base = kb.get_base(self.base)
        hits = []
        for r in response.results:
            result = {**vars(r), "base_id": base.id, "base_name": base.name}
            hits.append(Hit(r.text, float(r.score), metadata_of(result)))
        return hits

    async def asearch(self, query: str, top_k: int, filters: dict[str, Any]) -> list[Hit]:
        """:meth:`search` without blocking the event loop: over HTTP with an async client,
        embedded in a worker thread."""
        if not self.remote:
            import asyncio

            return await asyncio.to_thread(self.search, query, top_k, filters)
        import httpx

        check_top_k(top_k)
        endpoint, body, headers = self._request(query, top_k, filters)
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                r = await client.post(endpoint, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise Unavailable(f"kb serve at {self.url} cannot be reached: {exc}") from exc
        return self._answer(r)

    def _request(
        self, query: str, top_k: int, filters: dict[str, Any]
    ) -> tuple[str, dict[str, Any], dict[str, str]]:
        headers = {"Authorization": f"Bearer {self.token.get_secret_value()}"} if self.token else {}
        body = {"query": query, "top_k": top_k}
        body.update({k: v for k, v in filters.items() if v is not None})
        # quote: a base named "q?x" is one path segment, not a path and a query string
        base = quote(self.base, safe="")
        return f"{self.url.rstrip('/')}/bases/{base}/search", body, headers  # type: ignore[union-attr]

    def _post(self, query: str, top_k: int, filters: dict[str, Any]) -> Any:
        import httpx

        endpoint, body, headers = self._request(query, top_k, filters)
        try:
            return httpx.post(endpoint, json=body, headers=headers, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise Unavailable(f"kb serve at {self.url} cannot be reached: {exc}") from exc

    def _answer(self, r: Any) -> list[Hit]:
        if r.status_code != 200:
            try:
                error = r.json()
            except ValueError:
                error = {"message": r.text[:200]}
            code = error.get("code")
            cls = _BY_CODE.get(code) or _BY_STATUS.get(r.status_code, KnowbaseError)
            message = error.get("message") or f"HTTP {r.status_code}"
            raise cls(message, remote_code=code, status=r.status_code)
        return [Hit(x["text"], float(x["score"]), metadata_of(x)) for x in r.json()["results"]]

    def close(self) -> None:
        if self._owned and self._knowledge is not None:
            self._knowledge.close()
        self._knowledge, self._owned = None, False
