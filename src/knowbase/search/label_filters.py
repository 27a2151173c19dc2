"""Search filters on tags and metadata (``--tag``, ``--where``; HTTP/MCP ``tags``, ``where``).

- ``tags``: every tag given must be among the document's effective tags (its own and its
  folders', ``catalog/labels.py``); compared case-insensitively.
- ``where``: conditions on effective metadata, all of which must hold. As JSON (HTTP, MCP,
  Python) a mapping ``{key: condition}`` where a condition is a value (equals; a list: any of
  them), ``{"in": [...]}``, ``{"ne": v}`` or a range ``{"gte"|"gt"|"lte"|"lt": v, …}``; on the
  CLI the strings ``key=v``, ``key!=v``, ``key>=v``, ``key>v``, ``key<=v``, ``key<v`` and
  ``key in a,b,c``. Ranges compare numbers as numbers and ISO dates/datetimes as dates; text is
  compared case-insensitively; a document without the key does not match (except ``ne``).

>>> where = parse_where(["year>=2020", "lang in en,de", "team=Infra"])
>>> matches_labels(frozenset(), {"year": 2021, "lang": "de", "team": "infra"}, frozenset(), where)
True
>>> matches_labels(frozenset(), {"year": "2019", "lang": "en", "team": "infra"}, frozenset(), where)
False
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from knowbase.errors import InvalidFilter

MAX_CONDITIONS = 32
_RANGE_OPS = ("gte", "gt", "lte", "lt")
_OPS = frozenset({"eq", "in", "ne", *_RANGE_OPS})
_CLI = re.compile(r"^\s*([^=!<>\s][^=!<>]*?)\s*(>=|<=|!=|=|>|<)\s*(.*?)\s*$")
_CLI_IN = re.compile(r"^\s*(\S+)\s+in\s+(.+?)\s*$", re.IGNORECASE)
_SYMBOL = {"=": "eq", "!=": "ne", ">=": "gte", ">": "gt", "<=": "lte", "<": "lt"}


@dataclass(frozen=True)
class Condition:
    """One metadata condition: ``key`` ``op`` ``value`` (``in``: a tuple of values)."""

    key: str
    op: str
    value: Any

    def explain(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"key": self.key, "op": self.op, "value": value}


def parse_tags(tags: Iterable[str] | str | None) -> frozenset[str]:
    """The tags a search requires, case-folded (a comma list in one string is split)."""
    if tags is None:
        return frozenset()
    values = tags.split(",") if isinstance(tags, str) else list(tags)
    out = set()
    for value in values:
        if not isinstance(value, str):
            raise InvalidFilter("tags must be text", field="tags")
        for part in value.split(","):
            if part.strip():
                out.add(part.strip().casefold())
    if len(out) > MAX_CONDITIONS:
        raise InvalidFilter(f"at most {MAX_CONDITIONS} tags in one search", field="tags")
    return frozenset(out)


def _scalar(text: str) -> Any:
    """A CLI value as a number when it reads as one, else as text."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _from_cli(spec: str) -> list[Condition]:
    found = _CLI_IN.match(spec)
    if found and not any(c in found.group(1) for c in "=<>!"):
        values = tuple(_scalar(v.strip()) for v in found.group(2).split(",") if v.strip())
        return [Condition(found.group(1), "in", values)]
    found = _CLI.match(spec)
    if not found:
        raise InvalidFilter(
            f"cannot read the condition {spec!r}: use key=value, key!=value, key>=value, "
            "key<=value, key>value, key<value or 'key in a,b'",
            field="where",
        )
    key, symbol, value = found.groups()
    if value[:1] in ("=", "<", ">", "!"):  # "year=>2023", "year==2023": a mistyped operator
        raise InvalidFilter(
            f"cannot read the operator in {spec!r}: use =, !=, >=, <=, > or < "
            f"(e.g. {key}>={value.lstrip('=<>!')})",
            field="where",
        )
    return [Condition(key, _SYMBOL[symbol], _scalar(value))]


def _from_mapping(key: str, condition: Any) -> list[Condition]:
    if not isinstance(condition, Mapping):
        if isinstance(condition, list):
            return [Condition(key, "in", tuple(condition))]
        return [Condition(key, "eq", condition)]
    out = []
    for op, value in condition.items():
        if op not in _OPS:
            raise InvalidFilter(
                f"unknown operator {op!r} for {key!r}: use one of {sorted(_OPS)}", field="where"
            )
        if op == "in":
            if not isinstance(value, list) or not value:
                raise InvalidFilter(f"{key!r}: 'in' takes a non-empty list", field="where")
            value = tuple(value)
        out.append(Condition(key, op, value))
    return out


def parse_where(where: Mapping[str, Any] | Iterable[str] | str | None) -> tuple[Condition, ...]:
    """Conditions from a JSON mapping or CLI strings (see the module doc)."""
    if where is None:
        return ()
    conditions: list[Condition] = []
    if isinstance(where, Mapping):
        for key, condition in where.items():
            if not isinstance(key, str) or not key.strip():
                raise InvalidFilter("a where key is non-empty text", field="where")
            conditions += _from_mapping(key.strip(), condition)
    else:
        specs = [where] if isinstance(where, str) else list(where)
        for spec in specs:
            if not isinstance(spec, str):
                raise InvalidFilter("a where condition is text like key=value", field="where")
            conditions += _from_cli(spec)
    for c in conditions:
        bad_value = c.op != "in" and not isinstance(c.value, (str, int, float, bool))
        if bad_value or (
            c.op == "in" and not all(isinstance(v, (str, int, float, bool)) for v in c.value)
        ):
            raise InvalidFilter(f"{c.key!r}: compare with text, numbers or booleans", field="where")
    if len(conditions) > MAX_CONDITIONS:
        raise InvalidFilter(f"at most {MAX_CONDITIONS} where conditions", field="where")
    return tuple(conditions)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str) or not re.match(r"^\d{4}-\d{2}-\d{2}", value):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _equal(have: Any, want: Any) -> bool:
    if isinstance(have, list):
        return any(_equal(h, want) for h in have)
    if isinstance(have, bool) or isinstance(want, bool):
        return str(have).casefold() == str(want).casefold()
    a, b = _number(have), _number(want)
    if a is not None and b is not None:
        return a == b
    return str(have).casefold() == str(want).casefold()


def _ordered(have: Any, op: str, want: Any) -> bool:
    pairs = [(_number(have), _number(want)), (_moment(have), _moment(want))]
    for a, b in pairs:
        if a is not None and b is not None:
            return {"gte": a >= b, "gt": a > b, "lte": a <= b, "lt": a < b}[op]  # type: ignore[operator]
    return False


def holds(metadata: Mapping[str, Any], condition: Condition) -> bool:
    """Whether one condition holds on a document's effective metadata."""
    if condition.key not in metadata:
        return condition.op == "ne"
    have = metadata[condition.key]
    if condition.op == "eq":
        return _equal(have, condition.value)
    if condition.op == "ne":
        return not _equal(have, condition.value)
    if condition.op == "in":
        return any(_equal(have, v) for v in condition.value)
    if isinstance(have, list):
        return any(_ordered(h, condition.op, condition.value) for h in have)
    return _ordered(have, condition.op, condition.value)


def matches_labels(
    tags: frozenset[str],
    metadata: Mapping[str, Any],
    required_tags: frozenset[str],
    where: tuple[Condition, ...],
) -> bool:
    """Whether a document with these effective labels passes the tag and where filters."""
    if required_tags and not required_tags <= {t.casefold() for t in tags}:
        return False
    return all(holds(metadata, c) for c in where)
