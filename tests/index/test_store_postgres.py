"""What only the postgres backend has: the SQLite lane's ranking carried over, visibility by a
join with the catalog, and a server without pgvector (real embedded PostgreSQL 18)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from knowbase.catalog import bases as base_repo
from knowbase.catalog.db import Catalog
from knowbase.errors import VectorStoreUnavailable
from knowbase.index.base import MaterialInput
from knowbase.index.postgres.store import PostgresIndexStore, ef_search_for, keyword_words
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.service import Knowledge
from knowbase.service.readiness import check_index
from knowbase.settings import Settings
from knowbase.units.chunk import Chunk

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def catalog(pg_server, pg_url: str) -> Iterator[Catalog]:
    if not pg_server.has_vector:
        pytest.skip("pgvector is not built for the embedded PostgreSQL: run .ci/pgvector.sh")
    cat = Catalog(pg_url)
    yield cat
    cat.dispose()


def _base(catalog: Catalog, dims: int | None = None) -> str:
    with catalog.write_tx() as conn:
        model = "hash:x" if dims else None
        return base_repo.insert(conn, name="b", embedding_model_id=model, dimensions=dims).id


CORPUS = [
    "The quick brown fox jumps over the lazy dog near the river bank",
    "A lazy afternoon by the river with a book and a dog",
    "Foxes are quick and clever animals of the forest",
    "Brown bears fish for salmon in the cold river",
    "机器学习是人工智能的一个分支，深度学习是机器学习的一种",
    "深度学习需要大量数据",
    "The bank approved the loan for the river house",
    "Dogs and foxes are both canids",
]
QUERIES = ["river", "lazy dog", "quick fox", "学习", "深度学习 数据", "bank loan river", "canids"]


def _corpus() -> list[MaterialInput]:
    out = []
    for i, text in enumerate(CORPUS):
        half = len(text) // 2
        chunks = [Chunk(text[:half], 0, half, 0), Chunk(text[half:], half, len(text), 1)]
        out.append(MaterialInput(f"m{i}", f"d{i}.md", text, chunks))
    return out


def test_keyword_lane_ranks_as_the_sqlite_lane(catalog: Catalog, tmp_path: Path) -> None:
    """FTS5's BM25 recomputed over tsvectors: same units, same order, same scores."""
    pg = PostgresIndexStore.open(catalog.engine, base_id=_base(catalog), dims=None)
    lite = SqliteIndexStore.open(tmp_path / "i.sqlite", base_id="s", dims=None)
    for m in _corpus():
        pg.rebuild_material(m, {})
        lite.rebuild_material(m, {})
    pg.delete_materials(["m7"])  # the totals (N, avgdl) follow deletes too
    lite.delete_materials(["m7"])
    for q in QUERIES:
        want = lite.keyword_search(q, 10)
        got = pg.keyword_search(q, 10)
        assert [h.unit_id for h in got] == [h.unit_id for h in want], q
        assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-6), q
    lite.close()


def test_keyword_words_cut_like_unicode61() -> None:
    assert keyword_words("e-mail: foo_bar@x.org, café 3.14 AI机器学习") == [
        "e", "mail", "foo", "bar", "x", "org", "cafe", "3", "14", "AI", "机器", "器学", "学习",
    ]  # fmt: skip


def test_ef_search_covers_the_limit_and_stays_in_range() -> None:
    assert ef_search_for(10) >= 40  # never pgvector's default, which gave recall 0.32-0.59
    assert ef_search_for(250) >= 250
    assert ef_search_for(5000) == 1000


def test_visibility_is_a_join_with_the_catalog(tmp_path: Path, catalog: Catalog) -> None:
    kb = Knowledge(Settings(home=tmp_path / "home", database_url=catalog.url, test_providers=True))
    try:
        kb.create_base("v", file_processor_id=None)
        shown = kb.add_note("v", "Otters hold hands while sleeping.")
        hidden = kb.add_note("v", "Otters use stones as tools.")
        with kb.rt.catalog.write_tx() as conn:
            conn.execute(
                sa.text("UPDATE knowledge_item SET status = 'idle' WHERE id = :i"), {"i": hidden.id}
            )
        store = kb.rt.store(kb.get_base("v"))
        assert {h.material_id for h in store.keyword_search("otters", 10)} == {shown.id}
        assert [r.item_id for r in kb.search("v", "otters").results] == [shown.id]
    finally:
        kb.close()


def test_without_pgvector_vector_bases_are_unavailable_and_bm25_works(
    tmp_path: Path, catalog: Catalog
) -> None:
    kb = Knowledge(Settings(home=tmp_path / "home", database_url=catalog.url, test_providers=True))
    try:
        vec = kb.create_base("vec", embedding_model_id="hash:d8", file_processor_id=None)
        bm = kb.create_base("bm", file_processor_id=None)
        with kb.rt.catalog.write_tx() as conn:
            conn.execute(sa.text("DROP EXTENSION vector CASCADE"))
        kb.rt.close()  # a fresh process would mount again
        with pytest.raises(VectorStoreUnavailable) as err:
            PostgresIndexStore.open(catalog.engine, base_id=vec.id, dims=8)
        assert err.value.details["reason"] == "vector_extension_missing"
        component = check_index(kb, kb.get_base("vec"))
        assert component["status"] == "unavailable"
        assert "vector" in component["reason"]
        assert kb.get_base("vec").status == "completed"  # not failed: install it and go on
        item = kb.add_note("vec", "Beavers build dams.", wait=True)
        assert (kb.get_item(vec.id, item.id).status, kb.get_item(vec.id, item.id).error_code) == (
            "failed",
            "vector_store_unavailable",
        )
        ok = kb.add_note("bm", "Beavers build dams.", wait=True)
        assert kb.get_item(bm.id, ok.id).status == "completed"
        assert [r.item_id for r in kb.search("bm", "beavers").results] == [ok.id]
    finally:
        kb.close()


def test_concurrent_writers_keep_the_bm25_totals_exact(catalog: Catalog) -> None:
    """Writers of one base queue on its ``kb_index`` row; the totals BM25 reads stay exact."""
    import threading

    store = PostgresIndexStore.open(catalog.engine, base_id=_base(catalog), dims=None)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(8):
                text = " ".join(f"w{w} n{i} word{j}" for j in range(i + 1))
                chunks = [Chunk(text, 0, len(text), 0)]
                store.rebuild_material(
                    MaterialInput(f"m{w}-{i % 3}", f"{w}-{i % 3}.md", text, chunks), {}
                )
                if i % 4 == 3:
                    store.delete_materials([f"m{w}-{i % 3}"])
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    with catalog.read() as conn:
        kept = conn.execute(
            sa.text("SELECT unit_count, token_count FROM kb_index WHERE base_id = :b"),
            {"b": store.base_id},
        ).one()
        actual = conn.execute(
            sa.text(
                "SELECT count(*), coalesce(sum(keyword_len), 0) FROM kb_unit WHERE base_id = :b"
            ),
            {"b": store.base_id},
        ).one()
    assert tuple(kept) == tuple(actual)
