"""Index jobs embed through the process's batcher: shared calls, own vectors, own failures."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from knowbase.errors import ProviderError
from knowbase.operations.add.inputs import AddInput
from knowbase.pipeline.indexing.batcher import batcher_for
from knowbase.providers.hashing_provider import hash_vector
from knowbase.providers.registry import get_embedding_provider
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(120)

FILES = 24


def make_folder(src: Path, n: int = FILES, poison: set[int] = frozenset()) -> Path:  # type: ignore[assignment]
    folder = src / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        word = "poison" if i in poison else "marmot"
        (folder / f"doc{i:02d}.md").write_text(
            f"# Document {i}\n\nDocument {i} is about {word} number {i * 7}.\n", encoding="utf-8"
        )
    return folder


def stored_units(kb: Knowledge, base_id: str) -> list[tuple[str, str]]:
    """(unit id, the text its vector was computed from: title + heading path + slice) for every
    completed file of the base."""
    from knowbase.units.context import unit_text

    store = kb.rt.store(kb.get_base(base_id))
    return [
        (unit.unit_id, unit_text(item.title, unit.locator, unit.text))
        for item in kb.list_items(base_id)
        if item.type == "file" and item.status == "completed"
        for unit in store.list_units(item.id)
    ]


def assert_each_unit_holds_its_own_vector(kb: Knowledge, base_id: str, dims: int) -> None:
    """The oracle, on every index backend: searching with the vector of a unit's own text finds
    that unit first at cosine ~1 — a vector handed to another job's unit would not."""
    store = kb.rt.store(kb.get_base(base_id))
    units = stored_units(kb, base_id)
    assert len(units) >= FILES
    for unit_id, text in units:
        top = store.vector_search(hash_vector(text, dims), 1)
        assert top and top[0].unit_id == unit_id, text
        assert top[0].score == pytest.approx(1.0, abs=1e-4), text


def test_jobs_share_provider_calls_and_store_their_own_vectors(kb: Knowledge, src: Path) -> None:
    model = "hash:d48?delay=0.1"  # a slow call, so the next jobs' texts gather behind it
    base = kb.create_base("batched", embedding_model_id=model, file_processor_id=None)
    provider = get_embedding_provider(model, kb.settings)
    kb.add(base.id, [AddInput.directory(make_folder(src))], wait=True, timeout_s=90)
    stats = batcher_for(provider).stats
    # One claim carries many index jobs (operations/indexing/index_batch.py): their texts reach
    # the batcher in one request, so a call carries several documents' texts.
    assert stats.largest >= 2, "no call carried more than one job's texts"
    assert stats.calls < FILES / 2
    assert_each_unit_holds_its_own_vector(kb, base.id, 48)


def test_a_refused_text_fails_only_its_own_item(kb: Knowledge, src: Path) -> None:
    model = "hash:d40?delay=0.05"
    base = kb.create_base("poisoned", embedding_model_id=model, file_processor_id=None)
    provider = get_embedding_provider(model, kb.settings)
    real = provider.embed
    failed_texts: set[str] = set()
    lock = threading.Lock()

    def embed(texts):  # type: ignore[no-untyped-def]
        if any("poison" in t for t in texts):
            with lock:
                failed_texts.update(texts)
            raise ProviderError("the server refused this batch", status=400)
        return real(texts)

    provider.embed = embed  # type: ignore[method-assign]
    try:
        kb.add(
            base.id,
            [AddInput.directory(make_folder(src, poison={3, 17}))],
            wait=True,
            timeout_s=90,
        )
    finally:
        del provider.embed
    items = {i.title: i for i in kb.list_items(base.id) if i.type == "file"}
    failed = {t for t, i in items.items() if i.status == "failed"}
    # A refused call is retried item by item (index_batch._embed): only the items whose own
    # texts the model refuses fail, never their batch-mates.
    assert failed_texts
    assert failed == {"doc03.md", "doc17.md"}
    assert {i.error_code for t, i in items.items() if t in failed} == {"provider_error"}
    assert all(i.status == "completed" for t, i in items.items() if t not in failed)
