"""``POST /retrieval`` as Dify really calls it, over real HTTP on loopback.

``DifyClient`` rebuilds Dify's two calls from its code, shape for shape:
``ExternalDatasetService.check_endpoint_and_api_key`` (the "save API" check: a POST to
``{endpoint}/retrieval`` with only ``Authorization``, no body; only 403, 404 and 502 fail it) and
``ExternalDatasetService.fetch_external_knowledge_retrieval`` (``data=json.dumps(params)`` with
``Content-Type: application/json``; ``metadata_condition`` only when set, as
``MetadataCondition.model_dump()``; ``score_threshold`` 0.0 unless enabled; any status but 200
read as no records), both in ``api/services/external_knowledge_service.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from knowbase import AddInput, Knowledge, load_settings
from knowbase.interfaces.http import create_app

pytestmark = pytest.mark.timeout(180)
KEY = "dify-key"
TOKEN = "server-token"


class DifyClient:
    """Dify's side of the external knowledge API (see the module docstring)."""

    def __init__(self, endpoint: str, api_key: str) -> None:
        self.endpoint, self.api_key = endpoint, api_key

    def check(self) -> httpx.Response:
        """``check_endpoint_and_api_key``: raises where Dify refuses to save the API."""
        r = httpx.post(
            f"{self.endpoint}/retrieval", headers={"Authorization": f"Bearer {self.api_key}"}
        )
        if r.status_code in (403, 404, 502):
            raise ValueError(f"Dify refuses the endpoint: {r.status_code}")
        return r

    def raw(
        self,
        query: str,
        *,
        knowledge_id: str = "docs",
        top_k: int | None = 10,
        threshold: float | None = None,
        metadata_condition: dict[str, Any] | None = None,
    ) -> httpx.Response:
        params: dict[str, Any] = {
            "retrieval_setting": {"top_k": top_k, "score_threshold": threshold or 0.0},
            "query": query,
            "knowledge_id": knowledge_id,
        }
        if metadata_condition:
            params["metadata_condition"] = metadata_condition
        return httpx.post(
            f"{self.endpoint}/retrieval",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"},
            content=json.dumps(params),
            follow_redirects=True,
            timeout=60,
        )

    def records(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        r = self.raw(query, **kwargs)
        assert r.status_code == 200, r.text  # Dify would show "no results" for anything else
        return r.json()["records"]


def condition(name: str, op: str, value: Any = None, logic: str | None = "and") -> dict:
    """``MetadataCondition(logical_operator=…, conditions=[Condition(…)]).model_dump()``."""
    return {
        "logical_operator": logic,
        "conditions": [{"name": name, "comparison_operator": op, "value": value}],
    }


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Knowledge]:
    """24 notes about widgets: 20 say it often (they rank first), 4 licences say it once."""
    home = tmp_path_factory.mktemp("dify") / "home"
    with Knowledge(load_settings(home, external_api_keys=(KEY,))) as kb:
        base = kb.create_base("docs", file_processor_id=None)
        inputs = [
            AddInput.note(
                f"Widget widget widget guide {i}: widgets everywhere.", title=f"g{i}"
            ).with_labels(
                ["howto"],
                {
                    "kind": "guide",
                    "lang": "de",
                    "year": 2019 + i % 3,
                    "published": f"2020-0{1 + i % 9}-01",
                },
            )
            for i in range(20)
        ]
        inputs += [
            AddInput.note(
                f"License {i} for the widget and its parts.", title=f"lic{i}"
            ).with_labels(
                ["python", "legal"],
                {"kind": "license", "lang": "en", "year": 2024, "published": 1714521600 + i},
            )
            for i in range(4)
        ]
        kb.add(base.id, inputs, wait=True)
        yield kb


@pytest.fixture(scope="module")
def server(kb: Knowledge) -> Iterator[str]:
    import threading
    import time

    import uvicorn

    config = uvicorn.Config(
        create_app(kb, token=TOKEN), host="127.0.0.1", port=0, log_level="warning"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    yield f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}"
    srv.should_exit = True
    thread.join(10)


