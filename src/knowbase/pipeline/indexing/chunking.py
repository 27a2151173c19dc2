"""Documents → one ``content_text`` and its chunks (§4.4 "Concatenation", DESIGN 9).

Every chunk is a verbatim slice: ``content_text[c.char_start:c.char_end] == c.text``. Offsets
come from the splitter's spans shifted by each document's start, never from searching the text
(a repeated paragraph would resolve to its first occurrence).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from knowbase.pipeline.documents import ChunkSettings, Document
from knowbase.pipeline.indexing.splitter import js_round, split_text_with_offsets
from knowbase.pipeline.indexing.tables import TableMap
from knowbase.pipeline.indexing.token_cap import apply_token_cap
from knowbase.pipeline.indexing.tokens import estimate_tokens
from knowbase.units.chunk import Chunk

DOCUMENT_JOINER = "\n\n"

DEFAULT_CHUNK_SIZE = 1024
DEFAULT_CHUNK_OVERLAP = 200
SMALL_WINDOW_OVERLAP_RATIO = 8  # MiniLM: 256 / 8 = 32 tokens of overlap


def chunk_settings_for_window(window: int | None) -> tuple[int, int]:
    """Default ``(chunk_size, chunk_overlap)`` in tokens for a model with this input window.

    A model whose window is unknown or at least 1024 tokens (remote models, BM25-only bases)
    gets 1024/200; a smaller window sets the size, with an eighth of it as overlap.

        >>> chunk_settings_for_window(256), chunk_settings_for_window(None)
        ((256, 32), (1024, 200))
    """
    if window is None or window >= DEFAULT_CHUNK_SIZE:
        return DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP
    size = max(1, window)
    return size, size // SMALL_WINDOW_OVERLAP_RATIO


def chunk_documents(
    documents: Sequence[Document],
    settings: ChunkSettings,
    *,
    count_tokens: Callable[[str], int | None] | None = None,
) -> tuple[str, list[Chunk]]:
    """Join the documents' texts with ``"\\n\\n"`` and split each document on its own.

    Chunks never span documents, carry their document's locator and are numbered
    continuously from 0. With ``settings.token_cap`` set, spans are re-split to at most
    ``min(chunk_size, token_cap)`` tokens (overlap scaled in proportion) counted by
    ``count_tokens`` — the model's tokenizer — or by :func:`estimate_tokens` when the model
    has none (``count_tokens`` missing or answering ``None``). A chunk that starts inside a
    Markdown table's body gets that table's header row and separator in ``table_header``.

        >>> text, chunks = chunk_documents([Document("one"), Document("two", {"page": 2})],
        ...                                ChunkSettings())
        >>> text, [(c.text, c.char_start, c.unit_index, c.locator) for c in chunks]
        ('one\\n\\ntwo', [('one', 0, 0, {}), ('two', 5, 1, {'page': 2})])
    """
    content_text = DOCUMENT_JOINER.join(doc.text for doc in documents)
    cap = _cap(settings, count_tokens)
    chunks: list[Chunk] = []
    offset = 0
    for doc in documents:
        spans = split_text_with_offsets(
            doc.text,
            chunk_size=settings.chunk_size,
            chunk_overlap=settings.chunk_overlap,
            strategy=settings.strategy,
            separator=settings.separator,
        )
        if cap is not None and spans:
            spans = cap(doc.text, spans)
        tables = TableMap(doc.text) if "|" in doc.text else None
        for start, end in spans:
            chunks.append(
                Chunk(
                    text=doc.text[start:end],
                    char_start=offset + start,
                    char_end=offset + end,
                    unit_index=len(chunks),
                    locator=dict(doc.locator),
                    table_header=tables.header_for(start) if tables else "",
                )
            )
        offset += len(doc.text) + len(DOCUMENT_JOINER)
    return content_text, chunks


Spans = list[tuple[int, int]]


def _cap(
    settings: ChunkSettings, count_tokens: Callable[[str], int | None] | None
) -> Callable[[str, Spans], Spans] | None:
    """:func:`apply_token_cap` bound to the settings' limits, or ``None`` when no cap applies."""
    if settings.token_cap is None:
        return None
    size = max(1, settings.chunk_size)
    max_tokens = max(1, min(size, settings.token_cap))
    overlap = max(0, min(settings.chunk_overlap, size - 1))
    overlap_tokens = min(js_round(overlap * max_tokens / size), max_tokens - 1)

    def count(text: str) -> int:
        counted = count_tokens(text) if count_tokens is not None else None
        return estimate_tokens(text) if counted is None else counted

    return partial(
        apply_token_cap, max_tokens=max_tokens, overlap_tokens=overlap_tokens, count_tokens=count
    )
