"""``VisibilityCache``: completed items of one base only; a changed row is never served stale."""

from __future__ import annotations

import time

import pytest

from knowbase.catalog import items as item_repo
from knowbase.catalog.models import Base
from knowbase.search import visibility
from knowbase.search.visibility import VisibilityCache
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(60)


def test_only_completed_items_of_the_base(kb: Knowledge, bm25_base: Base) -> None:
    other = kb.create_base("other", file_processor_id=None)
    mine = kb.add_note(bm25_base.id, "alpha words", title="mine")
    theirs = kb.add_note(other.id, "alpha words", title="theirs")
    with kb.rt.catalog.write_tx() as conn:
        item_repo.set_status(conn, theirs.id, "completed")
    visible = VisibilityCache(kb.rt.catalog).for_base(bm25_base.id)
    found = visible({mine.id, theirs.id, "no-such-id"})
    assert list(found) == [mine.id]
    assert (found[mine.id].title, found[mine.id].item_type) == ("mine", "note")
    with kb.rt.catalog.write_tx() as conn:
        item_repo.mark_deleting(conn, [mine.id])
    assert visible({mine.id}) == {}  # the cached entry is not served for a hidden row


def test_a_changed_row_shows_its_new_fields(kb: Knowledge, bm25_base: Base) -> None:
    """Entries are keyed by ``(id, updated_at)``: a write that bumps the version is seen."""
    note = kb.add_note(bm25_base.id, "beta words", title="before")
    visible = VisibilityCache(kb.rt.catalog).for_base(bm25_base.id)
    assert visible({note.id})[note.id].title == "before"
    time.sleep(0.005)  # versions are millisecond timestamps: the write gets a new one
    with kb.rt.catalog.write_tx() as conn:
        item_repo.update_data(conn, note.id, source="after")
    assert visible({note.id})[note.id].title == "after"


def test_a_full_cache_is_dropped_and_refilled(
    kb: Knowledge, bm25_base: Base, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(visibility, "MAX_CACHED", 2)
    notes = [kb.add_note(bm25_base.id, f"gamma {n}", title=f"n{n}") for n in range(4)]
    cache = VisibilityCache(kb.rt.catalog)
    visible = cache.for_base(bm25_base.id)
    for note in notes:
        assert visible({note.id})[note.id].title == note.title
    assert len(cache._cache) <= 3
    assert {i.title for i in visible({n.id for n in notes}).values()} == {"n0", "n1", "n2", "n3"}
