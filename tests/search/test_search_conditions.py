"""Dify's metadata conditions (``search/conditions.py``), operator by operator.

The reference is Dify's ``DatasetRetrieval.process_metadata_filter_func``
(``api/core/rag/retrieval/dataset_retrieval.py``): the SQL filter each operator becomes over
``doc_metadata``, which Dify joins with ``and_``/``or_`` by ``logical_operator``; and the
request model in ``api/core/rag/entities/metadata_entities.py`` (``MetadataCondition``,
``Condition``: null ``logical_operator`` and ``conditions`` allowed, ``value`` a string, a
number, a list of strings or numbers, or null).
"""

from __future__ import annotations

from typing import Any

import pytest

from knowbase.errors import InvalidFilter
from knowbase.search.conditions import check_names, parse_conditions

DOC = {
    "kind": "license",
    "lang": "en",
    "year": 2023,
    "published": "2024-05-01",
    "stamp": 1714521600,  # 2024-05-01T00:00:00Z, as Dify stores time metadata
    "tags": ["python", "legal"],
    "title": "LICENSE.txt",
}


def holds(op: str, value: Any, name: str = "kind", doc: dict[str, Any] = DOC) -> bool:
    parsed = parse_conditions(
        {"conditions": [{"name": name, "comparison_operator": op, "value": value}]}
    )
    assert parsed is not None
    return parsed.holds(doc)


@pytest.mark.parametrize(
    ("op", "value", "name", "expected"),
    [
        # `case "is" | "="`: one operator; a str compares as text, a number as a float
        ("=", "en", "lang", True),
        ("is", "en", "lang", True),
        ("is", 2023, "year", True),
        ("=", 2023.0, "year", True),
        ("is", "2023", "year", True),  # as_string() of the JSON number
        ("is not", 2023, "year", False),
        ("≠", "de", "lang", True),
        ("is", ["de", "en"], "lang", True),  # a list: any of it (Dify would drop the filter)
        # LIKE '%v%', 'v%', '%v' on the value as text (a list: one of its values)
        ("contains", "cens", "kind", True),
        ("not contains", "cens", "kind", False),
        ("start with", "lic", "kind", True),
        ("end with", "nse", "kind", True),
        ("contains", "python", "tags", True),
        ("not contains", "rust", "tags", True),
        # `case "in" | "not in"`: a str is split on commas
        ("in", "license,pydoc", "kind", True),
        ("in", "pydoc, howto", "kind", False),
        ("not in", "pydoc,howto", "kind", True),
        ("in", [2022, 2023], "year", True),  # Sequence[int] in Dify's model
        ("in", [], "kind", False),  # literal(False)
        ("not in", [], "kind", True),  # literal(True)
        # `case "before" | "<"`, `"after" | ">"`, `"≤" | "<="`, `"≥" | ">="`: numbers
        (">", 2022, "year", True),
        ("<", 2023, "year", False),
        ("≥", 2023, "year", True),
        ("<=", "2023", "year", True),
        # time metadata: Unix timestamps, and ISO dates beside them
        ("before", 1714521601, "stamp", True),
        ("after", 1714521600, "stamp", False),
        ("after", "2024-04-30", "stamp", True),
        ("before", 1717200000, "published", True),  # ISO date against a timestamp
        ("after", "2024-01-01T00:00:00+00:00", "published", True),
        # `case "empty"` / `"not empty"`: is_(None) / isnot(None)
        ("empty", None, "missing", True),
        ("not empty", None, "lang", True),
        ("empty", None, "lang", False),
    ],
)
def test_operators_mean_what_dify_means(op: str, value: Any, name: str, expected: bool) -> None:
    assert holds(op, value, name) is expected


@pytest.mark.parametrize("op", ["is not", "not contains", "not in", ">", "before", "contains"])
def test_a_missing_field_satisfies_nothing_but_empty(op: str) -> None:
    """In SQL a missing JSON key is NULL: ``NULL != 'x'`` and ``NULL NOT LIKE`` are not true."""
    value = 5 if op in (">", "before") else "x"
    assert holds(op, value, name="missing") is False


def test_a_null_value_restricts_nothing() -> None:
    """``if value is None and condition not in ("empty", "not empty"): return filters``."""
    assert (
        parse_conditions(
            {"conditions": [{"name": "kind", "comparison_operator": "is", "value": None}]}
        )
        is None
    )


def test_and_or_and_nulls_from_difys_model() -> None:
    """``MetadataCondition.logical_operator`` and ``.conditions`` may be null."""
    assert parse_conditions({"logical_operator": None, "conditions": None}) is None
    two = [
        {"name": "kind", "comparison_operator": "is", "value": "license"},
        {"name": "lang", "comparison_operator": "is", "value": "de"},
    ]
    both = parse_conditions({"logical_operator": None, "conditions": two})
    either = parse_conditions({"logical_operator": "or", "conditions": two})
    assert both is not None and either is not None
    assert both.holds(DOC) is False and either.holds(DOC) is True


@pytest.mark.parametrize(
    ("op", "value"),
    [
        ("before", "notadate"),
        ("after", "yesterday"),
        (">", "abc"),
        ("≤", [1, 2]),
        ("like", "x"),
        ("contains", ["a", "b"]),
    ],
)
def test_a_value_of_the_wrong_kind_or_an_unknown_operator_is_refused(op: str, value: Any) -> None:
    """Dify's ``case _: pass`` would drop the condition silently; we say so instead."""
    with pytest.raises(InvalidFilter):
        holds(op, value)


def test_an_unknown_field_is_refused() -> None:
    parsed = parse_conditions(
        {"conditions": [{"name": "colour", "comparison_operator": "is", "value": "red"}]}
    )
    assert parsed is not None
    with pytest.raises(InvalidFilter, match="colour"):
        check_names(parsed, {"kind", "lang"})
    check_names(parsed, {"colour"})
