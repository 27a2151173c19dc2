"""The LangChain and LlamaIndex retrievers, with the real libraries, over an embedded home and
over a ``kb serve`` on loopback (the same base, the same hits)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever as LangChainRetriever
from llama_index.core.retrievers import BaseRetriever as LlamaRetriever
from llama_index.core.schema import NodeWithScore

from knowbase import AddInput, Knowledge, NotFound, load_settings
from knowbase.integrations import langchain as kb_langchain
from knowbase.integrations import llama_index as kb_llama
from knowbase.interfaces.http import create_app

pytestmark = pytest.mark.timeout(120)
TOKEN = "serve-token"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    with Knowledge(load_settings(home)) as kb:
        base = kb.create_base("docs", file_processor_id=None)
        (tmp_path / "src" / "it").mkdir(parents=True)
        (tmp_path / "src" / "it" / "vpn.md").write_text(
            "# VPN\n\nThe VPN key rotates every Monday at nine.\n"
        )
        (tmp_path / "src" / "bread.md").write_text("# Bread\n\nSourdough needs wild yeast.\n")
        kb.add(base.id, [AddInput.directory(tmp_path / "src")], wait=True)
    yield home


@pytest.fixture
def serve_url(home: Path, live_server: Callable[[Any], str]) -> Iterator[str]:
    with Knowledge(load_settings(home)) as kb:
        yield live_server(create_app(kb, token=TOKEN))


def test_langchain_retriever_over_an_embedded_home(home: Path) -> None:
    retriever = kb_langchain.KnowbaseRetriever(base="docs", home=home, top_k=3)
    assert isinstance(retriever, LangChainRetriever)
    try:
        docs = retriever.invoke("when does the vpn key rotate")
    finally:
        retriever.close()
    assert docs and all(isinstance(d, Document) for d in docs)
    top = docs[0]
    assert "VPN key rotates" in top.page_content
    assert top.metadata["concept_id"] == "src/it/vpn.md"
    assert top.metadata["base_name"] == "docs" and top.metadata["score"] > 0
    assert top.id == top.metadata["chunk_id"]


def test_langchain_retriever_over_kb_serve_matches_the_embedded_one(
    home: Path, serve_url: str
) -> None:
    remote = kb_langchain.KnowbaseRetriever(base="docs", url=serve_url, token=TOKEN, top_k=3)
    docs = remote.invoke("when does the vpn key rotate")
    with Knowledge(load_settings(home)) as kb:
        local = kb_langchain.KnowbaseRetriever(base="docs", knowledge=kb, top_k=3)
        expected = local.invoke("when does the vpn key rotate")
    assert [(d.page_content, d.metadata["concept_id"]) for d in docs] == [
        (d.page_content, d.metadata["concept_id"]) for d in expected
    ]


def test_langchain_filters_narrow_the_search(home: Path) -> None:
    retriever = kb_langchain.KnowbaseRetriever(base="docs", home=home, under="src/it")
    try:
        docs = retriever.invoke("sourdough wild yeast vpn")
    finally:
        retriever.close()
    assert docs and {d.metadata["concept_id"] for d in docs} == {"src/it/vpn.md"}


def test_llama_index_retriever_over_an_embedded_home(home: Path) -> None:
    retriever = kb_llama.KnowbaseRetriever("docs", home=home, top_k=3)
    assert isinstance(retriever, LlamaRetriever)
    try:
        nodes = retriever.retrieve("sourdough yeast")
    finally:
        retriever.close()
    assert nodes and all(isinstance(n, NodeWithScore) for n in nodes)
    top = nodes[0]
    assert "wild yeast" in top.node.get_content()
    assert top.node.metadata["concept_id"] == "src/bread.md"
    assert (
        top.score == top.node.metadata["score"]
        and top.node.node_id == top.node.metadata["chunk_id"]
    )


def test_llama_index_retriever_over_kb_serve(serve_url: str) -> None:
    retriever = kb_llama.KnowbaseRetriever("docs", url=serve_url, token=TOKEN)
    nodes = retriever.retrieve("sourdough yeast")
    assert nodes[0].node.metadata["concept_id"] == "src/bread.md"


def test_an_unknown_base_raises_not_found_on_both_paths(home: Path, serve_url: str) -> None:
    with pytest.raises(NotFound):
        kb_langchain.KnowbaseRetriever(base="nope", url=serve_url, token=TOKEN).invoke("x")
    retriever = kb_llama.KnowbaseRetriever("nope", home=home)
    try:
        with pytest.raises(NotFound):
            retriever.retrieve("x")
    finally:
        retriever.close()
