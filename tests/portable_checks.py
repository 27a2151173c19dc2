"""Shared by the archive tests (tests/operations, tests/postgres, tests/interfaces): a source
base with files, notes and a folder on the ``hash:`` provider, a counter of embedding calls, and
the comparison of two bases that must be the same (items, Concept IDs, chunk offsets, vectors
bit for bit, top results of sample queries)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from knowbase.operations.add.inputs import AddInput
from knowbase.providers.registry import get_embedding_provider
from knowbase.service import Knowledge
from knowbase.units.hashing import text_hash

MODEL = "hash:d16"
QUERIES = ("otters sleep holding hands", "capital of France", "kelp forest", "数据库 索引", "rust")


def build_source(kb: Knowledge, src: Path, name: str = "docs") -> str:
    """A hybrid base with two files in a folder, a file, two notes (one CJK); its id."""
    base = kb.create_base(name, embedding_model_id=MODEL, file_processor_id=None)
    folder = src / "reef"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "otters.md").write_text(
        "# Otters\n\nSea otters hold hands while they sleep.\n\n## Food\n\nThey eat urchins "
        "that graze the kelp forest.\n",
        encoding="utf-8",
    )
    (folder / "kelp.txt").write_text("Kelp forests grow fast in cold water.\n" * 30, "utf-8")
    (src / "rust.md").write_text("# Rust\n\nOwnership and borrowing keep memory safe.\n", "utf-8")
    inputs = [
        AddInput.directory(folder),
        AddInput.file(src / "rust.md"),
        AddInput.note("Paris is the capital of France.", title="France"),
        AddInput.note("数据库的索引让查询更快。"),
    ]
    kb.add(base.id, inputs, wait=True)
    return base.id


@contextmanager
def count_embeddings(kb: Knowledge) -> Iterator[list[int]]:
    """Counts the texts sent to the ``hash:`` provider while the body runs."""
    provider = get_embedding_provider(MODEL, kb.settings)
    calls: list[int] = []
    original = provider.embed

    def counting(texts):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        return original(texts)

    provider.embed = counting  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        del provider.embed


def snapshot(kb: Knowledge, base: str) -> dict:
    """Everything two equal bases share: items by Concept ID, chunks, vectors, sample hits."""
    b = kb.get_base(base)
    items = {}
    hashes = set()
    for item in kb.list_items(b.id):
        key = item.concept_id or item.source
        chunks = []
        if item.status == "completed" and not item.is_container:
            for u in kb.list_item_chunks(b.id, item.id):
                chunks.append((u.unit_index, u.char_start, u.char_end, u.text, u.locator))
                hashes.add(text_hash(u.text))
        items[key] = (item.type, item.status, item.title, item.error_code, chunks)
    with kb.rt.lease(b) as store:
        vectors = store.stored_vectors(hashes)
    # Every hit of every unit (top_k above the unit count), ordered by score and then by what
    # the hit is: ties break by unit id, and unit ids name the item id, which a plain import
    # renews, so the order among equal scores is the only thing allowed to differ.
    searches = {
        q: sorted(
            (-round(r.score, 4), r.concept_id, r.char_start, r.char_end)
            for r in kb.search(b.id, q, top_k=50).results
        )
        for q in QUERIES
    }
    return {
        "settings": {k: getattr(b, k) for k in ("embedding_model_id", "dimensions", "chunk_size")},
        "items": items,
        "vectors": {h: v.tobytes() for h, v in vectors.items()},
        "vector_count": len(vectors),
        "searches": searches,
        "unit_count": len(hashes),
    }


def assert_same_base(a: dict, b: dict) -> None:
    assert a["settings"] == b["settings"]
    assert a["items"] == b["items"]
    assert a["vector_count"] == b["vector_count"] > 0
    assert a["vectors"] == b["vectors"]  # bit-equal float32
    assert a["searches"] == b["searches"]
    assert any(a["searches"].values())


def raw_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


__all__ = ["MODEL", "assert_same_base", "build_source", "count_embeddings", "np", "raw_tree"]
