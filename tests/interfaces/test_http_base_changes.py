"""Changes that start no job record who asked (issue 44 item 3): a base created, its settings
changed, deleted; read back over loopback HTTP with scoped keys, on every catalog backend the
suite runs (``kb`` follows ``KB_TEST_BACKENDS``)."""

from __future__ import annotations

import httpx
import sqlalchemy as sa

from knowbase.catalog import base_changes
from knowbase.catalog.schema import base_change
from knowbase.interfaces.http import create_app
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

ADMIN = "admin-token-for-changes"


def test_base_changes_name_the_key_and_the_surface(kb: Knowledge, live_server) -> None:  # type: ignore[no-untyped-def]
    url = live_server(create_app(kb, token=ADMIN))
    admin = {"Authorization": f"Bearer {ADMIN}"}
    httpx.post(url + "/bases", json={"name": "a"}, headers=admin).raise_for_status()
    httpx.post(url + "/bases", json={"name": "b"}, headers=admin).raise_for_status()
    _, writer = kb.create_key("writer-a", write=True, bases=["a"])
    _, reader = kb.create_key("reader-b", write=False, bases=["b"])
    as_writer = {"Authorization": f"Bearer {writer}"}
    patched = httpx.patch(url + "/bases/a", json={"document_count": 7}, headers=as_writer)
    assert patched.status_code == 200, patched.text

    changes = httpx.get(url + "/bases/a/changes", headers=as_writer).json()
    assert [(c["action"], c["by_key"], c["by_surface"]) for c in changes] == [
        ("settings", "writer-a", "http"),
        ("create", "admin", "http"),
    ]
    assert changes[0]["details"] == {"document_count": 7} and changes[0]["base_name"] == "a"
    # another key's base is not named, as for a base that does not exist
    hidden = httpx.get(url + "/bases/a/changes", headers={"Authorization": f"Bearer {reader}"})
    assert hidden.status_code == 404

    # the CLI's and the facade's changes: no key, the surface the caller said
    with kb.acting_as(None, "cli"):
        kb.update_base("b", document_count=3)
        kb.add("b", [AddInput.note("Pangolins are scaly.", title="pangolins")], wait=True)
        note = kb.list_items("b")[0]
        kb.set_labels("b", note.id, tags=["mammals"])
        kb.delete_base("b")
    with kb.rt.catalog.read() as conn:  # b is gone; its record stays
        rows = base_changes.recent(conn, next(iter(_ids_of(conn, "b"))))
    assert rows[1]["details"]["tags"] == ["mammals"]
    assert [(r["action"], r["by_key"], r["by_surface"]) for r in rows] == [
        ("delete", None, "cli"),
        ("labels", None, "cli"),
        ("settings", None, "cli"),
        ("create", "admin", "http"),
    ]


def _ids_of(conn, name: str) -> set[str]:  # type: ignore[no-untyped-def]
    rows = conn.execute(sa.select(base_change.c.base_id).where(base_change.c.base_name == name))
    return {r[0] for r in rows}
