"""The retrievers as real LangChain and LlamaIndex code uses them (issue 43): the token kept
secret, base names that need encoding, one validation in both modes, the search filters, what
reaches a LlamaIndex prompt, and ``aretrieve`` that leaves the event loop free."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.load import dumpd
from llama_index.core.schema import MetadataMode

from knowbase import AddInput, InvalidInput, Knowledge, NoSearchableTokens, load_settings
from knowbase.integrations import langchain as kb_langchain
from knowbase.integrations import llama_index as kb_llama
from knowbase.interfaces.http import create_app

pytestmark = pytest.mark.timeout(120)
TOKEN = "SECRET-serve-token"
BASE = "q?x"  # POST /bases accepts it; a URL must carry it encoded


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("retrievers") / "home"
    with Knowledge(load_settings(home)) as kb:
        base = kb.create_base(BASE, file_processor_id=None)
        kb.add(
            base.id,
            [
                AddInput.note(
                    "Rotate the printer toner when the light blinks.", title="toner"
                ).with_labels(["office"], {"floor": 3}),
                AddInput.note("Printer paper lies in the cupboard.", title="paper").with_labels(
                    ["home"], {"floor": 1}
                ),
            ],
            wait=True,
        )
        # a model that takes a second per batch: a search over it takes that long
        slow = kb.create_base("slow", embedding_model_id="hash:d8?delay=1", file_processor_id=None)
        kb.add(slow.id, [AddInput.note("The printer drum is replaced yearly.")], wait=True)
    return home


@pytest.fixture(scope="module")
def url(home: Path) -> Iterator[str]:
    import uvicorn

    with Knowledge(load_settings(home)) as kb:
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(kb, token=TOKEN), host="127.0.0.1", port=0, log_level="warning"
            )
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        server.should_exit = True
        thread.join(10)


def both_langchain(home: Path, url: str, **kw: Any) -> list[kb_langchain.KnowbaseRetriever]:
    return [
        kb_langchain.KnowbaseRetriever(base=BASE, home=home, **kw),
        kb_langchain.KnowbaseRetriever(base=BASE, url=url, token=TOKEN, **kw),
    ]


# --- 7 -----------------------------------------------------------------------------------------
def test_the_token_never_shows(url: str) -> None:
    retriever = kb_langchain.KnowbaseRetriever(base=BASE, url=url, token=TOKEN)
    assert "SECRET" not in repr(retriever)
    assert "SECRET" not in str(retriever.model_dump())
    assert "SECRET" not in str(dumpd(retriever))
    assert retriever.invoke("printer toner")  # and it still authenticates


# --- 8 -----------------------------------------------------------------------------------------
def test_a_base_name_that_needs_encoding_works_over_http(url: str) -> None:
    docs = kb_langchain.KnowbaseRetriever(base=BASE, url=url, token=TOKEN).invoke("toner")
    assert docs and docs[0].metadata["title"] == "toner"
    nodes = kb_llama.KnowbaseRetriever(BASE, url=url, token=TOKEN).retrieve("toner")
    assert nodes and nodes[0].node.metadata["title"] == "toner"


# --- 9 -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("top_k", "query", "error"),
    [(0, "printer", InvalidInput), (5, "???", NoSearchableTokens)],
    ids=["top-k-zero", "no-tokens"],
)
def test_both_modes_raise_the_same_error(
    home: Path, url: str, top_k: int, query: str, error: type
) -> None:
    for retriever in both_langchain(home, url, top_k=top_k):
        try:
            with pytest.raises(error) as raised:
                retriever.invoke(query)
            assert type(raised.value) is error
        finally:
            retriever.close()


# --- 10 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "filters", [{"tags": ["office"]}, {"where": {"floor": {"gte": 2}}}], ids=["tags", "where"]
)
def test_tags_and_where_narrow_both_retrievers(home: Path, url: str, filters: dict) -> None:
    for retriever in both_langchain(home, url, **filters):
        try:
            assert [d.metadata["title"] for d in retriever.invoke("printer")] == ["toner"]
        finally:
            retriever.close()
    for remote in (False, True):
        where = {"url": url, "token": TOKEN} if remote else {"home": home}
        llama = kb_llama.KnowbaseRetriever(BASE, **where, **filters)  # type: ignore[arg-type]
        try:
            assert [n.node.metadata["title"] for n in llama.retrieve("printer")] == ["toner"]
        finally:
            llama.close()


def test_context_reaches_the_search(home: Path, url: str) -> None:
    for retriever in both_langchain(home, url, context=200):
        try:
            docs = retriever.invoke("toner")
        finally:
            retriever.close()
        assert docs[0].metadata["chunk_id"]


# --- 11 ----------------------------------------------------------------------------------------
def test_llama_index_prompts_see_the_passage_not_the_ids(home: Path) -> None:
    retriever = kb_llama.KnowbaseRetriever(BASE, home=home)
    try:
        node = retriever.retrieve("toner")[0].node
    finally:
        retriever.close()
    for_llm = node.get_content(metadata_mode=MetadataMode.LLM)
    assert "toner" in for_llm and "chunk_id" not in for_llm and "char_start" not in for_llm
    assert node.get_content(metadata_mode=MetadataMode.EMBED) == node.get_content()
    assert node.metadata["chunk_id"]  # still there for the program


def test_llama_index_aretrieve_leaves_the_event_loop_free(url: str) -> None:
    retriever = kb_llama.KnowbaseRetriever("slow", url=url, token=TOKEN)

    async def go() -> tuple[int, Any]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        nodes = await retriever.aretrieve("printer drum")
        ticker.cancel()
        return ticks, nodes

    ticks, nodes = asyncio.run(go())
    assert nodes
    assert ticks >= 20  # the search took ≥ 1 s and the loop kept running meanwhile