@pytest.fixture
def dify(server: str) -> DifyClient:
    return DifyClient(server, KEY)


# --- 1. conditions filter the whole base before ranking ------------------------------------------
@pytest.mark.parametrize(
    "cond",
    [
        condition("kind", "is", "license"),
        condition("year", "≥", 2024),
        condition("tags", "contains", "python"),
    ],
    ids=["kind-is", "year-ge", "tags-contains"],
)
def test_conditions_filter_before_the_cut(dify: DifyClient, cond: dict) -> None:
    """Dify selects the matching documents first (``get_metadata_filter_condition`` builds the
    ``process_metadata_filter_func`` filters into one query over ``DatasetDocument``) and ranks
    inside them: the four licences rank below 20 guides, yet top_k 2 gets two of them."""
    records = dify.records("widget", top_k=2, metadata_condition=cond)
    assert len(records) == 2
    assert all(r["metadata"]["kind"] == "license" for r in records)


def test_a_filter_finds_every_match(dify: DifyClient) -> None:
    licences = condition("kind", "is", "license")
    records = dify.records("widget", top_k=4, metadata_condition=licences)
    assert sorted(r["title"] for r in records) == ["lic0", "lic1", "lic2", "lic3"]


# --- 2. operators as process_metadata_filter_func reads them --------------------------------------
@pytest.mark.parametrize(
    ("cond", "count"),
    [
        (condition("lang", "=", "en"), 4),  # `case "is" | "="`
        (condition("year", "is", 2024), 4),  # a number compares as a number
        (condition("kind", "in", "license,pydoc"), 4),  # a comma string is split
        (condition("year", "in", [2019, 2024]), 11),  # Sequence[int]
        (condition("published", "after", 1714521601), 2),  # Unix timestamps
        (condition("published", "after", "2024-04-30"), 4),  # an ISO date against them
        (condition("kind", "not in", "guide"), 4),
    ],
)
def test_operators_match_difys(dify: DifyClient, cond: dict, count: int) -> None:
    """``process_metadata_filter_func`` in ``api/core/rag/retrieval/dataset_retrieval.py``;
    ``top_k`` is the number of matches, so every one of them must be found."""
    assert len(dify.records("widget", top_k=count, metadata_condition=cond)) == count


def test_logical_operator_joins_conditions(dify: DifyClient) -> None:
    """Dify joins the filters with ``and_(*filters)`` or ``or_(*filters)``."""

    def titles(logic: str) -> list[str]:
        cond = {
            "logical_operator": logic,
            "conditions": [
                {"name": "title", "comparison_operator": "is", "value": "lic0"},
                {"name": "title", "comparison_operator": "is", "value": "lic3"},
            ],
        }
        return sorted(r["title"] for r in dify.records("widget", top_k=2, metadata_condition=cond))

    assert titles("or") == ["lic0", "lic3"]
    assert titles("and") == []


# --- 15 and 2: what cannot be evaluated is Dify's error, not an empty match ----------------------
@pytest.mark.parametrize(
    "cond",
    [
        condition("published", "before", "notadate"),
        condition("year", ">", "abc"),
        condition("kind", "resembles", "x"),
        condition("colour", "is", "red"),
    ],
    ids=["before-notadate", "gt-abc", "unknown-operator", "unknown-field"],
)
def test_unusable_conditions_get_an_error(dify: DifyClient, cond: dict) -> None:
    r = dify.raw("widget", metadata_condition=cond)
    assert r.status_code == 400, r.text
    assert r.json()["error_code"] == 3001 and r.json()["error_msg"]


# --- 3. the key before the body ---------------------------------------------------------------
def test_a_wrong_key_fails_difys_save_check(server: str) -> None:
    """``check_endpoint_and_api_key`` posts no body; only a 403 tells it the key is wrong."""
    with pytest.raises(ValueError, match="403"):
        DifyClient(server, "nope").check()
    r = httpx.post(
        server + "/retrieval", headers={"Authorization": "Bearer nope"}, content=b"{not json"
    )
    assert r.status_code == 403 and r.json()["error_code"] == 1002


