"""MiniLM on ONNX Runtime: one computation for queries and documents, no torch to search (slow).

The graph is exported once per machine into the model cache (``KNOWBASE_MODEL_CACHE`` or the
user cache): the first run of this module may spend ~20 s on it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from knowbase.operations.add.inputs import AddInput
from knowbase.pipeline.indexing.batcher import batcher_for
from knowbase.pipeline.indexing.embed import embed_missing, embed_query
from knowbase.providers import minilm_onnx
from knowbase.providers.local import LocalMiniLM
from knowbase.service import Knowledge
from knowbase.settings import Settings
from knowbase.units.hashing import text_hash

pytestmark = pytest.mark.model

MODEL = "local:all-minilm-l6-v2"
TEXTS = [
    "How do I reset my password?",
    "x",
    "Steps to recover access to your account when you forgot your login credentials.",
    "Ünïcödé, punctuation… and numbers: 3.14159 — “quoted”",
    "tokenization of unbelievably long paragraphs " * 80,  # past the 256-piece window
]


@pytest.fixture(scope="module")
def minilm() -> Iterator[LocalMiniLM]:
    provider = LocalMiniLM()
    provider.load()  # exports the graph on a machine that has none yet
    yield provider


def test_query_path_and_ingest_path_give_the_same_vectors(minilm: LocalMiniLM) -> None:
    # The ingest path: what an index job calls (embed_missing through the shared batcher,
    # batched and length-sorted with other texts). The query path: embed_query through the
    # query batcher, one text at a time.
    noise = [f"another chunk of the same batch, number {i}" for i in range(40)]
    ingested = embed_missing(
        [*noise, *TEXTS],
        existing=lambda hashes: set(),
        provider=minilm,
        dims=384,
        batcher=batcher_for(minilm),
    )
    for text in TEXTS:
        query = embed_query(text, minilm, 384)
        document = ingested[text_hash(text)]
        assert float(query @ document) >= 0.9999, text[:40]


def test_vectors_match_sentence_transformers(minilm: LocalMiniLM) -> None:
    # Bases indexed with torch before the ONNX runtime stay searchable: same vectors.
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(minilm._path), device="cpu")
    reference.max_seq_length = 256
    want = reference.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    got = minilm.embed(TEXTS)
    cosines = np.sum(got * want, axis=1)
    assert cosines.min() >= 0.9999, cosines


def test_the_export_is_cached_per_weights_and_runtime(minilm: LocalMiniLM) -> None:
    folder = minilm.exported
    assert folder is not None
    info = json.loads((folder / minilm_onnx.INFO_FILE).read_text())
    assert info["min_cosine_vs_torch"] >= minilm_onnx.MIN_COSINE
    assert (folder / minilm_onnx.WEIGHTS_FILE).stat().st_size > 80_000_000  # mapped, not inline
    other_runtime = minilm_onnx.export_dir(minilm._path, "0.0.0-other")
    assert other_runtime != folder and other_runtime.parent == folder.parent


# The last line a script prints on stderr: which heavy modules the process imported.
REPORT = """
print(json.dumps(sorted({"torch", "transformers", "sentence_transformers"} & set(sys.modules))),
      file=sys.stderr)
"""
COLD_SEARCH = (
    """
import json, sys
from knowbase.interfaces.cli import main
sys.argv = ["kb", "search", "--home", sys.argv[1], "docs", "forgot my password", "--json"]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
"""
    + REPORT
)
MCP_FIRST_QUERY = (
    """
import json, sys
from knowbase.interfaces.mcp import tools as mcp_tools
from knowbase.interfaces.mcp import Scope, build_server
from knowbase.service import Knowledge
from knowbase.settings import load_settings
with Knowledge(load_settings(sys.argv[1])) as kb:
    build_server(kb, base_ids=None, allow_writes=False)  # what kb mcp does at start-up
    found = mcp_tools.kb_search(
        Scope(kb), mcp_tools._Cites(), query="forgot my password", base_ids=["docs"]
    )
print(json.dumps(found.structured_content))
assert "onnxruntime" in sys.modules  # the dense lane ran: the query was encoded
"""
    + REPORT
)


@pytest.fixture(scope="module")
def minilm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("minilm") / "home"
    with Knowledge(Settings(home=home, test_providers=True)) as kb:
        base = kb.create_base("docs", embedding_model_id=MODEL, file_processor_id=None)
        notes = [
            AddInput.note("To reset your password, open Settings and choose Account recovery."),
            AddInput.note("The recipe needs two cups of flour and a pinch of salt."),
        ]
        kb.add(base.id, notes, wait=True, timeout_s=600)
    return home


def _run(script: str, home: Path) -> tuple[dict, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", script, str(home)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    heavy = json.loads(result.stderr.strip().splitlines()[-1])
    return json.loads(result.stdout), heavy


def test_a_cold_kb_search_on_a_minilm_base_imports_no_torch(minilm_home: Path) -> None:
    answer, heavy = _run(COLD_SEARCH, minilm_home)
    assert answer["mode"] == "hybrid", answer
    assert "password" in answer["results"][0]["text"]
    assert heavy == []


def test_kb_mcp_start_up_and_first_query_import_no_torch(minilm_home: Path) -> None:
    answer, heavy = _run(MCP_FIRST_QUERY, minilm_home)
    assert "password" in answer["items"][0]["content"], answer
    assert heavy == []
