"""Providers chosen by model id ``profile:model``, one instance per id and profile per process.

The id is split at the FIRST colon, so a model name may hold colons (``ollama:bge-m3:latest``).
Profiles:

- ``local`` — the bundled ``all-minilm-l6-v2`` or its int8 graph ``all-minilm-l6-v2-int8``
  (both need ``knowbase[local]``) or
  ``multilingual-e5-small`` (needs ``knowbase[multilingual]``), embeddings only;
- ``hash`` — the deterministic test provider (:mod:`knowbase.providers.hashing_provider`),
  only when ``Settings.test_providers`` is on (``KNOWBASE_TEST_PROVIDERS=1``; the test suite sets
  it): otherwise any client could pick unbounded sleeps and sizes, so it is an unknown profile;
- any name in ``Settings.providers`` — an OpenAI-compatible HTTP endpoint (``/embeddings``,
  ``/rerank``). The built-in names win over a profile of the same name.

:func:`check_model_id` is the one validation of an id every entrance calls (create a base,
enable embedding, set a reranker): syntax, known profile and, for built-ins, the model itself —
no I/O, so a bad id is refused before anything is written.

Instances are cached so the local model is loaded once per process and its lock serialises
every caller; remote providers are cached per (id, profile) so a changed ``base_url`` or key
variable gets a fresh client. Keys stay in the environment: only the id goes in the catalog.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Literal

from knowbase.errors import EmbeddingMismatch, InvalidInput
from knowbase.providers.base import MAX_DIMENSIONS, EmbeddingProvider, RerankProvider
from knowbase.settings import ProviderProfile, Settings

BUILTIN_EMBEDDING_PROFILES = ("local", "hash")
BUILTIN_RERANK_PROFILES = ("hash",)
TEST_PROFILES = frozenset({"hash"})
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


def _builtins(builtins: tuple[str, ...], settings: Settings) -> tuple[str, ...]:
    """The built-in profiles these settings offer (the test ones only when enabled)."""
    return tuple(p for p in builtins if settings.test_providers or p not in TEST_PROFILES)


def _unknown_profile(
    model_id: str, profile: str, builtins: tuple[str, ...], settings: Settings
) -> InvalidInput:
    builtins = _builtins(builtins, settings)
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


def check_model_id(
    model_id: str | None, settings: Settings, *, kind: Literal["embedding", "rerank"] = "embedding"
) -> str:
    """``model_id`` when it names a usable ``kind`` model; else :class:`InvalidInput`.

    ``profile:model`` with both parts non-empty, a profile these settings know for ``kind``
    (``hash`` only with ``test_providers``), and for built-ins a model they have (``local``'s
    one name, a ``hash`` spec within :data:`MAX_DIMENSIONS` and the delay cap). No I/O: a
    remote model is checked when it is first used.

    >>> check_model_id("", settings)  # doctest: +SKIP
    Traceback (most recent call last):
    knowbase.errors.InvalidInput: model id '' must look like 'profile:model', …
    """
    if not isinstance(model_id, str):
        raise InvalidInput(f"model id {model_id!r} must be a string", model_id=model_id)
    if kind == "embedding":
        _embedding_builder(model_id, settings)
    else:
        _rerank_builder(model_id, settings)
    return model_id


def check_base_models(
    settings: Settings,
    *,
    embedding_model_id: str | None = None,
    dimensions: int | None = None,
    rerank_model_id: str | None = None,
) -> None:
    """The models a base is created or updated with: each id given (None: not set) passes
    :func:`check_model_id`; ``dimensions``, when given, lies in 1..MAX_DIMENSIONS."""
    if embedding_model_id is not None:
        check_model_id(embedding_model_id, settings)
    if rerank_model_id is not None:
        check_model_id(rerank_model_id, settings, kind="rerank")
    if dimensions is not None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int):
            raise InvalidInput("dimensions must be an integer", dimensions=dimensions)
        if not 1 <= dimensions <= MAX_DIMENSIONS:
            raise InvalidInput(
                f"dimensions must lie in 1..{MAX_DIMENSIONS:,}", dimensions=dimensions
            )


def _one_blas_thread() -> None:
    """numpy's BLAS runs one thread in a process that runs a local model: the policy of
    ``providers.local._quiet_numpy_blas``, set before numpy loads so that OpenBLAS never
    starts its pool. Its threads, started beside the model's first forward pass, cost a cold
    hybrid ``kb search`` ~0.1-0.2 s of wall on a loaded two-core machine (0.97 -> 0.83 s
    wall, 0.71 -> 0.66 s CPU; issue 39 item 5). A value the user set is kept; with numpy
    already loaded this does nothing, and ``_quiet_numpy_blas`` caps the pool once the model
    runs."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _embedding_builder(model_id: str, settings: Settings) -> tuple[str, Any, Any]:
    """(cache key id, profile, build) for a valid embedding id; raises InvalidInput."""
    profile_name, model = parse_model_id(model_id)
    if profile_name == "local":
        _one_blas_thread()  # before the local models' modules load numpy
        from knowbase.providers import multilingual
        from knowbase.providers.local import INT8_NAME, NAMES, LocalMiniLM, LocalMiniLMInt8

        if model.lower() == multilingual.MODEL_NAME:
            return multilingual.MODEL_ID, None, multilingual.MultilingualE5
        if model.lower() not in NAMES:
            known = [*NAMES, multilingual.MODEL_NAME]
            raise InvalidInput(
                f"the local profile has {', '.join(map(repr, known))}, not {model!r}",
                model_id=model_id,
                known=[f"local:{n}" for n in known],
            )
        build = LocalMiniLMInt8 if model.lower() == INT8_NAME else LocalMiniLM
        return f"local:{model.lower()}", None, build
    if profile_name == "hash" and settings.test_providers:
        from knowbase.providers.hashing_provider import HashEmbeddings

        provider = HashEmbeddings(model)  # cheap; validates the spec now
        return f"hash:{model}", None, lambda: provider
    profile = settings.providers.get(profile_name)
    if profile is None or profile_name in BUILTIN_EMBEDDING_PROFILES:
        raise _unknown_profile(model_id, profile_name, BUILTIN_EMBEDDING_PROFILES, settings)
    from knowbase.providers.openai_http import OpenAIEmbeddings

    return f"{profile_name}:{model}", profile, lambda: OpenAIEmbeddings(profile, model)


