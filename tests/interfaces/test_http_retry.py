"""A GET that met a passing database fault is answered once more on fresh connections (issue 37
item 2); a write is never repeated; other answers pass through untouched."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from knowbase.errors import CatalogUnavailable, DatabaseIOError, KnowbaseError
from knowbase.interfaces.http import _knowbase_error
from knowbase.interfaces.http.retry import RetryPassingFaults


def _app(faults: list[KnowbaseError]) -> tuple[FastAPI, list[str]]:
    """An app whose one route raises the queued faults in turn, then answers."""
    calls: list[str] = []
    app = FastAPI()
    app.add_exception_handler(KnowbaseError, _knowbase_error)  # type: ignore[arg-type]
    app.add_middleware(RetryPassingFaults)

    @app.api_route("/thing", methods=["GET", "POST"])
    def thing() -> dict[str, str]:
        calls.append("call")
        if faults:
            raise faults.pop(0)
        return {"ok": "yes"}

    return app, calls


async def _request(app: FastAPI, method: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.request(method, "/thing")


@pytest.mark.anyio
async def test_a_get_that_met_an_io_error_is_answered_by_the_second_try() -> None:
    app, calls = _app([DatabaseIOError("I/O error on the catalog")])
    answer = await _request(app, "GET")
    assert answer.status_code == 200 and answer.json() == {"ok": "yes"}
    assert len(calls) == 2


@pytest.mark.anyio
async def test_a_second_fault_is_reported_with_its_code() -> None:
    app, calls = _app([DatabaseIOError("one"), DatabaseIOError("two")])
    answer = await _request(app, "GET")
    assert answer.status_code == 503 and answer.json()["code"] == "database_io_error"
    assert answer.json()["message"] == "two" and len(calls) == 2


@pytest.mark.anyio
async def test_damage_and_writes_are_not_retried() -> None:
    app, calls = _app([CatalogUnavailable("damaged")])
    answer = await _request(app, "GET")
    assert answer.json()["code"] == "catalog_unavailable" and len(calls) == 1
    app, calls = _app([DatabaseIOError("on a write")])
    answer = await _request(app, "POST")
    assert answer.status_code == 503 and len(calls) == 1


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
