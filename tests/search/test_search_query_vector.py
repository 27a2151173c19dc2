"""The query vector is checked like an indexing batch (``pipeline.indexing.embed.embed_query``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from knowbase.errors import EmbeddingMismatch
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.search.search import SearchConfig, VisibleItem, search


class BrokenEmbedder:
    """Returns ``rows`` as the answer for any query."""

    model_id = "test:broken"
    window = None
    scripts = None
    batch_size = 8

    def __init__(self, rows: object) -> None:
        self.rows = rows

    def embed(self, texts: Sequence[str]) -> object:
        return self.rows

    def count_tokens(self, text: str) -> int | None:
        return None


def everything(ids: set[str]) -> dict[str, VisibleItem]:
    return {i: VisibleItem(i, "file", None, None) for i in ids}


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        (np.array([[1.0, np.nan, 0.0, 0.0]], dtype=np.float32), "finite"),
        (np.zeros((2, 4), dtype=np.float32), "asked for 1"),
        (np.zeros((1, 3), dtype=np.float32), "width 3"),
        ([[]], "empty"),
    ],
)
def test_a_bad_query_vector_is_refused(tmp_path: Path, rows: object, says: str) -> None:
    store = SqliteIndexStore.open(tmp_path / "i.sqlite", base_id="b", dims=4)
    try:
        with pytest.raises(EmbeddingMismatch, match=says):
            search(store, "cat", config=SearchConfig(dims=4), embedder=BrokenEmbedder(rows),  # type: ignore[arg-type]
                   reranker=None, visible=everything)  # fmt: skip
    finally:
        store.close()
