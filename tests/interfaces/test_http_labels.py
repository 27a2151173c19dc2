"""Tags and metadata over real HTTP on loopback: set at add time, filtered in both search
routes, changed with PATCH .../labels (issue 27 item 2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from knowbase.catalog.models import Base
from knowbase.interfaces.http import create_app
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def url(kb: Knowledge, bm25_base: Base, live_server: Callable[[Any], str]) -> str:
    url = live_server(create_app(kb))
    notes = [
        {
            "type": "note",
            "title": "vpn",
            "content": "Alpaca VPN keys rotate.",
            "tags": ["ops"],
            "metadata": {"year": 2024, "lang": "en"},
        },
        {
            "type": "note",
            "title": "wool",
            "content": "Alpaca wool is warm.",
            "tags": ["fibre"],
            "metadata": {"year": 2019},
        },
    ]
    r = httpx.post(f"{url}/bases/bm25/items", json={"inputs": notes})
    assert r.status_code == 201, r.text
    assert [i["tags"] for i in r.json()["items"]] == [["ops"], ["fibre"]]
    kb.run_until_idle(60)
    return url


def titles(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return sorted(r["title"] for r in response.json()["results"])


def test_post_search_filters_by_tags_and_where(url: str) -> None:
    search = f"{url}/bases/bm25/search"
    assert titles(httpx.post(search, json={"query": "alpaca"})) == ["vpn", "wool"]
    assert titles(httpx.post(search, json={"query": "alpaca", "tags": ["OPS"]})) == ["vpn"]
    body = {"query": "alpaca", "where": {"year": {"lt": 2020}}}
    assert titles(httpx.post(search, json=body)) == ["wool"]
    body = {"query": "alpaca", "where": ["lang=en", "year>=2024"]}
    assert titles(httpx.post(search, json=body)) == ["vpn"]


def test_get_search_and_multi_base_search_take_the_filters(url: str) -> None:
    r = httpx.get(f"{url}/bases/bm25/search", params={"q": "alpaca", "tag": "fibre"})
    assert titles(r) == ["wool"]
    r = httpx.get(f"{url}/bases/bm25/search", params=[("q", "alpaca"), ("where", "year>2020")])
    assert titles(r) == ["vpn"]
    r = httpx.post(f"{url}/search", json={"bases": ["bm25"], "query": "alpaca", "tags": ["ops"]})
    assert titles(r) == ["vpn"]


def test_patch_labels_then_search(url: str, kb: Knowledge) -> None:
    wool = next(i for i in kb.list_items("bm25") if i.title == "wool")
    r = httpx.patch(
        f"{url}/bases/bm25/items/{quote(wool.concept_id or '', safe='')}/labels",
        json={"add_tags": ["ops"], "merge_metadata": {"year": None, "lang": "de"}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["tags"] == ["fibre", "ops"] and r.json()["metadata"] == {"lang": "de"}
    body = {"query": "alpaca", "tags": ["ops"]}
    assert titles(httpx.post(f"{url}/bases/bm25/search", json=body)) == ["vpn", "wool"]


def test_bad_labels_and_filters_are_422_and_write_nothing(url: str, kb: Knowledge) -> None:
    before = len(kb.list_items("bm25"))
    bad = {"type": "note", "content": "x", "metadata": {"k": {"deep": 1}}}
    r = httpx.post(f"{url}/bases/bm25/items", json={"inputs": [bad]})
    assert r.status_code == 422 and r.json()["code"] == "invalid_input"
    assert len(kb.list_items("bm25")) == before
    r = httpx.post(f"{url}/bases/bm25/search", json={"query": "a", "where": {"k": {"like": 1}}})
    assert r.status_code == 422 and r.json()["code"] == "invalid_filter"
    r = httpx.patch(f"{url}/bases/bm25/items/nope/labels", json={"tags": ["x"]})
    assert r.status_code == 404
