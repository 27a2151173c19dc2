"""Metadata conditions in Dify's vocabulary: a pre-filter like ``where``, with ``and``/``or``.

Dify's external knowledge API sends ``metadata_condition = {logical_operator, conditions:
[{name, comparison_operator, value}]}``. It is parsed here into a :class:`ConditionSet` and
resolved with the other search filters (``search/scope.py``) against every searchable document
of the base before the lanes run, so ``top_k`` is filled from every match, as Dify's own
datasets do (they select the matching documents first, then rank inside them).

Fields: the document's effective metadata (its own and its folders'), ``tags``, and the
document's own ``concept_id``, ``item_type``, ``title`` and ``source``. A field that is none of
these and that no document of the base carries is an error (:class:`InvalidFilter`), not an
empty match. Operators mean what Dify's ``process_metadata_filter_func``
(``api/core/rag/retrieval/dataset_retrieval.py``) makes them mean:

- ``contains``, ``not contains``, ``start with``, ``end with``: on the value as text;
- ``is`` and ``=`` are one operator, as are ``is not`` and ``≠``: a number compares as a number
  (``year is 2023`` holds for 2023 and "2023"), text as text; a list value means any of it
  (Dify drops such a condition);
- ``in``/``not in``: a list, or a comma-separated string (``"license,pydoc"``); an empty list:
  ``in`` never holds, ``not in`` always;
- ``>``, ``<``, ``≥``, ``≤`` (and ``>=``, ``<=``) compare numbers; ``before``/``after`` are
  ``<``/``>`` for moments: a Unix timestamp (Dify's time metadata) or an ISO date/datetime on
  either side;
- ``empty``/``not empty``: the field is absent, null, ``""`` or an empty list / it is not.

As in Dify, a condition with a null ``value`` (other than ``empty``/``not empty``) restricts
nothing, and a document without the field satisfies no condition but ``empty`` (and ``not in``
an empty list). Unlike Dify on PostgreSQL, text compares case-insensitively, as ``where`` does.
A list field (``tags``) satisfies a condition when one of its values does (``not …``: none).
A value of the wrong kind (``before "notadate"``, ``> "abc"``) and an unknown operator raise
:class:`InvalidFilter`.

>>> c = parse_conditions({"logical_operator": "or", "conditions": [
...     {"name": "year", "comparison_operator": "is", "value": 2023},
...     {"name": "kind", "comparison_operator": "in", "value": "license,pydoc"}]})
>>> c.holds({"year": "2023"}), c.holds({"kind": "pydoc"}), c.holds({"kind": "howto"})
(True, True, False)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from knowbase.errors import InvalidFilter

MAX_CONDITIONS = 32
#: The document's own fields a condition may name besides its metadata and tags.
ITEM_FIELDS = ("concept_id", "item_type", "title", "source")
_TEXT_OPS = frozenset({"contains", "not contains", "start with", "end with"})
_ORDER_OPS = {"<": "lt", ">": "gt", "≤": "lte", "<=": "lte", "≥": "gte", ">=": "gte"}
_MOMENT_OPS = {"before": "lt", "after": "gt"}
_ALIASES = {"=": "is", "≠": "is not", "!=": "is not"}
OPERATORS = frozenset(
    {
        *_TEXT_OPS,
        "is",
        "is not",
        "in",
        "not in",
        "empty",
        "not empty",
        *_ORDER_OPS,
        *_MOMENT_OPS,
        *_ALIASES,
    }
)
_FIELD = "metadata_condition"


@dataclass(frozen=True)
class FieldCondition:
    """One condition: any of ``names`` (one in Dify's current model) ``op`` ``value``."""

    names: tuple[str, ...]
    op: str
    value: Any

    def holds(self, fields: Mapping[str, Any]) -> bool:
        return any(_holds(self.op, fields.get(n, _ABSENT), self.value) for n in self.names)

    def explain(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"name": list(self.names), "op": self.op, "value": value}


@dataclass(frozen=True)
class ConditionSet:
    """Conditions joined by ``logical``; holds on a document's fields (:func:`fields_of`)."""

    logical: Literal["and", "or"]
    conditions: tuple[FieldCondition, ...]

    def holds(self, fields: Mapping[str, Any]) -> bool:
        outcomes = (c.holds(fields) for c in self.conditions)
        return all(outcomes) if self.logical == "and" else any(outcomes)

    def names(self) -> frozenset[str]:
        return frozenset(n for c in self.conditions for n in c.names)

    def explain(self) -> dict[str, Any]:
        return {"logical": self.logical, "conditions": [c.explain() for c in self.conditions]}


class _Absent:
    """A field the document does not have (distinct from a null value)."""


_ABSENT = _Absent()


def parse_conditions(raw: Mapping[str, Any] | None) -> ConditionSet | None:
    """A :class:`ConditionSet` from Dify's ``metadata_condition`` (None, or nothing left that
    restricts: None). ``logical_operator``/``conditions`` may be null (Dify's model allows it)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidFilter("metadata_condition must be an object", field=_FIELD)
    logical = raw.get("logical_operator") or "and"
    if not isinstance(logical, str) or logical.strip().lower() not in ("and", "or"):
        raise InvalidFilter(
            f"logical_operator must be 'and' or 'or', not {logical!r}", field=_FIELD
        )
    items = raw.get("conditions") or []
    if not isinstance(items, list):
        raise InvalidFilter("conditions must be a list", field=_FIELD)
    if len(items) > MAX_CONDITIONS:
        raise InvalidFilter(f"at most {MAX_CONDITIONS} conditions", field=_FIELD)
    parsed = [c for c in (_parse_one(item) for item in items) if c is not None]
    if not parsed:
        return None
    return ConditionSet("or" if logical.strip().lower() == "or" else "and", tuple(parsed))


def _parse_one(item: Any) -> FieldCondition | None:
    if not isinstance(item, Mapping):
        raise InvalidFilter(
            "each condition is an object {name, comparison_operator, value}", field=_FIELD
        )
    names = item.get("name")
    names = [names] if isinstance(names, str) else names
    if not names or not all(isinstance(n, str) and n.strip() for n in names):
        raise InvalidFilter("a condition's name is a non-empty field name", field=_FIELD)
    op_raw = item.get("comparison_operator")
    op = op_raw.strip().lower() if isinstance(op_raw, str) else None
    if op not in OPERATORS:
        raise InvalidFilter(
            f"unknown comparison_operator {op_raw!r}: use one of {', '.join(sorted(OPERATORS))}",
            field=_FIELD,
            value=op_raw,
        )
    op = _ALIASES.get(op, op)
    value = item.get("value")
    if value is None and op not in ("empty", "not empty"):
        return None  # Dify adds no filter for a null value
    return FieldCondition(tuple(n.strip() for n in names), op, _checked_value(op, value))


def _checked_value(op: str, value: Any) -> Any:
    """The value in the form ``op`` compares with; a value of the wrong kind raises."""
    if op in ("empty", "not empty"):
        return None
    if op in ("in", "not in"):
        if isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        if isinstance(value, list):
            return tuple(v for v in value if v is not None)
        return (value,)
    if op in ("is", "is not") and isinstance(value, list):
        return tuple(v for v in value if v is not None)  # any of them
    if isinstance(value, (list, dict)):
        raise InvalidFilter(f"'{op}' compares with one value, not {value!r}", field=_FIELD)
    if op in _MOMENT_OPS and _moment(value) is None:
        raise InvalidFilter(
            f"'{op}' takes a Unix timestamp or an ISO date (2024-05-01), not {value!r}",
            field=_FIELD,
            value=value,
        )
    if op in _ORDER_OPS and _number(value) is None and _moment(value) is None:
        raise InvalidFilter(f"'{op}' takes a number, not {value!r}", field=_FIELD, value=value)
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _moment(value: Any) -> datetime | None:
    """A Unix timestamp (seconds; a number or numeric text) or an ISO date/datetime (UTC if
    naive)."""
    seconds = _number(value)
    if seconds is not None:
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).casefold()


def _equal(have: Any, want: Any) -> bool:
    a, b = _number(have), _number(want)
    if a is not None and b is not None:
        return a == b
    return _text(have) == _text(want)


def _ordered(have: Any, op: str, want: Any, moments_only: bool) -> bool:
    pairs: list[tuple[Any, Any]] = [] if moments_only else [(_number(have), _number(want))]
    pairs.append((_moment(have), _moment(want)))
    for a, b in pairs:
        if a is not None and b is not None:
            return {"lt": a < b, "gt": a > b, "lte": a <= b, "gte": a >= b}[op]
    return False


def _one(op: str, have: Any, want: Any) -> bool:
    """``op`` on one scalar value of the document."""
    if op in _TEXT_OPS:
        text, wanted = _text(have), _text(want)
        return {
            "contains": wanted in text,
            "not contains": wanted not in text,
            "start with": text.startswith(wanted),
            "end with": text.endswith(wanted),
        }[op]
    if op in ("is", "is not"):
        wanted = want if isinstance(want, tuple) else (want,)
        return any(_equal(have, w) for w in wanted)
    if op in ("in", "not in"):
        return any(_equal(have, w) for w in want)
    if op in _ORDER_OPS:
        return _ordered(have, _ORDER_OPS[op], want, moments_only=False)
    return _ordered(have, _MOMENT_OPS[op], want, moments_only=True)


def _holds(op: str, have: Any, want: Any) -> bool:
    empty = have is _ABSENT or have in (None, "", [], {})
    if op == "empty":
        return empty
    if op == "not empty":
        return not empty
    if have is _ABSENT or have is None:
        # SQL's NULL in Dify: no comparison holds, except `not in` an empty list
        return op == "not in" and not want
    values = have if isinstance(have, list) else [have]
    negated = op in ("not contains", "is not", "not in")
    positive = {"not contains": "contains", "is not": "is", "not in": "in"}.get(op, op)
    found = any(_one(positive, v, want) for v in values)
    return not found if negated else found


def fields_of(
    tags: Iterable[str], metadata: Mapping[str, Any], item: Mapping[str, Any]
) -> dict[str, Any]:
    """The fields conditions see for one document: metadata, ``tags`` and the item's own
    ``concept_id``/``item_type``/``title``/``source`` (these win on a name clash, as they do
    in a Dify record's ``metadata``)."""
    out = {**metadata, "tags": sorted(tags)}
    out.update({k: v for k, v in item.items() if k in ITEM_FIELDS})
    return out


def check_names(conditions: ConditionSet, known: Iterable[str]) -> None:
    """Raise :class:`InvalidFilter` for a field no document of the base has."""
    allowed = {*known, "tags", *ITEM_FIELDS}
    unknown = sorted(conditions.names() - allowed)
    if unknown:
        raise InvalidFilter(
            f"unknown metadata field {', '.join(map(repr, unknown))}: no document of this base "
            f"has it (fields: tags, {', '.join(ITEM_FIELDS)} and the documents' metadata keys)",
            field=_FIELD,
            value=unknown,
        )
