"""Shared fixtures: a home directory, a ``Knowledge`` over it, and two kinds of base.

- ``home``: an empty knowbase home under ``tmp_path``;
- ``kb``: ``Knowledge`` over ``home`` (no workers until a test starts them or waits);
- ``bm25_base``: a BM25-only base; ``hash_base``: a hybrid base on the deterministic
  ``hash:d64`` test provider (no model download, same vectors in every process);
- ``src``: a folder outside the home to add files and folders from;
- ``live_server``: ``live_server(app)`` serves an ASGI app with uvicorn on a free loopback port
  in a thread and returns its base URL; stopped at teardown.

Both bases pin ``file_processor_id=None`` so a machine with tesseract behaves like one without.
The hypothesis profile ``ci`` (no deadline: 2 shared cores make timings meaningless) is always
loaded. ``KNOWBASE_TEST_PROVIDERS=1`` is set for the whole run, so ``load_settings`` here and in
every ``kb`` / worker subprocess (they inherit the environment) offers the ``hash:`` provider;
settings built directly pass ``test_providers=True``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from knowbase.catalog.models import Base
from knowbase.service import Knowledge
from knowbase.settings import Settings

# the embedded PostgreSQL server, for tests/postgres and the backend conformance suite
from pg_server import pg_empty_url, pg_server, pg_url  # noqa: F401

settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.load_profile("ci")

os.environ["KNOWBASE_TEST_PROVIDERS"] = "1"

HASH_MODEL = "hash:d64"
pytest_plugins = ["_system_tools"]  # needs_system marker + the one-line "install X" summary


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


#: ``KB_TEST_BACKENDS=sqlite,postgres,qdrant`` runs every test that uses ``kb`` once per
#: backend: an embedded home (SQLite catalog, ``sqlite`` index), a PostgreSQL catalog with the
#: ``postgres`` index (pgvector), and an embedded home whose new bases keep their vectors in
#: Qdrant's local mode (qdrant-client in-process: no Qdrant server can run here) — the
#: conformance runs that ``.ci/run`` makes. Default: sqlite only.
BACKENDS = tuple(os.environ.get("KB_TEST_BACKENDS", "sqlite").split(","))
_UNKNOWN = set(BACKENDS) - {"sqlite", "postgres", "qdrant"}
if _UNKNOWN:  # a typo must not silently run the sqlite suite again
    raise pytest.UsageError(f"KB_TEST_BACKENDS names unknown backends: {sorted(_UNKNOWN)}")


def _kb_settings(request: pytest.FixtureRequest, home: Path) -> Settings:
    """Settings built directly (not from ``KNOWBASE_*``), so the caller's env never leaks in."""
    backend = getattr(request, "param", BACKENDS[0])
    if backend == "postgres":
        if not request.getfixturevalue("pg_server").has_vector:
            pytest.skip("the postgres backend needs pgvector: run .ci/pgvector.sh")
        return Settings(
            home=home, database_url=request.getfixturevalue("pg_url"), test_providers=True
        )
    if backend == "qdrant":
        pytest.importorskip("qdrant_client")
        request.addfinalizer(_close_qdrant_clients)
        return Settings(home=home, test_providers=True, default_index_backend="qdrant")
    return Settings(home=home, test_providers=True)


def _close_qdrant_clients() -> None:
    """Local mode locks its folder per process: release it when the test's home goes."""
    from knowbase.index import backends

    backends.close_qdrant_clients()


kb_settings = pytest.fixture(
    _kb_settings, name="kb_settings", params=list(BACKENDS) if len(BACKENDS) > 1 else None
)


@pytest.fixture
def kb(kb_settings: Settings) -> Iterator[Knowledge]:
    knowledge = Knowledge(kb_settings)
    try:
        yield knowledge
    finally:
        knowledge.close()


@pytest.fixture
def bm25_base(kb: Knowledge) -> Base:
    return kb.create_base("bm25", file_processor_id=None)


@pytest.fixture
def hash_base(kb: Knowledge) -> Base:
    return kb.create_base("hashed", embedding_model_id=HASH_MODEL, file_processor_id=None)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A folder of originals, outside the home."""
    path = tmp_path / "src"
    path.mkdir()
    return path


@pytest.fixture
def live_server() -> Iterator[Callable[[Any], str]]:
    import uvicorn

    servers: list[tuple[Any, threading.Thread]] = []

    def start(app: Any) -> str:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=2
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"

    yield start
    for server, _ in servers:
        server.should_exit = True
    for _, thread in servers:
        thread.join(10)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def backend_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A catalog holding the schema, once per catalog backend: a SQLite file and a fresh
    database on the embedded PostgreSQL server. Catalog and job-queue tests written once take
    it (the way a document-store suite is run over every store); ``tests/postgres`` keeps only
    what is PostgreSQL's own."""
    from knowbase.catalog.db import Catalog

    if request.param == "postgres":
        catalog = Catalog(request.getfixturevalue("pg_url"))
    else:
        catalog = Catalog(f"sqlite:///{tmp_path}/catalog.sqlite")
        catalog.create_schema()
    yield catalog
    catalog.dispose()


#: What the fast path (``-m "not model and not slow"``) leaves out without a mark in each file:
#: whole folders of end-to-end and PostgreSQL suites, and any test on the embedded PostgreSQL
#: server (it starts a real server: seconds per test on 2 cores). ``make test`` runs them all.
_SLOW_FOLDERS = ("acceptance", "postgres")
_SLOW_FIXTURES = {"pg_server", "pg_url", "pg_empty_url"}
#: Surface suites that drive ``kb`` in subprocesses, a real browser or several server processes
#: (seconds per test: each starts Python and the app), and the stateful ingestion machine. The
#: in-process tests of the same surfaces stay on the fast path.
_SLOW_MODULES = {
    "test_cli_first_hour.py",
    "test_cli_labels.py",
    "test_cli_portable.py",
    "test_console_browser.py",
    "test_console_first_hour.py",
    "test_surfaces_damage.py",
    "test_http_processes.py",
    "test_http_fuzz.py",
    "test_search_filter_surfaces.py",
    "test_serve_watch.py",
    "test_mcp_stdio.py",
    "test_item_state_machine.py",
    "test_readers_legacy_office.py",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_root = Path(__file__).parent
    for item in items:
        try:
            folder = item.path.relative_to(tests_root).parts[0]
        except ValueError:
            continue
        fixtures = set(getattr(item, "fixturenames", ()))
        if folder in _SLOW_FOLDERS or fixtures & _SLOW_FIXTURES or item.path.name in _SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