def _rerank_builder(model_id: str, settings: Settings) -> tuple[str, Any, Any]:
    """(cache key id, profile, build) for a valid rerank id; raises InvalidInput."""
    profile_name, model = parse_model_id(model_id)
    if profile_name == "hash" and settings.test_providers:
        from knowbase.providers.hashing_provider import HashReranker

        return f"hash:{model}", None, lambda: HashReranker(model)
    profile = settings.providers.get(profile_name)
    if profile is None or profile_name in BUILTIN_RERANK_PROFILES:
        raise _unknown_profile(model_id, profile_name, BUILTIN_RERANK_PROFILES, settings)
    from knowbase.providers.rerank_http import HttpReranker

    return f"{profile_name}:{model}", profile, lambda: HttpReranker(profile, model)


def get_embedding_provider(model_id: str, settings: Settings) -> EmbeddingProvider:
    """The embedding provider for ``model_id``; raises InvalidInput or MissingExtra.

    >>> get_embedding_provider("hash:d8", settings).dims  # doctest: +SKIP
    8
    """
    key, profile, build = _embedding_builder(model_id, settings)
    return _cached("embed", key, profile, build)


def get_rerank_provider(model_id: str, settings: Settings) -> RerankProvider:
    """The rerank provider for ``model_id`` (``hash:…`` or a profile's ``/rerank``)."""
    key, profile, build = _rerank_builder(model_id, settings)
    return _cached("rerank", key, profile, build)


def probe_dims(provider: EmbeddingProvider) -> int:
    """The provider's declared width, or the width of one probe embedding."""
    if provider.dims:
        return int(provider.dims)
    vectors = provider.embed([PROBE_TEXT])
    if vectors.ndim != 2 or vectors.shape[0] != 1 or not 0 < vectors.shape[1] <= MAX_DIMENSIONS:
        raise EmbeddingMismatch(
            f"{provider.model_id}: the probe embedding has shape {vectors.shape} "
            f"(at most {MAX_DIMENSIONS:,} dimensions)",
            model_id=provider.model_id,
        )
    return int(vectors.shape[1])


def probe_model(settings: Settings, model_id: str, dims: int | None) -> tuple[int, int | None]:
    """``(dimensions, window)`` of a model: ``dims`` when given, else asked of the provider."""
    provider = get_embedding_provider(model_id, settings)
    probed = probe_dims(provider) if dims is None else dims
    return probed, provider.window


def clear_cache() -> None:
    """Forget every cached provider (tests; a settings reload). Open clients are closed."""
    with _cache_lock:
        providers = list(_cache.values())
        _cache.clear()
    for provider in providers:
        close = getattr(provider, "close", None)
        if close is not None:
            close()
