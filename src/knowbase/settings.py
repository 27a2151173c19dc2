"""Settings: flag, then ``KNOWBASE_*`` env, then ``$KNOWBASE_HOME/config.toml``, then defaults.

Only ``interfaces/`` calls :func:`load_settings`; everything else receives a ``Settings`` value.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ProviderProfile:
    """A named remote endpoint (``[providers.ollama]`` in config.toml)."""

    name: str
    base_url: str
    api_key_env: str | None = None
    kind: str = "openai"  # wire protocol: "openai" embeddings, "jina"/"cohere" rerank
    batch_size: int = 10  # texts per embeddings request
    max_in_flight: int = 4  # embeddings requests at once per process (keeps the server busy)

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True)
class Settings:
    """Everything a ``Knowledge`` needs to know about its home and providers."""

    home: Path
    database_url: str | None = None  # None → sqlite file catalog.sqlite under home
    providers: dict[str, ProviderProfile] = field(default_factory=dict)
    allow_local_urls: bool = False  # SSRF guard off (tests against loopback)
    max_file_bytes: int = 200 * 1024 * 1024
    # The address-space cap of the isolated reader process, per file (RLIMIT_AS, so virtual
    # memory); a file whose reading needs more fails ``too_large`` naming it (issue 41).
    reader_memory_mb: int = 1024
    # Job threads per worker process (per-queue concurrency): index jobs of one base share the
    # embedding batcher, so enough of them must run at once for its batches to fill while the
    # next documents are read. A job waiting for its vectors holds a thread: with 16, a remote
    # model (4 requests in flight) got 2.8 texts per request and 0.06 of its ceiling; 48 keeps
    # the per-document pipeline, not the thread count, the limit (bench/ingest.py). OCR and
    # file reads have seats of their own (operations/indexing/process_file.py and handler.py).
    workers: int = 48
    job_retention_days: float = 14  # terminal jobs older than this are pruned; <= 0 keeps all
    # Host names a server (kb serve, kb mcp --http) answers to besides its bound address and,
    # on loopback, localhost/127.0.0.1/[::1]; "*" turns the Host check off (http/guard.py).
    allowed_hosts: tuple[str, ...] = ()
    # Origins (``http://localhost:6274``) besides a server's own that may change state through
    # it (a console behind a proxy, a browser tool); "*" turns the Origin check off.
    allowed_origins: tuple[str, ...] = ()
    # The deterministic ``hash:`` provider is for tests only: off, it is an unknown profile.
    test_providers: bool = False
    # A base with at least this many vectors searches a faiss index re-scored in float32
    # (index/vector/quantized.py; needs the ``big`` extra); 0 keeps every base exact.
    quantized_lane_min_rows: int = 100_000
    # Where bases on the ``qdrant`` index backend keep their vectors: a server URL
    # (``http://host:6333``); None keeps them in Qdrant's local mode next to the base's index.
    qdrant_url: str | None = None
    # The material root (each base's raw/ copies and, on the sqlite backend, its index file).
    # Workers on several hosts sharing one PostgreSQL catalog mount the same folder here;
    # None: ``<home>/bases``.
    materials_root: Path | None = None
    # The index backend new bases get (index/backends.py); None: next to the catalog
    # (sqlite on an embedded home, postgres on a PostgreSQL catalog).
    default_index_backend: str | None = None
    # Keys Dify (or RAGFlow) presents to ``POST /retrieval`` (interfaces/http/external.py); the
    # endpoint exists only when at least one is set. Never stored in the catalog.
    external_api_keys: tuple[str, ...] = ()

    @property
    def catalog_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'catalog.sqlite'}"

    @property
    def bases_dir(self) -> Path:
        return self.materials_root or self.home / "bases"

    @property
    def locks_dir(self) -> Path:
        return self.home / "locks"

    @property
    def keep_out(self) -> tuple[str, ...]:
        """Real paths of the folders no source may read: the home and the bases' folder (their
        databases are live; docs/operations.md)."""
        return tuple(dict.fromkeys(os.path.realpath(p) for p in (self.home, self.bases_dir)))

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


def default_home() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("knowbase"))


def load_settings(home: str | Path | None = None, **overrides: Any) -> Settings:
    """Build settings from flags (``home``/``overrides``), env, config.toml and defaults."""
    env = os.environ
    home_path = Path(home or env.get("KNOWBASE_HOME") or default_home()).expanduser().resolve()
    config: dict[str, Any] = {}
    config_file = home_path / "config.toml"
    if config_file.is_file():
        config = tomllib.loads(config_file.read_text(encoding="utf-8"))
    profiles = {
        name: ProviderProfile(
            name=name,
            base_url=str(spec["base_url"]),
            api_key_env=spec.get("api_key_env"),
            kind=spec.get("kind", "openai"),
            batch_size=int(spec.get("batch_size", 10)),
            max_in_flight=int(spec.get("max_in_flight", 4)),
        )
        for name, spec in (config.get("providers") or {}).items()
    }
    if "openai" not in profiles:
        profiles["openai"] = ProviderProfile(
            "openai",
            env.get("KNOWBASE_OPENAI_BASE_URL", "https://api.openai.com/v1"),
            "OPENAI_API_KEY",
        )

    def pick(key: str, env_name: str, default: Any, cast: Any = str) -> Any:
        if overrides.get(key) is not None:
            return overrides[key]
        if env_name in env:
            return cast(env[env_name])
        if key in config:
            return cast(config[key])
        return default

    def truthy(v: Any) -> bool:
        return str(v).lower() in {"1", "true", "yes", "on"}

    def names(v: Any) -> tuple[str, ...]:
        """A list (config.toml) or a comma-separated string (env)."""
        items = v.split(",") if isinstance(v, str) else list(v)
        return tuple(s for s in (str(i).strip() for i in items) if s)

    return Settings(
        home=home_path,
        database_url=pick("database_url", "KNOWBASE_DATABASE_URL", None),
        providers=profiles,
        allow_local_urls=pick("allow_local_urls", "KNOWBASE_ALLOW_LOCAL_URLS", False, truthy),
        max_file_bytes=pick("max_file_bytes", "KNOWBASE_MAX_FILE_BYTES", 200 * 1024 * 1024, int),
        reader_memory_mb=pick("reader_memory_mb", "KNOWBASE_READER_MEMORY_MB", 1024, int),
        workers=pick("workers", "KNOWBASE_WORKERS", 48, int),
        job_retention_days=pick("job_retention_days", "KNOWBASE_JOB_RETENTION_DAYS", 14.0, float),
        allowed_hosts=pick("allowed_hosts", "KNOWBASE_ALLOWED_HOSTS", (), names),
        allowed_origins=pick("allowed_origins", "KNOWBASE_ALLOWED_ORIGINS", (), names),
        test_providers=pick("test_providers", "KNOWBASE_TEST_PROVIDERS", False, truthy),
        quantized_lane_min_rows=pick(
            "quantized_lane_min_rows", "KNOWBASE_QUANTIZED_LANE_MIN_ROWS", 100_000, int
        ),
        qdrant_url=pick("qdrant_url", "KNOWBASE_QDRANT_URL", None),
        materials_root=pick(
            "materials_root", "KNOWBASE_MATERIALS_ROOT", None, lambda v: Path(v).expanduser()
        ),
        default_index_backend=pick("default_index_backend", "KNOWBASE_INDEX_BACKEND", None),
        external_api_keys=pick("external_api_keys", "KNOWBASE_EXTERNAL_API_KEYS", (), names),
    )
