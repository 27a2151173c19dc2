"""OpenAI-compatible HTTP embeddings: OpenAI, Ollama (``/v1``), LM Studio, vLLM, Jina…

Every server that speaks ``POST {base_url}/embeddings`` with ``{"model", "input": [...]}`` and
answers ``{"data": [{"index", "embedding"}]}`` works. httpx errors are mapped to knowbase errors
here, once (:func:`post_json`, shared with the rerank client):

- connect errors, timeouts, broken connections, HTTP 5xx and 429 → ``ProviderUnavailable``
  (transient: retrying later may work; ``details["status"]`` holds the HTTP status);
- any other 4xx, or a 2xx body that is not JSON → ``ProviderError`` with the server's message;
- a wrong vector count, an empty vector or a width that differs → ``EmbeddingMismatch``.

The API key is read from the profile's env variable at call time and never logged or stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from knowbase.errors import EmbeddingMismatch, ProviderError, ProviderUnavailable
from knowbase.settings import ProviderProfile


def _server_message(response: httpx.Response) -> str:
    """The error text a server put in its body, whatever dialect it speaks."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(body, dict):
        # OpenAI/LM Studio: {"error": {"message"}}; Ollama: {"error": "..."};
        # vLLM/FastAPI/Jina: {"detail": ...}; Cohere: {"message": ...}.
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:500]
        for key in ("error", "detail", "message"):
            if body.get(key):
                return str(body[key])[:500]
    return str(body)[:500]


