"""Tags and metadata on items, and search filters on them (issue 27 item 2).

Facade level over ``kb`` (run once per index backend with ``KB_TEST_BACKENDS``): set at add
time, inherited from folders, changed later, kept through reindex, sync and export/import, and
applied inside both lanes on a BM25-only and a hybrid (``hash:``) base.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowbase.catalog.labels import effective_labels, normalize_metadata, normalize_tags
from knowbase.catalog.models import Base
from knowbase.errors import InvalidFilter, InvalidInput, NotFound
from knowbase.operations.add.inputs import AddInput
from knowbase.search.label_filters import holds, parse_where
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def library(src: Path) -> Path:
    (src / "team" / "infra").mkdir(parents=True)
    (src / "team" / "infra" / "vpn.md").write_text("# VPN\n\nThe alpaca VPN key rotates weekly.\n")
    (src / "team" / "infra" / "dns.md").write_text("# DNS\n\nAlpaca DNS records live in git.\n")
    (src / "team" / "bread.md").write_text("# Bread\n\nAlpaca sourdough needs a starter.\n")
    return src


@pytest.fixture(params=["bm25_base", "hash_base"])
def labelled(request: pytest.FixtureRequest, kb: Knowledge, library: Path) -> Base:
    base: Base = request.getfixturevalue(request.param)
    note = AddInput.note("Alpaca wool is warm in winter.", title="wool").with_labels(
        ["Fibre"], {"year": 2019, "lang": "en"}
    )
    folder = AddInput.directory(library / "team").with_labels(["team"], {"lang": "de"})
    kb.add(base.id, [folder, note], wait=True)
    kb.set_labels(base.id, "team/infra/vpn.md", add_tags=["secret"], merge_metadata={"year": 2024})
    return base


def _found(kb: Knowledge, base: Base, **filters: object) -> set[str]:
    results = kb.search(base.id, "alpaca", top_k=20, **filters).results
    return {r.concept_id or r.title or "" for r in results}


def test_tags_from_the_add_inherited_from_folders_and_set_later(
    kb: Knowledge, labelled: Base
) -> None:
    everything = _found(kb, labelled)
    assert len(everything) == 4
    assert _found(kb, labelled, tags=["team"]) == {
        "team/infra/vpn.md",
        "team/infra/dns.md",
        "team/bread.md",
    }
    assert _found(kb, labelled, tags=["TEAM", "secret"]) == {"team/infra/vpn.md"}
    assert len(_found(kb, labelled, tags="fibre")) == 1  # the note
    assert _found(kb, labelled, tags=["nobody-has-this"]) == set()


def test_metadata_conditions_equal_in_and_ranges(kb: Knowledge, labelled: Base) -> None:
    assert len(_found(kb, labelled, where={"lang": "en"})) == 1
    assert len(_found(kb, labelled, where=["lang=de"])) == 3  # the folder's metadata
    assert _found(kb, labelled, where=["year>=2020"]) == {"team/infra/vpn.md"}
    assert len(_found(kb, labelled, where={"year": {"gte": 2000, "lt": 2020}})) == 1
    assert len(_found(kb, labelled, where=["lang in en,de"])) == 4
    assert _found(kb, labelled, where=["lang=de", "year>2020"], tags=["secret"]) == {
        "team/infra/vpn.md"
    }


def test_a_folder_label_changed_later_applies_to_its_documents(
    kb: Knowledge, labelled: Base
) -> None:
    kb.set_labels(labelled.id, "team/infra", tags=["ops"])
    assert _found(kb, labelled, tags=["ops"]) == {"team/infra/vpn.md", "team/infra/dns.md"}
    kb.set_labels(labelled.id, "team/infra", remove_tags=["ops"])
    assert _found(kb, labelled, tags=["ops"]) == set()


def test_labels_survive_reindex_and_sync(kb: Knowledge, labelled: Base, library: Path) -> None:
    vpn = next(i for i in kb.list_items(labelled.id) if i.concept_id == "team/infra/vpn.md")
    kb.reindex_items(labelled.id, [vpn.id], wait=True)
    (library / "team" / "infra" / "vpn.md").write_text("# VPN\n\nThe alpaca VPN key, edited.\n")
    (library / "team" / "infra" / "new.md").write_text("# New\n\nA new alpaca runbook.\n")
    kb.sync(labelled.id, wait=True)
    assert _found(kb, labelled, tags=["secret"]) == {"team/infra/vpn.md"}
    assert "team/infra/new.md" in _found(kb, labelled, tags=["team"])  # inherited by a new file
    assert kb.get_item(labelled.id, vpn.id).tags == ["secret"]


def test_labels_survive_export_and_import(kb: Knowledge, labelled: Base, tmp_path: Path) -> None:
    kb.export_base(labelled.id, tmp_path / "b.kbz")
    base = kb.import_base(tmp_path / "b.kbz", "copy-of-labelled").base
    assert _found(kb, base, tags=["secret"]) == {"team/infra/vpn.md"}
    assert len(_found(kb, base, where=["lang=de"])) == 3


def test_bad_labels_and_filters_are_refused(kb: Knowledge, bm25_base: Base, src: Path) -> None:
    (src / "a.md").write_text("alpaca")
    with pytest.raises(InvalidInput):
        kb.add(bm25_base.id, [AddInput.file(src / "a.md").with_labels(["bad\ttag"])])
    with pytest.raises(InvalidInput):
        kb.add(bm25_base.id, [AddInput.file(src / "a.md").with_labels([], {"k": {"nested": 1}})])
    assert kb.list_items(bm25_base.id) == []  # nothing was written
    for bad in ({"where": ["no operator"]}, {"where": {"k": {"like": 1}}}, {"tags": [3]}):
        with pytest.raises(InvalidFilter):
            kb.search(bm25_base.id, "alpaca", **bad)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        kb.set_labels(bm25_base.id, "no/such.md", tags=["x"])


_TAG_CHARS = st.characters(max_codepoint=0x2FF, blacklist_categories=("Cc", "Cs"))


@given(st.lists(st.text(_TAG_CHARS, max_size=12)))
def test_normalized_tags_are_distinct_trimmed_and_stable(tags: list[str]) -> None:
    once = normalize_tags(tags)
    assert normalize_tags(once) == once
    assert len({t.casefold() for t in once}) == len(once)
    assert all(t == t.strip() and t for t in once)


def test_metadata_limits() -> None:
    assert normalize_metadata({"a": 1, "b": None, "c": ["x", 2]}) == {"a": 1, "c": ["x", 2]}
    with pytest.raises(InvalidInput):
        normalize_metadata({str(i): i for i in range(65)})
    with pytest.raises(InvalidInput):
        normalize_metadata({"big": "x" * 9000})


def test_nearest_metadata_wins_and_cycles_end() -> None:
    rows = {"a": ("b", ["t1"], {"k": "a"}), "b": ("a", ["t2"], {"k": "b", "j": 1})}
    tags, meta = effective_labels("a", rows)
    assert tags == {"t1", "t2"} and meta == {"k": "a", "j": 1}


@pytest.mark.parametrize(
    ("spec", "meta", "expected"),
    [
        ("d>=2024-01-01", {"d": "2024-03-05"}, True),
        ("d<2024-01-01", {"d": "2024-03-05T10:00:00+02:00"}, False),
        ("n<=10", {"n": "9.5"}, True),
        ("n>10", {"n": "ten"}, False),
        ("tag=b", {"tag": ["a", "B"]}, True),
        ("missing!=x", {}, True),
        ("missing=x", {}, False),
    ],
)
def test_conditions(spec: str, meta: dict, expected: bool) -> None:
    (condition,) = parse_where([spec])
    assert holds(meta, condition) is expected
