"""Search filters parsed and resolved without a store (``search/scope.py``)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowbase.errors import InvalidFilter, InvalidInput
from knowbase.search.scope import (
    SearchFilters,
    allowed_materials,
    parse_filters,
    parse_since,
    parse_types,
    parse_under,
    type_of,
    under_matches,
)


def test_under_is_normalised_and_checked() -> None:
    assert parse_under("/papers/") == "papers"
    assert parse_under(" papers/2024 ") == "papers/2024"
    assert parse_under(None) is None and parse_under("/") is None and parse_under("") is None
    # NFD (macOS file names) and NFC spell the same folder
    assert parse_under("cafe\u0301") == "caf\u00e9"
    for bad in ("a/../b", "./a", "a//b", "a\\b"):
        with pytest.raises(InvalidFilter) as err:
            parse_under(bad)
        assert err.value.code == "invalid_filter" and err.value.details["field"] == "under"


def test_under_matches_whole_segments() -> None:
    assert under_matches("papers/x.md", "papers")
    assert under_matches("papers/2024/y.pdf", "papers")
    assert under_matches("papers", "papers")  # the document itself
    assert not under_matches("papers2/x.md", "papers")
    assert not under_matches("old-papers/x.md", "papers")
    assert not under_matches(None, "papers")
    assert under_matches("资料/论文/一.md", "资料")
    assert under_matches("資料/論文/x.md", "資料/論文")


@given(st.lists(st.sampled_from(["a", "b", "ab", "资料", "x.md"]), min_size=1, max_size=4),
       st.lists(st.sampled_from(["a", "b", "ab", "资料"]), min_size=1, max_size=3))  # fmt: skip
def test_under_is_a_segment_prefix(path: list[str], under: list[str]) -> None:
    """``under`` matches exactly when its segments are the first segments of the path."""
    expected = path[: len(under)] == under
    assert under_matches("/".join(path), "/".join(under)) is expected


def test_types_parse_from_lists_and_comma_lists() -> None:
    assert parse_types(["PDF,md", " .docx "]) == {"pdf", "md", "docx"}
    assert parse_types("url") == {"url"}
    assert parse_types(None) == frozenset() and parse_types([]) == frozenset()
    with pytest.raises(InvalidFilter) as err:
        parse_types(["pdf", "pfd"])
    assert "'pfd'" in err.value.message and err.value.details["value"] == ["pfd"]
    assert isinstance(err.value, InvalidInput) and err.value.status == 422


def test_type_of_items() -> None:
    assert type_of("file", "papers/Report.PDF") == "pdf"
    assert type_of("file", "a/notes.tar.gz") == "gz"
    assert type_of("file", "README") == "file"
    assert type_of("url", "example.com-page.md") == "url"
    assert type_of("note", "note-1.md") == "note"
    assert type_of("sitemap", None) == "url"


def test_since_accepts_dates_and_datetimes() -> None:
    day = int(datetime(2024, 5, 1, tzinfo=UTC).timestamp() * 1000)
    assert parse_since("2024-05-01") == day
    assert parse_since(date(2024, 5, 1)) == day
    assert parse_since("2024-05-01T00:00:00Z") == day
    assert parse_since("2024-05-01T02:00:00+02:00") == day
    assert parse_since(datetime(2024, 5, 1, 2, tzinfo=timezone(timedelta(hours=2)))) == day
    assert parse_since("2024-05-01T12:30") == day + 12 * 3_600_000 + 30 * 60_000  # naive: UTC
    assert parse_since(None) is None
    for bad in ("yesterday", "2024-13-01", "1714521600", ""):
        with pytest.raises(InvalidFilter) as err:
            parse_since(bad)
        assert err.value.details["field"] == "since"


def test_allowed_materials_applies_every_filter() -> None:
    t0 = parse_since("2024-05-01")
    assert t0 is not None
    rows = [
        ("a", "file", "papers/a.pdf", "papers/a.md", t0 - 1),  # processed PDF: type pdf
        ("b", "file", "papers/sub/b.md", None, t0),
        ("c", "file", "papers2/c.md", None, t0 + 5),
        ("n", "note", "note-n.md", None, t0 + 5),
        ("u", "url", "example.com.md", None, t0 + 5),
    ]
    assert allowed_materials(rows, parse_filters(under="papers")) == {"a", "b"}
    assert allowed_materials(rows, parse_filters(types=["pdf"])) == {"a"}
    assert allowed_materials(rows, parse_filters(types="md")) == {"b", "c"}
    assert allowed_materials(rows, parse_filters(types="note,url")) == {"n", "u"}
    assert allowed_materials(rows, parse_filters(since="2024-05-01")) == {"b", "c", "n", "u"}
    combined = parse_filters(under="papers", types=["md"], since="2024-05-01")
    assert allowed_materials(rows, combined) == {"b"}
    assert allowed_materials(rows, parse_filters(under="nowhere")) == frozenset()
    assert allowed_materials(rows, SearchFilters()) == {"a", "b", "c", "n", "u"}
    assert not SearchFilters().active and combined.active
    assert combined.explain() == {
        "under": "papers",
        "types": ["md"],
        "since": "2024-05-01T00:00:00+00:00",
    }
