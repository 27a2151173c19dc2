"""One add reads its base's row once (issue 38 item 5).

Before, ``kb.add`` resolved the base in the facade, read it again in ``add_items``, and the
default ``update`` read it a third time: re-entering ``add_items`` for the new inputs, or in
the sync that refreshes a re-added folder or file. Now ``add_items`` resolves the name once and
every step after takes the row; every guard (a failed base, a forbidden URL, the home's own
files) still runs once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import event

from knowbase.catalog.models import Base
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)

#: A read of a base row (by id, by name, or both at once), whatever the backend's dialect.
BASE_READ = re.compile(r"^\s*SELECT\b.*\bFROM\s+\"?knowledge_base\"?(\s|$)", re.S | re.I)


@contextmanager
def base_reads(kb: Knowledge) -> Iterator[list[str]]:
    """The base-row SELECTs the catalog runs inside the block."""
    seen: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if BASE_READ.search(statement):
            seen.append(statement)

    engine = kb.rt.catalog.engine
    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "a.md"
    path.parent.mkdir()
    path.write_text("# A\n\nalpha text\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("strategy", ["update", "rename", "detect", "replace"])
def test_a_first_add_by_name_reads_the_base_once(
    kb: Knowledge, bm25_base: Base, doc: Path, strategy: str
) -> None:
    with base_reads(kb) as seen:
        result = kb.add(bm25_base.name, [AddInput.file(doc)], strategy=strategy)  # type: ignore[arg-type]
    assert len(result.items) == 1
    assert len(seen) == 1, seen


def test_a_re_add_that_updates_reads_the_base_once(
    kb: Knowledge, bm25_base: Base, doc: Path
) -> None:
    """The default: the file is known, so the add syncs it and adds the tag to its item (and
    adds the new note)."""
    kb.add(bm25_base.id, [AddInput.file(doc)], wait=True)
    doc.write_text("# A\n\nalpha text, edited\n", encoding="utf-8")
    with base_reads(kb) as seen:
        result = kb.add(
            bm25_base.name,
            [AddInput.file(doc).with_labels(["kept"], None), AddInput.note("new", title="n")],
        )
    assert [i.type for i in result.updated] == ["file"] and len(result.items) == 1
    assert result.update_report["changed"] == 1
    assert [i.tags for i in kb.list_items(bm25_base.id) if i.type == "file"] == [["kept"]]
    assert len(seen) == 1, seen


def test_a_re_add_of_a_folder_reads_the_base_once(
    kb: Knowledge, bm25_base: Base, doc: Path
) -> None:
    folder = doc.parent
    kb.add(bm25_base.id, [AddInput.directory(folder)], wait=True)
    (folder / "b.md").write_text("# B\n\nbeta text\n", encoding="utf-8")
    with base_reads(kb) as seen:
        result = kb.add(bm25_base.name, [AddInput.directory(folder)])
    assert result.items == [] and result.update_report["new"] == 1
    assert len(seen) == 1, seen