def test_the_right_key_passes_difys_save_check(dify: DifyClient) -> None:
    r = dify.check()
    assert r.status_code == 400 and r.json()["error_code"] == 3001  # no body: a request error


# --- 4. shapes Dify's models allow ---------------------------------------------------------------
@pytest.mark.parametrize(
    "cond",
    [
        {"logical_operator": "and", "conditions": None},
        {
            "logical_operator": None,
            "conditions": [{"name": "kind", "comparison_operator": "is", "value": "license"}],
        },
        {
            "logical_operator": "and",
            "conditions": [{"name": "year", "comparison_operator": "in", "value": [2024, 2025]}],
        },
        {
            "logical_operator": "and",
            "conditions": [{"name": "kind", "comparison_operator": "is", "value": None}],
        },
    ],
    ids=["conditions-null", "logic-null", "int-list", "value-null"],
)
def test_shapes_difys_models_allow_are_served(dify: DifyClient, cond: dict) -> None:
    """``MetadataCondition``/``Condition`` in ``api/core/rag/entities/metadata_entities.py``."""
    assert dify.records("widget", top_k=3, metadata_condition=cond)


def test_top_k_null_is_the_default(dify: DifyClient) -> None:
    """``external_retrieval_parameters.get("top_k")`` is None when the setting is missing."""
    assert len(dify.records("widget", top_k=None)) >= 1


@pytest.mark.parametrize("query", ["???", "widget " * 200], ids=["no-tokens", "too-long"])
def test_odd_queries_answer_records(dify: DifyClient, query: str) -> None:
    records = dify.records(query)
    assert records == [] if query == "???" else records


# --- 5. an endpoint saved with a trailing slash -------------------------------------------------
@pytest.mark.parametrize("endpoint", ["{}/", "{}/dify/"])
def test_a_trailing_slash_in_the_endpoint_is_served(server: str, endpoint: str) -> None:
    """Dify builds ``f"{settings.get('endpoint')}/retrieval"``: ``…//retrieval``."""
    client = DifyClient(endpoint.format(server), KEY)
    assert "//retrieval" in f"{client.endpoint}/retrieval"
    assert client.records("widget", top_k=1)


# --- 6. the OpenAPI document tells the truth ---------------------------------------------------
def _validate(doc: dict[str, Any], op: dict[str, Any], r: httpx.Response) -> None:
    declared = op["responses"][str(r.status_code)]["content"]["application/json"]["schema"]
    # the document is the root, so its #/components/... references resolve
    jsonschema.validate(r.json(), {**doc, **declared})


def test_openapi_declares_what_retrieval_answers(server: str, dify: DifyClient) -> None:
    doc = httpx.get(server + "/openapi.json").json()
    op = doc["paths"]["/retrieval"]["post"]
    assert op["security"] == [{"DifyKey": []}] and "401" not in op["responses"]
    schemes = doc["components"]["securitySchemes"]
    assert schemes["DifyKey"]["scheme"] == "bearer" and schemes["HTTPBearer"]["scheme"] == "bearer"
    assert doc["paths"]["/bases"]["get"]["security"] == [{"HTTPBearer": []}]
    body = op["requestBody"]["content"]["application/json"]["schema"]
    sent = {
        "knowledge_id": "docs",
        "query": "q",
        "retrieval_setting": {"top_k": None},
        "metadata_condition": condition("year", "in", [1, 2], logic=None),
    }
    jsonschema.validate(sent, {**doc, **body})
    for r in (
        dify.raw("widget"),
        dify.raw("widget", knowledge_id="nope"),
        DifyClient(server, "nope").raw("widget"),
        dify.raw("widget", metadata_condition=condition("year", ">", "abc")),
    ):
        _validate(doc, op, r)


def test_the_openapi_document_is_a_valid_spec(server: str) -> None:
    """The whole document, with the Dify routes' hand-declared body and security, is OpenAPI
    (checked with this extra where it is installed; the test extra pins it)."""
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(httpx.get(server + "/openapi.json").json())
