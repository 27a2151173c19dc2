"""A hypothesis state machine over add / delete / reindex / replace, invariants after each step:
catalog and index agree, Concept IDs are unique, nothing deleted is ever found, no row stuck.

It runs on the conformance backend (``KB_TEST_BACKENDS``): each example gets a fresh home with
the ``kb_settings`` fixture's catalog and index backend, and a base of its own name (on
PostgreSQL the examples share one database)."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from knowbase.catalog import items as item_repo
from knowbase.catalog.schema import ACTIVE_STATUSES
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(180)

NAMES = st.sampled_from(["a.md", "b.md", "notes.txt", "a_1.md"])
WORDS = st.sampled_from(["otter", "heron", "lynx", "bison"])


_examples = itertools.count()


class Ingestion(RuleBasedStateMachine):
    def __init__(self, settings_: Settings) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="kb-sm-"))
        self.kb = Knowledge(settings_.with_(home=self.tmp / "home"))
        self.base = self.kb.create_base(
            f"sm{next(_examples)}", embedding_model_id="hash:d64", file_processor_id=None
        )
        self.kb.start_workers()
        self.n = 0
        self.words: dict[str, str] = {}  # live item id → the word its text holds
        self.gone: set[str] = set()

    def teardown(self) -> None:
        self.kb.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _file(self, name: str, word: str) -> Path:
        self.n += 1
        path = self.tmp / "src" / str(self.n) / name
        path.parent.mkdir(parents=True)
        path.write_text(f"{word} document {self.n}", encoding="utf-8")
        return path

    def _settle(self, job_ids: list[str]) -> None:
        self.kb.wait(job_ids, timeout_s=60)

    @rule(name=NAMES, word=WORDS, strategy=st.sampled_from(["rename", "replace"]))
    def add_file(self, name: str, word: str, strategy: str) -> None:
        before = {i.id for i in self.kb.list_items(self.base.id)}
        result = self.kb.add(
            self.base.id, [AddInput.file(self._file(name, word))], strategy=strategy
        )  # type: ignore[arg-type]
        self._settle(result.job_ids)
        after = {i.id for i in self.kb.list_items(self.base.id)}
        for lost in before - after:  # replaced
            self.words.pop(lost, None)
            self.gone.add(lost)
        self.words[result.items[0].id] = word

    @rule(word=WORDS)
    def add_note(self, word: str) -> None:
        result = self.kb.add(self.base.id, [AddInput.note(f"{word} note {self.n}")])
        self.n += 1
        self._settle(result.job_ids)
        self.words[result.items[0].id] = word

    @precondition(lambda self: self.words)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        victim = data.draw(st.sampled_from(sorted(self.words)))
        job = self.kb.delete_items(self.base.id, [victim])
        self.words.pop(victim)
        self.gone.add(victim)
        if data.draw(st.booleans()):  # sometimes check the in-between state, before the purge
            assert victim not in {
                h.item_id for h in self.kb.search(self.base.id, "document").results
            }
        self._settle([job] if job else [])

    @precondition(lambda self: self.words)
    @rule(data=st.data(), reacquire=st.booleans())
    def reindex(self, data: st.DataObject, reacquire: bool) -> None:
        target = data.draw(st.sampled_from(sorted(self.words)))
        job = self.kb.reindex_items(self.base.id, [target], reacquire=reacquire)
        self._settle([job] if job else [])

    @invariant()
    def catalog_and_index_agree(self) -> None:
        with self.kb.rt.catalog.read() as conn:
            rows = item_repo.list_items(conn, self.base.id, include_deleting=True)
        assert not [r for r in rows if r.status in ACTIVE_STATUSES or r.status == "deleting"]
        live = {r.id for r in rows}
        assert live == set(self.words)
        assert {r.status for r in rows} <= {"completed"}
        dupes = [p for p, n in Counter(r.concept_id for r in rows).items() if n > 1]
        assert dupes == []
        store = self.kb.rt.store(self.kb.get_base(self.base.id))
        assert store.material_ids() == live == store.unit_material_ids()

    @invariant()
    def search_finds_live_items_only(self) -> None:
        for word in ("otter", "heron"):
            found = {h.item_id for h in self.kb.search(self.base.id, word, top_k=50).results}
            assert not found & self.gone
            expected = {i for i, w in self.words.items() if w == word}
            assert expected <= found


def test_ingestion_state_machine(kb_settings: Settings) -> None:
    run_state_machine_as_test(
        lambda: Ingestion(kb_settings),
        settings=settings(max_examples=8, stateful_step_count=8, deadline=None),
    )
