"""Model ids, profiles, caching and lazy imports of the provider registry."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from knowbase.errors import EmbeddingMismatch, InvalidInput
from knowbase.providers.hashing_provider import HashEmbeddings, HashReranker
from knowbase.providers.openai_http import OpenAIEmbeddings
from knowbase.providers.registry import (
    MAX_DIMENSIONS,
    check_base_models,
    check_model_id,
    clear_cache,
    get_embedding_provider,
    get_rerank_provider,
    parse_model_id,
    probe_dims,
)
from knowbase.settings import ProviderProfile, Settings


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        home=tmp_path,
        test_providers=True,
        providers={
            "ollama": ProviderProfile("ollama", "http://127.0.0.1:11434/v1"),
            "openai": ProviderProfile("openai", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        },
    )


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("local:all-minilm-l6-v2", ("local", "all-minilm-l6-v2")),
        ("ollama:bge-m3:latest", ("ollama", "bge-m3:latest")),
        (" openai:text-embedding-3-small ", ("openai", "text-embedding-3-small")),
        ("hash:d64?delay=0.2", ("hash", "d64?delay=0.2")),
    ],
)
def test_parse_splits_at_the_first_colon(model_id: str, expected: tuple[str, str]) -> None:
    assert parse_model_id(model_id) == expected


@pytest.mark.parametrize("model_id", ["all-minilm-l6-v2", "", ":model", "local:", " : "])
def test_parse_rejects_ids_without_both_parts(model_id: str) -> None:
    with pytest.raises(InvalidInput, match="profile:model"):
        parse_model_id(model_id)


def test_unknown_profile_lists_the_known_ones(settings: Settings) -> None:
    with pytest.raises(InvalidInput, match="unknown provider profile 'cohere'") as info:
        get_embedding_provider("cohere:embed-v4", settings)
    assert info.value.details["known"] == ["local", "hash", "ollama", "openai"]
    with pytest.raises(InvalidInput) as info:
        get_rerank_provider("local:all-minilm-l6-v2", settings)  # no local reranker
    assert info.value.details["known"] == ["hash", "ollama", "openai"]


def test_local_profile_has_one_model(settings: Settings) -> None:
    with pytest.raises(InvalidInput, match="all-minilm-l6-v2"):
        get_embedding_provider("local:bge-small", settings)


def test_profiles_give_http_providers_cached_per_profile(settings: Settings) -> None:
    provider = get_embedding_provider("ollama:nomic-embed-text", settings)
    assert isinstance(provider, OpenAIEmbeddings)
    assert provider.url == "http://127.0.0.1:11434/v1/embeddings"
    assert provider.model_id == "ollama:nomic-embed-text"
    assert get_embedding_provider("ollama:nomic-embed-text", settings) is provider
    moved = settings.with_(
        providers={"ollama": ProviderProfile("ollama", "http://10.0.0.2:11434/v1")}
    )
    assert get_embedding_provider("ollama:nomic-embed-text", moved) is not provider


def test_hash_providers_are_cached_per_id(settings: Settings) -> None:
    provider = get_embedding_provider("hash:d32", settings)
    assert isinstance(provider, HashEmbeddings) and provider.dims == 32
    assert get_embedding_provider("hash:d32", settings) is provider
    assert get_embedding_provider("hash:d16", settings) is not provider
    assert isinstance(get_rerank_provider("hash:default", settings), HashReranker)
    with pytest.raises(InvalidInput):
        get_embedding_provider("hash:wide", settings)


def test_one_local_instance_per_process_even_under_races(settings: Settings) -> None:
    got: list[object] = []
    threads = [
        threading.Thread(
            target=lambda: got.append(get_embedding_provider("local:All-MiniLM-L6-v2", settings))
        )
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 8 and all(p is got[0] for p in got)
    assert got[0].model_id == "local:all-minilm-l6-v2"  # type: ignore[attr-defined]
    assert got[0].dims == 384 and got[0].window == 256  # type: ignore[attr-defined]


class _Probe:
    """A provider that only knows its width after one embedding."""

    model_id = "probe:x"
    dims: int | None = None
    window = None
    scripts = None
    batch_size = 1

    def __init__(self, width: int) -> None:
        self.width = width
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.ones((len(texts), self.width), dtype=np.float32)

    def count_tokens(self, text: str) -> int | None:
        return None


def test_probe_dims_uses_declared_dims_or_one_probe(settings: Settings) -> None:
    assert probe_dims(get_embedding_provider("hash:d48", settings)) == 48
    probe = _Probe(7)
    assert probe_dims(probe) == 7 and probe.calls == [["dimension probe"]]
    with pytest.raises(EmbeddingMismatch):
        probe_dims(_Probe(0))


@pytest.mark.parametrize(
    ("model_id", "kind"),
    [
        ("", "embedding"),
        ("  ", "rerank"),
        (":m", "embedding"),
        ("hash:", "embedding"),
        ("cohere:x", "embedding"),
        ("local:all-minilm-l6-v2", "rerank"),  # no local reranker
        ("local:bge-small", "embedding"),
        (f"hash:d{MAX_DIMENSIONS + 1}", "embedding"),
        ("hash:d99999999", "embedding"),
        ("hash:d8?delay=5", "embedding"),
        ("hash:d8?delay=nan", "embedding"),
    ],
)
def test_check_model_id_refuses_unusable_ids(settings: Settings, model_id: str, kind) -> None:
    with pytest.raises(InvalidInput):
        check_model_id(model_id, settings, kind=kind)


def test_check_model_id_accepts_usable_ids_without_io(settings: Settings) -> None:
    for model_id in ("local:all-minilm-l6-v2", "ollama:bge-m3:latest", f"hash:d{MAX_DIMENSIONS}"):
        assert check_model_id(model_id, settings) == model_id
    assert check_model_id("openai:rerank-x", settings, kind="rerank") == "openai:rerank-x"
    assert check_model_id("hash:default", settings, kind="rerank") == "hash:default"


def test_hash_is_an_unknown_profile_unless_test_providers_are_on(settings: Settings) -> None:
    off = settings.with_(test_providers=False)
    for call in (
        lambda: check_model_id("hash:d8", off),
        lambda: check_model_id("hash:default", off, kind="rerank"),
        lambda: get_embedding_provider("hash:d8", off),
        lambda: get_rerank_provider("hash:default", off),
    ):
        with pytest.raises(InvalidInput, match="unknown provider profile 'hash'") as info:
            call()
        assert "hash" not in info.value.details["known"]
    assert get_embedding_provider("hash:d8", settings).dims == 8


def test_check_base_models_caps_dimensions(settings: Settings) -> None:
    check_base_models(settings, embedding_model_id="hash:d8", dimensions=MAX_DIMENSIONS)
    check_base_models(settings)  # nothing set: a BM25-only base
    for dims in (0, MAX_DIMENSIONS + 1, True):
        with pytest.raises(InvalidInput):
            check_base_models(settings, embedding_model_id="hash:d8", dimensions=dims)
    with pytest.raises(InvalidInput):
        check_base_models(settings, embedding_model_id="")
    with pytest.raises(InvalidInput):
        check_base_models(settings, rerank_model_id="")


def test_probe_dims_refuses_a_provider_wider_than_the_cap() -> None:
    assert probe_dims(_Probe(MAX_DIMENSIONS)) == MAX_DIMENSIONS
    with pytest.raises(EmbeddingMismatch):
        probe_dims(_Probe(MAX_DIMENSIONS + 1))


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_registry_and_local_provider_do_not_import_torch() -> None:
    result = _run(
        "import sys\n"
        "from pathlib import Path\n"
        "import knowbase\n"
        "from knowbase.providers.registry import get_embedding_provider\n"
        "from knowbase.settings import Settings\n"
        "p = get_embedding_provider('local:all-minilm-l6-v2', Settings(home=Path('.')))\n"
        "assert p.count_tokens('hello world') == 4, p.count_tokens('hello world')\n"
        "heavy = {'torch', 'sentence_transformers', 'transformers', 'onnxruntime'}\n"
        "heavy &= set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    assert result.returncode == 0, result.stderr


def test_missing_local_extra_names_the_install_command() -> None:
    result = _run(
        "import sys\n"
        "sys.modules['onnxruntime'] = None  # as if the extra were not installed\n"
        "from pathlib import Path\n"
        "from knowbase.errors import MissingExtra\n"
        "from knowbase.providers.registry import get_embedding_provider\n"
        "from knowbase.settings import Settings\n"
        "try:\n"
        "    get_embedding_provider('local:all-minilm-l6-v2', Settings(home=Path('.')))\n"
        "except MissingExtra as exc:\n"
        "    print(exc.code, exc)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("missing_extra ")
    assert "pip install 'knowbase[local]'" in result.stdout