def post_json(
    client: httpx.Client,
    url: str,
    payload: dict[str, Any],
    *,
    api_key: str | None,
    model_id: str,
) -> Any:
    """POST ``payload`` to ``url``; return the decoded JSON answer, errors mapped (see module)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = client.post(url, json=payload, headers=headers)
    except httpx.TimeoutException as exc:
        raise ProviderUnavailable(
            f"{model_id}: {url} did not answer in time", model_id=model_id, url=url, status=None
        ) from exc
    except httpx.TransportError as exc:  # connection refused, DNS, reset, protocol errors
        raise ProviderUnavailable(
            f"{model_id}: cannot reach {url} ({type(exc).__name__}: {exc})",
            hint="check that the server is running and the profile's base_url is right",
            model_id=model_id,
            url=url,
            status=None,
        ) from exc
    status = response.status_code
    if status == 429 or status >= 500:
        raise ProviderUnavailable(
            f"{model_id}: {url} answered {status}: {_server_message(response)}",
            model_id=model_id,
            url=url,
            status=status,
            retry_after=response.headers.get("retry-after"),
        )
    if status >= 400:
        hint = None
        if status in (401, 403):
            hint = "check the API key in the env variable the provider profile names (api_key_env)"
        elif status == 404:
            hint = "check the model name and the profile's base_url (Ollama needs …/v1)"
        raise ProviderError(
            f"{model_id}: {url} answered {status}: {_server_message(response)}",
            hint=hint,
            model_id=model_id,
            url=url,
            status=status,
        )
    try:
        return response.json()
    except ValueError as exc:
        raise ProviderError(
            f"{model_id}: {url} answered {status} with a body that is not JSON",
            model_id=model_id,
            url=url,
            status=status,
        ) from exc


class OpenAIEmbeddings:
    """Embeddings from an OpenAI-compatible endpoint named by a provider profile.

    ``dims`` is the width to ask for (sent as ``dimensions``, which only some servers
    understand) and to check; without it the width of the first answer is learned and every
    later vector must match it. ``window`` is the model's input limit in tokens, if known.

        >>> provider = OpenAIEmbeddings(ProviderProfile("ollama", "http://localhost:11434/v1"),
        ...                             "nomic-embed-text")
        >>> provider.embed(["hello"]).shape  # doctest: +SKIP
        (1, 768)
    """

    scripts: frozenset[str] | None = None  # remote models are assumed multilingual

    def __init__(
        self,
        profile: ProviderProfile,
        model: str,
        *,
        dims: int | None = None,
        window: int | None = None,
        batch_size: int | None = None,
        max_in_flight: int | None = None,
        client: httpx.Client | None = None,
        timeout: float = 60,
    ) -> None:
        batch_size = batch_size or profile.batch_size
        max_in_flight = max_in_flight or profile.max_in_flight
        if batch_size < 1 or max_in_flight < 1:
            raise ValueError("batch_size and max_in_flight must be >= 1")
        self.profile = profile
        self.model = model
        self.model_id = f"{profile.name}:{model}"
        self.dims = dims
        self._ask_dims = dims is not None
        self.window = window
        self.batch_size = batch_size
        #: requests the embedding batcher keeps open at once (httpx.Client is thread-safe)
        self.max_in_flight = max_in_flight
        self._owns_client = client is None
        self._client = client or httpx.Client(timeout=timeout)
        self.url = profile.base_url.rstrip("/") + "/embeddings"

    def count_tokens(self, text: str) -> int | None:
        """Remote tokenizers are unknown: callers fall back to an estimate."""
        return None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in batches of ``batch_size``; float32, one row per text, in order."""
        rows: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            rows.append(self._embed_batch(list(texts[start : start + self.batch_size])))
        if not rows:
            return np.zeros((0, self.dims or 0), dtype=np.float32)
        return np.concatenate(rows, axis=0)

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        payload: dict[str, Any] = {"model": self.model, "input": batch}
        if self._ask_dims:
            payload["dimensions"] = self.dims
        body = post_json(
            self._client, self.url, payload, api_key=self.profile.api_key(), model_id=self.model_id
        )
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise ProviderError(
                f"{self.model_id}: the answer has no 'data' list", model_id=self.model_id
            )
        if len(data) != len(batch):
            raise EmbeddingMismatch(
                f"{self.model_id}: asked for {len(batch)} vectors, got {len(data)}",
                model_id=self.model_id,
                expected=len(batch),
                got=len(data),
            )
        vectors = self._in_input_order(data)
        widths = {len(v) for v in vectors}
        if 0 in widths:
            raise EmbeddingMismatch(
                f"{self.model_id}: the server returned an empty vector", model_id=self.model_id
            )
        expected = self.dims or next(iter(widths))
        if widths != {expected}:
            raise EmbeddingMismatch(
                f"{self.model_id}: vector width {sorted(widths)} where {expected} was expected",
                model_id=self.model_id,
                expected=expected,
                got=sorted(widths),
            )
        try:
            array = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise ProviderError(
                f"{self.model_id}: an embedding holds something that is not a number",
                model_id=self.model_id,
            ) from exc
        if not np.isfinite(array).all():
            raise EmbeddingMismatch(
                f"{self.model_id}: an embedding holds NaN or infinity", model_id=self.model_id
            )
        self.dims = expected  # learned once, enforced from now on
        return array

    def _in_input_order(self, data: list[Any]) -> list[list[float]]:
        """Order answers by ``index`` (servers may shuffle); positional if no index is given."""
        n = len(data)
        vectors: list[Any] = [None] * n
        for position, entry in enumerate(data):
            if not isinstance(entry, dict) or not isinstance(entry.get("embedding"), list):
                raise ProviderError(
                    f"{self.model_id}: data[{position}] has no 'embedding' list",
                    model_id=self.model_id,
                )
            index = entry.get("index", position)
            if not isinstance(index, int) or not 0 <= index < n or vectors[index] is not None:
                raise EmbeddingMismatch(
                    f"{self.model_id}: data[{position}] has a bad or repeated index {index!r}",
                    model_id=self.model_id,
                )
            vectors[index] = entry["embedding"]
        return vectors

    def close(self) -> None:
        """Close the HTTP client if this provider created it."""
        if self._owns_client:
            self._client.close()
