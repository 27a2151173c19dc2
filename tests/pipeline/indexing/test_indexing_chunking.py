"""chunk_documents: verbatim slices, continuous indexes, no chunk across documents, the cap."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.pipeline.documents import ChunkSettings, Document
from knowbase.pipeline.indexing.chunking import chunk_documents, chunk_settings_for_window
from knowbase.pipeline.indexing.tokens import estimate_tokens

TEXT = st.lists(
    st.sampled_from(
        ["# Head", "para text here", "```", "知识库。", "  ", "\n", "\n\n", "- li", "word " * 9]
    ),
    max_size=30,
).map(lambda parts: "".join(parts))
LOCATORS = st.one_of(
    st.just({}),
    st.integers(1, 9).map(lambda p: {"page": p}),
    st.just({"sheet": "Q1"}),
)


def words(text: str) -> int:
    return len(text.split())


@settings(max_examples=120, deadline=None)
@given(
    docs=st.lists(st.builds(Document, TEXT, LOCATORS), max_size=6),
    size=st.integers(1, 60),
    overlap=st.integers(0, 30),
    strategy=st.sampled_from(["structured", "delimiter"]),
    cap=st.one_of(st.none(), st.integers(1, 30)),
)
def test_slices_indexes_and_document_bounds(docs, size, overlap, strategy, cap):
    config = ChunkSettings(chunk_size=size, chunk_overlap=overlap, strategy=strategy, token_cap=cap)
    content, chunks = chunk_documents(docs, config, count_tokens=words)
    assert content == "\n\n".join(d.text for d in docs)
    assert [c.unit_index for c in chunks] == list(range(len(chunks)))
    bounds, offset = [], 0
    for doc in docs:
        bounds.append((offset, offset + len(doc.text), doc.locator))
        offset += len(doc.text) + 2
    for chunk in chunks:
        assert content[chunk.char_start : chunk.char_end] == chunk.text
        owners = [b for b in bounds if b[0] <= chunk.char_start and chunk.char_end <= b[1]]
        assert owners, "a chunk spans documents"
        assert chunk.locator == owners[0][2]
        if cap is not None:
            assert words(chunk.text) <= min(size, cap)
    covered = set()
    for c in chunks:
        covered.update(range(c.char_start, c.char_end))
    assert all(i in covered for i, ch in enumerate(content) if not ch.isspace())


def test_repeated_text_gets_its_own_offsets():
    docs = [Document("same paragraph"), Document("same paragraph", {"page": 2})]
    content, chunks = chunk_documents(docs, ChunkSettings())
    assert [(c.char_start, c.char_end, c.locator) for c in chunks] == [
        (0, 14, {}),
        (16, 30, {"page": 2}),
    ]


def test_empty_and_whitespace_documents_still_shift_offsets():
    docs = [Document(""), Document("  \n"), Document("tail")]
    content, chunks = chunk_documents(docs, ChunkSettings())
    assert content == "\n\n  \n\n\ntail"
    assert [(c.text, c.char_start, c.unit_index) for c in chunks] == [("tail", 7, 0)]


def test_no_documents():
    assert chunk_documents([], ChunkSettings()) == ("", [])


def test_locator_is_copied_not_shared():
    doc = Document("alpha", {"heading": ["A"]})
    _, chunks = chunk_documents([doc], ChunkSettings())
    chunks[0].locator["heading"] = ["changed"]
    assert doc.locator == {"heading": ["A"]}


def test_cap_uses_the_model_counter_and_scales_the_overlap():
    text = " ".join(f"w{i}" for i in range(300))
    config = ChunkSettings(chunk_size=1000, chunk_overlap=200, token_cap=50)
    _, chunks = chunk_documents([Document(text)], config, count_tokens=words)
    assert all(words(c.text) <= 50 for c in chunks)
    first, second = chunks[0].text.split(), chunks[1].text.split()
    assert len(first) == 50
    assert first[-10:] == second[:10]  # overlap 200 * 50 / 1000 = 10 tokens
    assert first[-11] != second[0]


def test_cap_falls_back_to_the_estimate_without_a_tokenizer():
    text = "abcd " * 400
    config = ChunkSettings(chunk_size=1024, chunk_overlap=0, token_cap=30)
    for counter in (None, lambda s: None):
        _, chunks = chunk_documents([Document(text)], config, count_tokens=counter)
        assert len(chunks) > 1
        assert all(estimate_tokens(c.text) <= 30 for c in chunks)


def test_without_a_cap_the_counter_is_not_called():
    def boom(_text):
        raise AssertionError("counted without a cap")

    _, chunks = chunk_documents([Document("x " * 500)], ChunkSettings(), count_tokens=boom)
    assert chunks


def test_settings_for_window():
    assert chunk_settings_for_window(256) == (256, 32)
    assert chunk_settings_for_window(None) == (1024, 200)
    assert chunk_settings_for_window(8192) == (1024, 200)
    assert chunk_settings_for_window(1024) == (1024, 200)
    assert chunk_settings_for_window(512) == (512, 64)


@pytest.mark.model
def test_minilm_tokenizer_cap_keeps_every_chunk_inside_the_window():
    from knowbase.providers.local import LocalMiniLM

    provider = LocalMiniLM()
    size, overlap = chunk_settings_for_window(provider.window)
    # Long rare words and URLs make many word pieces: the 4-chars estimate undercounts them.
    text = "\n\n".join(
        " ".join(["antidisestablishmentarianism", "2024-01-05", "http://example.com/x?y=z"] * 9)
        + "."
        for _ in range(12)
    )
    plain = ChunkSettings(chunk_size=size, chunk_overlap=overlap)
    _, uncapped = chunk_documents([Document(text)], plain)
    assert any(provider.count_tokens(c.text) > provider.window for c in uncapped)
    capped = ChunkSettings(chunk_size=size, chunk_overlap=overlap, token_cap=provider.window - 2)
    content, chunks = chunk_documents([Document(text)], capped, count_tokens=provider.count_tokens)
    assert all(provider.count_tokens(c.text) <= provider.window - 2 for c in chunks)
    assert all(content[c.char_start : c.char_end] == c.text for c in chunks)
