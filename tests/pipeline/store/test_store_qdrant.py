"""The qdrant backend's own cases. No Qdrant server can run here: the conformance suite uses
qdrant-client's local mode; these check the registry wiring and an unreachable server."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import pytest

from knowbase.errors import VectorStoreUnavailable
from knowbase.pipeline.documents import Chunk
from knowbase.pipeline.store import backends
from knowbase.pipeline.store.base import MaterialInput
from knowbase.pipeline.store.hashing import text_hash

pytest.importorskip("qdrant_client")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once we return: nothing listens there


def test_an_unreachable_qdrant_is_unavailable_not_a_hang(tmp_path: Path) -> None:
    target = backends.StoreTarget(
        "b1", 4, tmp_path / "index.sqlite", None, f"http://127.0.0.1:{_closed_port()}"
    )
    started = time.monotonic()
    with pytest.raises(VectorStoreUnavailable) as err:
        backends.get("qdrant").open(target, True)
    assert time.monotonic() - started < 15
    assert err.value.code == "vector_store_unavailable"


def test_local_mode_next_to_the_index_file_survives_a_reopen(tmp_path: Path) -> None:
    target = backends.StoreTarget("b2", 4, tmp_path / ".kb" / "index.sqlite")
    store = backends.get("qdrant").open(target, True)
    text = "otters hold hands"
    store.rebuild_material(
        MaterialInput("m", "m.md", text, [Chunk(text, 0, len(text), 0)]),
        {text_hash(text): np.array([1, 2, 3, 4], dtype=np.float32)},
    )
    store.close()
    again = backends.get("qdrant").open(target, False)
    assert [h.material_id for h in again.vector_search(np.array([1, 2, 3, 4.0]), 3)] == ["m"]
    assert [h.material_id for h in again.keyword_search("otters", 3)] == ["m"]
    assert (tmp_path / ".kb" / "qdrant").is_dir()
    again.close()
    backends.close_qdrant_clients()
