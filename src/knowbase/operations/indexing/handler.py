"""What an index job needs of one document: its chunk settings and its text (§5).

The jobs themselves run in batches (:mod:`.index_batch`, the kind's only handler): reading goes
through :func:`read_item` under :data:`READ_SEATS`, chunking through :func:`chunk_settings`.
"""

from __future__ import annotations

import logging
import threading

from knowbase.catalog.models import Base, Item
from knowbase.errors import InvalidInput
from knowbase.pipeline.documents import ChunkSettings, Document
from knowbase.providers.base import EmbeddingProvider
from knowbase.runtime import Runtime

log = logging.getLogger(__name__)

# Reads through the reader pool at once. The pool keeps 2 warm children and starts a fresh
# interpreter for every read beyond them: with dozens of index jobs running (so the embedding
# batcher has texts to batch) that meant a child start per document. Waiting for a warm child
# costs a few milliseconds; a fresh one costs hundreds.
READ_SEATS = threading.BoundedSemaphore(2)


def chunk_settings(base: Base, embedder: EmbeddingProvider | None) -> ChunkSettings:
    """The base's chunking, with the model's window as the token cap where it is known."""
    cap = None
    if embedder is not None and embedder.window:
        cap = min(base.chunk_size, embedder.window - 2)
    return ChunkSettings(
        chunk_size=base.chunk_size,
        chunk_overlap=base.chunk_overlap,
        strategy=base.chunk_strategy,
        separator=base.chunk_separator,
        token_cap=cap,
    )


def read_item(rt: Runtime, base: Base, item: Item) -> list[Document]:
    """The item's documents: files via their reader (child process), snapshots as Markdown."""
    from knowbase.pipeline.readers import read_file_isolated, read_markdown_text
    from knowbase.pipeline.sources.okf import strip_okf_frontmatter

    rel = item.concept_id
    if not rel:
        raise InvalidInput(f"item {item.id} has no material yet", item_id=item.id)
    path = rt.storage(base.id).path_of(rel)
    if item.type == "file" and item.data.get("indexed_relative_path"):
        from knowbase.pipeline.processing import read_processed_markdown

        return read_processed_markdown(path.read_text(encoding="utf-8"))
    if item.type == "file":
        with READ_SEATS:
            return read_file_isolated(
                path,
                max_bytes=rt.settings.max_file_bytes,
                memory_mb=rt.settings.reader_memory_mb,
                as_text=bool(item.data.get("as_text")),
            )
    return read_markdown_text(strip_okf_frontmatter(path.read_text(encoding="utf-8")))
