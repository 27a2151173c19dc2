"""Issue 42 item 3, the reverse order: a folder added after one of its files adopts that file's
item (``operations/add/adopt.py``). Runs on every backend of the conformance run
(``KB_TEST_BACKENDS=postgres``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.catalog.models import Base
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(120)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def raw_files(kb: Knowledge, base: Base) -> set[str]:
    raw = kb.rt.storage(base.id).raw
    return {p.relative_to(raw).as_posix() for p in raw.rglob("*") if p.is_file()}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    write(root / "office" / "travel.md", "# Travel\n\nWalruses travel free on trains.\n")
    write(root / "memo.txt", "The memo mentions otters.")
    return root


def test_a_folder_adopts_the_file_the_base_held_alone(
    kb: Knowledge, hash_base: Base, corpus: Path
) -> None:
    """Same item id, its labels kept, its Concept ID under the folder's; one hit, not two;
    its old copy gone from raw/."""
    travel = corpus / "office" / "travel.md"
    labelled = AddInput.file(travel).with_labels(["policy"], {"owner": "hr"})
    alone = kb.add(hash_base.id, [labelled], wait=True).items[0]
    assert alone.relative_path == "travel.md"
    folder = kb.add(hash_base.id, [AddInput.directory(corpus)], wait=True).items[0]

    roots = kb.list_items(hash_base.id, roots_only=True)
    assert [r.id for r in roots] == [folder.id]  # the file alone is no root any more
    item = kb.get_item(hash_base.id, alone.id)
    assert item.status == "completed" and item.concept_id == "corpus/office/travel.md"
    assert (item.tags, item.metadata) == (["policy"], {"owner": "hr"})
    assert kb.get_item(hash_base.id, item.group_id).source == str(corpus / "office")
    hits = kb.search(hash_base.id, "walruses").results
    assert [(h.item_id, h.concept_id) for h in hits] == [(alone.id, "corpus/office/travel.md")]
    assert "travel.md" not in raw_files(kb, hash_base)
    assert "corpus/office/travel.md" in raw_files(kb, hash_base)
    files = [i for i in kb.list_items(hash_base.id) if i.type == "file"]
    assert sorted(i.concept_id or "" for i in files) == [
        "corpus/memo.txt",
        "corpus/office/travel.md",
    ]
