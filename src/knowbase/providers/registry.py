"""Providers chosen by model id ``profile:model``, one instance per id and profile per process.

The id is split at the FIRST colon, so a model name may hold colons (``ollama:bge-m3:latest``).
Profiles:

- ``local`` — the bundled ``all-minilm-l6-v2`` (needs ``knowbase[local]``) or
  ``multilingual-e5-small`` (needs ``knowbase[multilingual]``), embeddings only;
- ``hash`` — the deterministic test provider (:mod:`knowbase.providers.hashing_provider`);
- any name in ``Settings.providers`` — an OpenAI-compatible HTTP endpoint (``/embeddings``,
  ``/rerank``). The built-in names win over a profile of the same name.

Instances are cached so the local model is loaded once per process and its lock serialises
every caller; remote providers are cached per (id, profile) so a changed ``base_url`` or key
variable gets a fresh client. Keys stay in the environment: only the id goes in the catalog.
"""

from __future__ import annotations

import threading
from typing import Any

from knowbase.errors import EmbeddingMismatch, InvalidInput
from knowbase.providers.base import EmbeddingProvider, RerankProvider
from knowbase.settings import ProviderProfile, Settings

BUILTIN_EMBEDDING_PROFILES = ("local", "hash")
BUILTIN_RERANK_PROFILES = ("hash",)
PROBE_TEXT = "dimension probe"

_cache: dict[tuple[str, str, ProviderProfile | None], Any] = {}
_cache_lock = threading.Lock()


def parse_model_id(model_id: str) -> tuple[str, str]:
    """Split ``profile:model`` at the first colon.

    >>> parse_model_id("ollama:bge-m3:latest")
    ('ollama', 'bge-m3:latest')
    """
    profile, colon, model = str(model_id).strip().partition(":")
    profile, model = profile.strip(), model.strip()
    if not colon or not profile or not model:
        raise InvalidInput(
            f"model id {model_id!r} must look like 'profile:model', e.g. 'local:all-minilm-l6-v2'",
            model_id=model_id,
        )
    return profile, model


def _unknown_profile(
    model_id: str, profile: str, builtins: tuple[str, ...], settings: Settings
) -> InvalidInput:
    known = [*builtins, *sorted(p for p in settings.providers if p not in builtins)]
    return InvalidInput(
        f"unknown provider profile {profile!r} in {model_id!r}; known: {', '.join(known)}",
        hint="add a [providers.<name>] table with base_url (and api_key_env) to config.toml",
        model_id=model_id,
        profile=profile,
        known=known,
    )


def _cached(kind: str, model_id: str, profile: ProviderProfile | None, build: Any) -> Any:
    key = (kind, model_id, profile)
    # Held while building so two threads never load the local model twice; building is cheap
    # (the weights load on first use), so the lock is short.
    with _cache_lock:
        provider = _cache.get(key)
        if provider is None:
            provider = _cache[key] = build()
        return provider


def get_embedding_provider(model_id: str, settings: Settings) -> EmbeddingProvider:
    """The embedding provider for ``model_id``; raises InvalidInput or MissingExtra.

    >>> get_embedding_provider("hash:d8", settings).dims  # doctest: +SKIP
    8
    """
    profile_name, model = parse_model_id(model_id)
    if profile_name == "local":
        from knowbase.providers import multilingual
        from knowbase.providers.local import MODEL_NAME, LocalMiniLM

        if model.lower() == multilingual.MODEL_NAME:
            return _cached("embed", multilingual.MODEL_ID, None, multilingual.MultilingualE5)
        if model.lower() != MODEL_NAME:
            raise InvalidInput(
                f"the local profile has {MODEL_NAME!r} and {multilingual.MODEL_NAME!r}, "
                f"not {model!r}",
                model_id=model_id,
                known=[f"local:{MODEL_NAME}", multilingual.MODEL_ID],
            )
        return _cached("embed", f"local:{MODEL_NAME}", None, LocalMiniLM)
    if profile_name == "hash":
        from knowbase.providers.hashing_provider import HashEmbeddings

        return _cached("embed", f"hash:{model}", None, lambda: HashEmbeddings(model))
    profile = settings.providers.get(profile_name)
    if profile is None:
        raise _unknown_profile(model_id, profile_name, BUILTIN_EMBEDDING_PROFILES, settings)
    from knowbase.providers.openai_http import OpenAIEmbeddings

    return _cached(
        "embed", f"{profile_name}:{model}", profile, lambda: OpenAIEmbeddings(profile, model)
    )


def get_rerank_provider(model_id: str, settings: Settings) -> RerankProvider:
    """The rerank provider for ``model_id`` (``hash:…`` or a profile's ``/rerank``)."""
    profile_name, model = parse_model_id(model_id)
    if profile_name == "hash":
        from knowbase.providers.hashing_provider import HashReranker

        return _cached("rerank", f"hash:{model}", None, lambda: HashReranker(model))
    profile = settings.providers.get(profile_name)
    if profile is None:
        raise _unknown_profile(model_id, profile_name, BUILTIN_RERANK_PROFILES, settings)
    from knowbase.providers.rerank_http import HttpReranker

    return _cached(
        "rerank", f"{profile_name}:{model}", profile, lambda: HttpReranker(profile, model)
    )


def probe_dims(provider: EmbeddingProvider) -> int:
    """The provider's declared width, or the width of one probe embedding."""
    if provider.dims:
        return int(provider.dims)
    vectors = provider.embed([PROBE_TEXT])
    if vectors.ndim != 2 or vectors.shape[0] != 1 or vectors.shape[1] == 0:
        raise EmbeddingMismatch(
            f"{provider.model_id}: the probe embedding has shape {vectors.shape}",
            model_id=provider.model_id,
        )
    return int(vectors.shape[1])


def clear_cache() -> None:
    """Forget every cached provider (tests; a settings reload). Open clients are closed."""
    with _cache_lock:
        providers = list(_cache.values())
        _cache.clear()
    for provider in providers:
        close = getattr(provider, "close", None)
        if close is not None:
            close()
