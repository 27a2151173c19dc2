"""Refusals at the edge (issue 26 items 8 and 9), over real HTTP on loopback and the real ``kb``:
base names a route or a terminal cannot carry, an index backend this catalog cannot hold (a
configuration error, 422, not a 503), JSON bodies bounded well below uploads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import sqlalchemy as sa

from knowbase.errors import InvalidInput
from knowbase.interfaces.http import DEFAULT_MAX_JSON_BYTES, create_app
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(120)

BAD_NAMES = ["..", ".", "a/b", "a\\b", "nul\x00name", "tab\tname", "bell\x07", "line\nbreak"]


@pytest.fixture
def url(kb: Knowledge, live_server) -> Iterator[str]:  # type: ignore[no-untyped-def]
    yield live_server(create_app(kb))


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_base_names_are_refused_everywhere(kb: Knowledge, url: str, name: str) -> None:
    with pytest.raises(InvalidInput, match="base name"):
        kb.create_base(name)
    created = httpx.post(url + "/bases", json={"name": name}, timeout=30)
    assert created.status_code == 422, created.text
    assert created.json()["code"] == "invalid_input"
    kb.create_base("fine", file_processor_id=None)
    renamed = httpx.patch(url + "/bases/fine", json={"name": name}, timeout=30)
    assert renamed.status_code == 422, renamed.text
    assert [b.name for b in kb.list_bases()] == ["fine"]


def test_the_cli_refuses_a_bad_base_name(tmp_path: Path) -> None:
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", "base", "create", ".."],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1 and "invalid_input" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_base_named_before_the_rules_can_still_be_changed(kb: Knowledge) -> None:
    base = kb.create_base("legacy", file_processor_id=None)
    with kb.rt.catalog.write_tx() as conn:
        conn.execute(sa.text("UPDATE knowledge_base SET name = 'old/name' WHERE id = :id"),
                     {"id": base.id})  # fmt: skip
    assert kb.update_base(base.id, threshold=0.5).threshold == 0.5
    assert kb.update_base(base.id, name="new name").name == "new name"


def test_a_postgres_index_without_a_postgres_catalog_is_a_422(kb: Knowledge, url: str) -> None:
    if kb.rt.catalog.engine.dialect.name == "postgresql":
        pytest.skip("this home's catalog is PostgreSQL: the backend is usable")
    answer = httpx.post(url + "/bases", json={"name": "pg", "index_backend": "postgres"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "invalid_input"
    assert "PostgreSQL" in answer.json()["message"]
    assert kb.list_bases() == []  # nothing was written


def _raw_post(url: str, path: str, head: dict[str, str], body: bytes) -> tuple[int, bytes]:
    """Send headers and ``body`` (maybe less than Content-Length says) on a plain socket and
    read the answer: the server must answer without waiting for the rest."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        lines = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in head.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, answer


def test_a_big_json_body_is_refused_before_it_is_read(kb: Knowledge, url: str) -> None:
    kb.create_base("docs", file_processor_id=None)
    declared = 99 * 1024 * 1024
    status, answer = _raw_post(
        url,
        "/bases/docs/items",
        {"Content-Type": "application/json", "Content-Length": str(declared)},
        b'{"inputs": [{"type": "note", "content": "' + b"x" * 65536,
    )
    assert status == 413 and b"payload_too_large" in answer


def test_a_streamed_json_body_is_cut_at_the_json_limit(kb: Knowledge, url: str) -> None:
    kb.create_base("docs", file_processor_id=None)

    def chunks() -> Iterator[bytes]:
        yield b'{"inputs": [{"type": "note", "content": "'
        for _ in range(DEFAULT_MAX_JSON_BYTES // 65536 + 4):  # no Content-Length: streamed
            yield b"x" * 65536
        yield b'"}]}'

    answer = httpx.post(
        url + "/bases/docs/items",
        content=chunks(),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    assert answer.status_code == 413, answer.text[:200]
    assert kb.list_items("docs") == []


def test_a_json_body_under_the_limit_still_works(kb: Knowledge, url: str) -> None:
    kb.create_base("docs", file_processor_id=None)
    note = "otters " * 140_000  # ~1 MB: the largest note the API accepts fits
    answer = httpx.post(
        url + "/bases/docs/items", json={"inputs": [{"type": "note", "content": note}]}, timeout=60
    )
    assert answer.status_code == 201, answer.text[:200]
