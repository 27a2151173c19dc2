"""Property-based fuzzing of the HTTP API against its own OpenAPI document (schemathesis).

Every operation, ``/events`` included, through the examples, coverage and fuzzing phases, with
positive and negative data and every response check (``--checks all``): no 5xx, a documented
status, a body that matches the documented schema (the error shape included), invalid data
refused, and valid data accepted. The run is derandomized, so CI sees the same requests every
time.

Two things a JSON Schema cannot say are given to the fuzzer here:

- ``/events`` streams until the client leaves; ``duration_s`` bounds it, so every accepted
  request asks for at most ``EVENTS_S`` seconds;
- domain rules (chunk overlap below chunk size, a model id the server knows, a path under the
  served roots) rightly refuse some schema-valid requests with 422. Positive data acceptance
  therefore allows 422 — but only a domain refusal: a 422 from request validation (its
  ``details.errors`` list) on data the schema calls valid means schema and validator disagree,
  and fails the run.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig

from knowbase.interfaces.http import create_app
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import load_settings

pytestmark = pytest.mark.timeout(300)

EVENTS_S = 0.05
MAX_EXAMPLES = 40
CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": 20261203,
        "generation": {"deterministic": True, "max-examples": MAX_EXAMPLES, "mode": "all"},
        "phases": {
            "examples": {"enabled": True},
            "coverage": {"enabled": True},
            "fuzzing": {"enabled": True},
        },
        "checks": {
            "positive_data_acceptance": {
                "enabled": True,
                "expected-statuses": ["2xx", "401", "403", "404", "409", "422"],
            },
        },
        "suppress-health-check": ["all"],
    }
)

# schemathesis' lazy ``from_fixture`` breaks on pytest 9 (``Function._nodeid``), so the schema
# is loaded at import from an app whose facade is plugged in by the module fixture below: the
# OpenAPI document does not depend on it. "testserver" is the Host the ASGI client sends.
app = create_app(None, allowed_hosts=["testserver"])  # type: ignore[arg-type]
schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=CONFIG)
BASES = ["docs", "hybrid"]


# Ids of what the seeded bases hold, refreshed by seed_bases: the hooks below offer them, so
# item, concept and job routes are fuzzed past their 404 too.
KNOWN: dict[str, list[str]] = {"item_id": [], "concept_id": [], "job_id": []}


@schema.hook
def flatmap_path_parameters(ctx: Any, path_parameters: dict[str, Any]) -> Any:
    """Most requests name a base (and item, job) that exists, the rest what was generated."""
    if not path_parameters:
        return st.just(path_parameters)
    options = [path_parameters]
    if "base" in path_parameters:
        options += [{**path_parameters, "base": b} for b in BASES]
    known = [(k, v) for k in ("item_id", "job_id") if k in path_parameters for v in KNOWN[k]]
    options += [{**o, k: v} for o in list(options) for k, v in known]
    return st.sampled_from(options)


@schema.hook
def flatmap_query(ctx: Any, query: dict[str, Any]) -> Any:
    if not isinstance(query, dict) or "concept_id" not in query:
        return st.just(query)
    return st.sampled_from([query] + [{**query, "concept_id": c} for c in KNOWN["concept_id"]])


def seed_bases(kb: Knowledge) -> None:
    """The bases the hook names, each with one indexed note; re-made when a fuzzed DELETE or
    rename took one, so operations fuzzed later still reach a base (not only 404)."""
    present = {b.name for b in kb.list_bases()}
    for name in BASES:
        if name not in present:
            model = "hash:d16" if name == "hybrid" else None
            kb.create_base(name, embedding_model_id=model, file_processor_id=None)
            kb.add(name, [AddInput.note("Paris is the capital of France.")], wait=True)
    items = [i for name in BASES for i in kb.list_items(name)]
    KNOWN["item_id"] = [i.id for i in items]
    KNOWN["concept_id"] = sorted({i.concept_id for i in items if i.concept_id})
    KNOWN["job_id"] = [j.id for j in kb.activity.list_jobs()[:4]]


@pytest.fixture(scope="module")
def populated_kb(tmp_path_factory):
    home = tmp_path_factory.mktemp("fuzz-home")
    roots = tmp_path_factory.mktemp("fuzz-roots")
    (roots / "a.md").write_text("# A\n\nalpha beta gamma\n", encoding="utf-8")
    kb = Knowledge(load_settings(home))
    seed_bases(kb)
    app.state.kb = kb
    app.state.local_path_roots = [roots.resolve()]
    yield kb
    kb.close()


def bound_events(case: Any) -> None:
    """Any ``duration_s`` the server would accept becomes at most ``EVENTS_S``; a missing one
    is set. Values the server refuses stay as generated (negative data)."""
    if not case.operation.path.endswith("/events"):
        return
    query = case.query if isinstance(case.query, dict) else {}
    value = query.get("duration_s", EVENTS_S)
    try:
        accepted = not isinstance(value, bool) and 0 < float(value) <= 86_400
    except (TypeError, ValueError):
        accepted = False
    if accepted:
        case.query = {**query, "duration_s": min(float(value), EVENTS_S)}


def domain_refusal_only(ctx: Any, response: Any, case: Any) -> bool | None:
    """Valid data refused 422 must be a domain refusal, not request validation."""
    meta = case.meta
    if response.status_code != 422 or meta is None or not meta.generation.mode.is_positive:
        return None
    body = response.json()
    errors = body.get("details", {}).get("errors") if isinstance(body, dict) else None
    assert not errors, f"schema-valid data failed request validation: {body}"
    return None


@schema.parametrize()
def test_api_conforms_to_its_openapi(case, populated_kb):
    seed_bases(populated_kb)
    bound_events(case)
    case.call_and_validate(additional_checks=[domain_refusal_only])
