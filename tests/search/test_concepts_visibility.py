"""A Concept ID never returns what it should not: other bases, deleting, unfinished, traversal."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base, Item
from knowbase.errors import NotFound
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)

SECRET = "the secret lives in base B"


@pytest.fixture
def two_bases(kb: Knowledge, src: Path) -> tuple[Base, Base, Item]:
    a = kb.create_base("A", file_processor_id=None)
    b = kb.create_base("B", file_processor_id=None)
    (src / "shared.md").write_text("base A text", encoding="utf-8")
    kb.add(a.id, [AddInput.file(src / "shared.md")], wait=True)
    (src / "shared.md").write_text("base B text", encoding="utf-8")
    (src / "only_b.md").write_text(SECRET, encoding="utf-8")
    result = kb.add(b.id, [AddInput.file(src / "shared.md"), AddInput.file(src / "only_b.md")],
                    wait=True)  # fmt: skip
    return a, b, result.items[1]


def calls(kb: Knowledge, base: str, concept_id: str):  # type: ignore[no-untyped-def]
    c = kb.concepts
    return [
        lambda: c.resolve(base, concept_id),
        lambda: c.read_concept(base, concept_id),
        lambda: c.grep_concept(base, concept_id, "."),
    ]


def assert_hidden(kb: Knowledge, base: str, concept_id: str) -> None:
    for call in calls(kb, base, concept_id):
        with pytest.raises(NotFound) as info:
            call()
        assert SECRET not in str(info.value.message)
        assert info.value.details["kind"] == "concept"


def test_other_base_concept_is_hidden(kb: Knowledge, two_bases: tuple[Base, Base, Item]) -> None:
    a, b, _ = two_bases
    assert kb.concepts.read_concept(b.id, "only_b.md")["content"] == SECRET
    assert_hidden(kb, a.id, "only_b.md")
    # The same Concept ID in two bases reads each base's own document.
    assert kb.concepts.read_concept(a.id, "shared.md")["content"] == "base A text"
    assert kb.concepts.read_concept(b.id, "shared.md")["content"] == "base B text"


def test_deleting_item_is_hidden(kb: Knowledge, two_bases: tuple[Base, Base, Item]) -> None:
    _, b, secret = two_bases
    kb.delete_items(b.id, [secret.id])  # no worker: stays "deleting", index rows still there
    assert kb.rt.store(kb.get_base(b.id)).material_by_path("only_b.md") == secret.id
    assert_hidden(kb, b.id, "only_b.md")


@pytest.mark.parametrize("status", ["processing", "reading", "embedding", "failed"])
def test_unfinished_or_failed_item_is_hidden(
    kb: Knowledge, two_bases: tuple[Base, Base, Item], status: str
) -> None:
    _, b, secret = two_bases
    with kb.rt.catalog.write_tx() as conn:
        item_repo.set_status(conn, secret.id, status, error_code="x", error_message="x")
    assert_hidden(kb, b.id, "only_b.md")


def test_item_never_indexed_is_hidden(kb: Knowledge, bm25_base: Base) -> None:
    item = kb.add(bm25_base.id, [AddInput.note(SECRET, title="later")]).items[0]
    assert item.status != "completed"
    assert_hidden(kb, bm25_base.id, "later.md")


@pytest.mark.parametrize(
    "concept_id",
    [
        "../x",
        "../B/raw/only_b.md",
        ".kb/index.sqlite",
        ".kb/../only_b.md",
        "./only_b.md",
        "/only_b.md",
        "only_b.md/",
        "ONLY_B.md",
        "only_b.md\x00",
        "",
        "C:\\only_b.md",
        "x" * 2000,
    ],
)
def test_traversal_and_non_exact_ids_are_hidden(
    kb: Knowledge, two_bases: tuple[Base, Base, Item], concept_id: str
) -> None:
    _, b, _ = two_bases
    assert_hidden(kb, b.id, concept_id)


def test_absolute_raw_path_is_hidden(kb: Knowledge, two_bases: tuple[Base, Base, Item]) -> None:
    _, b, _ = two_bases
    raw = kb.rt.storage(b.id).raw
    assert (raw / "only_b.md").read_text(encoding="utf-8") == SECRET
    assert_hidden(kb, b.id, str(raw / "only_b.md"))
    assert_hidden(kb, b.id, str(kb.settings.home / "bases" / b.id / ".kb" / "index.sqlite"))
