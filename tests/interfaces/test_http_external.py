"""Dify's external knowledge API over real HTTP on loopback, with requests shaped as Dify's
documentation shows them (``POST {endpoint}/retrieval``, ``Authorization: Bearer {API_KEY}``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from knowbase import AddInput, Knowledge, load_settings
from knowbase.interfaces.http import create_app

pytestmark = pytest.mark.timeout(120)
KEY = "dify-key-1"
API_TOKEN = "the-servers-own-token"


def dify_body(knowledge_id: str, query: str, **extra: Any) -> dict[str, Any]:
    """The request body as in Dify's documentation example."""
    return {
        "knowledge_id": knowledge_id,
        "query": query,
        "retrieval_setting": {"top_k": 2, "score_threshold": 0.0},
        **extra,
    }


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[Knowledge]:
    settings = load_settings(tmp_path / "home", external_api_keys=(KEY, "second-key"))
    with Knowledge(settings) as kb:
        base = kb.create_base("manuals", file_processor_id=None)
        kb.add(
            base.id,
            [
                AddInput.note("The VPN key rotates every Monday at nine.", title="vpn"),
                AddInput.note("Sourdough needs a wild yeast starter, long rise.", title="bread"),
                AddInput.note(
                    "Rotate the printer toner when the light blinks.", title="printer"
                ).with_labels(["office"], {"floor": 3, "team": "facilities"}),
            ],
            wait=True,
        )
        yield kb


@pytest.fixture
def url(kb: Knowledge, live_server: Callable[[Any], str]) -> str:
    return live_server(create_app(kb, token=API_TOKEN))


def post(url: str, body: Any, key: str | None = KEY, **headers: str) -> httpx.Response:
    if key is not None:
        headers.setdefault("Authorization", f"Bearer {key}")
    return httpx.post(url, json=body, headers=headers, timeout=30)


def test_retrieval_answers_records_as_dify_expects(url: str) -> None:
    r = post(url + "/retrieval", dify_body("manuals", "when does the vpn key rotate"))
    assert r.status_code == 200, r.text
    records = r.json()["records"]
    assert 1 <= len(records) <= 2
    top = records[0]
    assert set(top) == {"content", "score", "title", "metadata"}
    assert "VPN key rotates" in top["content"]
    assert isinstance(top["score"], float) and 0.0 <= top["score"] <= 1.0
    assert isinstance(top["metadata"], dict)  # never null: Dify's pipeline breaks on null
    assert top["metadata"]["base"] == "manuals" and top["metadata"]["concept_id"]


def test_the_prefixed_path_and_a_base_id_work_too(url: str, kb: Knowledge) -> None:
    base_id = kb.get_base("manuals").id
    r = post(url + "/dify/retrieval", dify_body(base_id, "sourdough starter"))
    assert r.status_code == 200
    assert "wild yeast" in r.json()["records"][0]["content"]


def test_top_k_and_score_threshold_bound_the_records(url: str) -> None:
    body = dify_body("manuals", "rotate")
    body["retrieval_setting"] = {"top_k": 1, "score_threshold": 0.0}
    assert len(post(url + "/retrieval", body).json()["records"]) == 1
    body["retrieval_setting"] = {"top_k": 5, "score_threshold": 1.0}
    scores = [rec["score"] for rec in post(url + "/retrieval", body).json()["records"]]
    assert all(s >= 1.0 for s in scores)


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, 1001),
        ({"Authorization": KEY}, 1001),
        ({"Authorization": f"Basic {KEY}"}, 1001),
        ({"Authorization": "Bearer wrong-key"}, 1002),
        ({"Authorization": "Bearer kb_not-a-key"}, 1002),  # shaped like a kb key, unknown
    ],
    ids=["none", "no-scheme", "basic", "wrong", "unknown-kb-key"],
)
def test_bad_authorization_gets_difys_error_codes(url: str, headers: dict, code: int) -> None:
    r = post(url + "/retrieval", dify_body("manuals", "vpn"), key=None, **headers)
    assert r.status_code == 403
    assert r.json()["error_code"] == code and r.json()["error_msg"]


def test_every_configured_key_is_accepted(url: str) -> None:
    r = post(url + "/retrieval", dify_body("manuals", "vpn"), key="second-key")
    assert r.status_code == 200


def test_the_api_token_is_the_admin_here_too(url: str) -> None:
    """KNOWBASE_API_TOKEN is the admin key on every surface (issue 44): Dify may use it."""
    r = post(url + "/retrieval", dify_body("manuals", "vpn"), key=API_TOKEN)
    assert r.status_code == 200


def test_unknown_knowledge_is_2001(url: str) -> None:
    r = post(url + "/retrieval", dify_body("no-such-base", "vpn"))
    assert r.status_code == 404 and r.json()["error_code"] == 2001


def test_the_servers_token_still_guards_every_other_route(url: str) -> None:
    assert httpx.get(url + "/bases").status_code == 401
    assert httpx.get(url + "/bases", headers={"Authorization": f"Bearer {API_TOKEN}"}).is_success


def test_metadata_condition_filters_records(url: str, kb: Knowledge) -> None:
    condition = {
        "logical_operator": "and",
        "conditions": [
            {"name": ["title"], "comparison_operator": "is", "value": "printer"},
        ],
    }
    body = dify_body("manuals", "rotate", metadata_condition=condition)
    body["retrieval_setting"]["top_k"] = 5
    records = post(url + "/retrieval", body).json()["records"]
    assert [rec["title"] for rec in records] == ["printer"]


def test_metadata_condition_sees_the_documents_own_metadata_and_tags(url: str) -> None:
    body = dify_body("manuals", "rotate")
    body["retrieval_setting"]["top_k"] = 5
    body["metadata_condition"] = {
        "logical_operator": "and",
        "conditions": [
            {"name": ["team"], "comparison_operator": "is", "value": "facilities"},
            {"name": ["floor"], "comparison_operator": "≥", "value": 2},
            {"name": ["tags"], "comparison_operator": "contains", "value": "office"},
        ],
    }
    records = post(url + "/retrieval", body).json()["records"]
    assert [r["title"] for r in records] == ["printer"]
    assert records[0]["metadata"]["floor"] == 3 and records[0]["metadata"]["tags"] == ["office"]


def test_the_endpoint_is_off_without_a_key(tmp_path: Path, live_server: Callable) -> None:
    with Knowledge(load_settings(tmp_path / "bare")) as kb:
        url = live_server(create_app(kb))
        r = httpx.post(
            url + "/retrieval", json=dify_body("x", "y"), headers={"Authorization": "Bearer k"}
        )
        assert r.status_code == 404


def test_keys_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KNOWBASE_EXTERNAL_API_KEYS", " a , b ,")
    assert load_settings(tmp_path).external_api_keys == ("a", "b")
