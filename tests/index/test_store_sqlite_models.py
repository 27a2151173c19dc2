"""The SQLite index's vector sets by model id: the in-place v1 upgrade and the set API."""

from __future__ import annotations

from pathlib import Path

import apsw
import numpy as np
import pytest

from knowbase.errors import EmbeddingMismatch, InvalidInput
from knowbase.index.base import SCHEMA_VERSION, MaterialInput
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.providers.hashing_provider import hash_vector
from knowbase.units.chunk import Chunk
from knowbase.units.hashing import text_hash

TEXT = "alpha beta gamma delta"


def material(mid: str = "m1", text: str = TEXT) -> MaterialInput:
    return MaterialInput(mid, f"{mid}.md", text, [Chunk(text, 0, len(text), 0)])


def vectors(m: MaterialInput, dims: int) -> dict[str, np.ndarray]:
    return {text_hash(c.text): hash_vector(c.text, dims) for c in m.chunks}


def make_v1_file(path: Path, dims: int) -> np.ndarray:
    """An index file as schema version 1 wrote it: ``embedding`` keyed by text hash alone."""
    m = material()
    with SqliteIndexStore.open(path, base_id="b1", dims=dims) as store:
        store.rebuild_material(m, vectors(m, dims))
    conn = apsw.Connection(str(path))
    conn.execute(
        "BEGIN; CREATE TABLE embedding_old (embedding_text_hash TEXT PRIMARY KEY,"
        " vector_blob BLOB NOT NULL, created_at TEXT NOT NULL);"
        " INSERT INTO embedding_old SELECT embedding_text_hash, vector_blob, created_at"
        " FROM embedding; DROP TABLE embedding; ALTER TABLE embedding_old RENAME TO embedding;"
        " UPDATE meta SET schema_version = 1; COMMIT;"
    )
    conn.close()
    return hash_vector(TEXT, dims)


def test_a_v1_index_is_upgraded_in_place_and_keeps_its_vectors(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    expected = make_v1_file(path, 16)
    with SqliteIndexStore.open(path, base_id="b1", dims=16, model_id="hash:d16") as store:
        assert not store.was_reset  # upgraded, never dropped
        got = store.models.vectors_for([text_hash(TEXT)], "hash:d16")
        assert np.array_equal(got[text_hash(TEXT)], expected)
        hits = store.vector_search(expected, 5)
        assert [h.material_id for h in hits] == ["m1"]
        assert store.keyword_search("gamma", 5)[0].material_id == "m1"
        assert store.integrity_check() == "ok"
    conn = apsw.Connection(str(path))
    assert conn.execute("SELECT schema_version FROM meta").fetchall() == [(SCHEMA_VERSION,)]
    assert conn.execute("SELECT DISTINCT model_id FROM embedding").fetchall() == [("hash:d16",)]
    conn.close()


def test_a_v1_upgrade_that_fails_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    make_v1_file(path, 8)
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE embedding_v1 (x)")  # in the upgrade's way: its rename fails
    conn.close()
    with pytest.raises(Exception, match="embedding_v1"):
        SqliteIndexStore.open(path, base_id="b1", dims=8, model_id="hash:d8")
    conn = apsw.Connection(str(path))
    assert conn.execute("SELECT schema_version FROM meta").fetchall() == [(1,)]
    assert conn.execute("SELECT COUNT(*) FROM embedding").fetchall() == [(1,)]
    conn.close()


def test_two_models_sets_live_side_by_side(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    m = material()
    h = text_hash(TEXT)
    with SqliteIndexStore.open(path, base_id="b1", dims=8, model_id="old") as store:
        store.rebuild_material(m, vectors(m, 8))
        assert store.models.bodies_without_vectors("new") == {h: TEXT}
        with pytest.raises(EmbeddingMismatch):
            store.models.put_vectors("new", 12, {h: np.ones(8, "<f4")})  # wrong width for the set
        store.models.put_vectors("new", 12, {h: hash_vector(TEXT, 12)})
        assert store.models.bodies_without_vectors("new") == {}
        assert store.models.model_ids() == {"old", "new"}
        # The serving lane is the store's model, whatever else the file holds.
        assert store.vector_matrix().dims == 8
        assert [x.material_id for x in store.vector_search(hash_vector(TEXT, 8), 3)] == ["m1"]
        with store.for_model("new", 12) as shadow:
            assert shadow.vector_search(hash_vector(TEXT, 12), 3)[0].material_id == "m1"
            assert shadow.vector_matrix().dims == 12
        # A rebuild's GC collects the serving model's orphans only; the shadow stays whole.
        other = material("m2", "other words")
        store.rebuild_material(other, vectors(other, 8))
        store.delete_materials(["m1"])
        assert store.models.vectors_for([h], "old") == {}
        assert set(store.models.vectors_for([h], "new")) == {h}
        with pytest.raises(InvalidInput):
            store.models.drop_vectors("old")  # the serving set
        assert store.models.drop_vectors("new") == 1
        assert store.models.model_ids() == {"old"}


def test_replace_units_needs_the_new_models_vectors(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    m = material()
    with SqliteIndexStore.open(path, base_id="b1", dims=8, model_id="old") as store:
        store.rebuild_material(m, vectors(m, 8))
        halves = [Chunk("alpha beta", 0, 10, 0), Chunk("gamma delta", 11, 22, 1)]
        split = MaterialInput("m1", "m1.md", TEXT, halves)
        with pytest.raises(EmbeddingMismatch):
            store.models.replace_units([split], "new")
        assert [u.text for u in store.list_units("m1")] == [TEXT]  # nothing changed
        store.models.put_vectors(
            "new", 4, {text_hash(c.text): hash_vector(c.text, 4) for c in halves}
        )
        store.models.replace_units([split], "new")
        assert [u.text for u in store.list_units("m1")] == ["alpha beta", "gamma delta"]
        assert store.models.stored_materials()[0].material_id == "m1"
