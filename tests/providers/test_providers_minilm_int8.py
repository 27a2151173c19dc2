"""MiniLM in int8: its own model id, made once from the fp32 graph, close to it (slow).

The first run on a machine exports the fp32 graph (~20 s) and quantizes it (~5 s) into the
model cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from knowbase.errors import InvalidInput
from knowbase.operations.add.inputs import AddInput
from knowbase.providers import minilm_int8, minilm_onnx
from knowbase.providers.local import LocalMiniLM, LocalMiniLMInt8
from knowbase.providers.registry import check_model_id, get_embedding_provider
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.model

INT8 = "local:all-minilm-l6-v2-int8"
TEXTS = [
    "How do I reset my password?",
    "Steps to recover access to your account when you forgot your login credentials.",
    "The recipe needs two cups of flour and a pinch of salt.",
    "Dietary fibre intake and the risk of colorectal cancer in a cohort of 40,000 adults.",
    "tokenization of unbelievably long paragraphs " * 80,  # past the 256-piece window
]


@pytest.fixture(scope="module")
def pair() -> tuple[LocalMiniLM, LocalMiniLMInt8]:
    fp32, int8 = LocalMiniLM(), LocalMiniLMInt8()
    int8.load()  # quantizes (and exports the fp32 graph) on a machine that has neither
    return fp32, int8


def test_the_int8_model_is_its_own_id_beside_fp32(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    provider = get_embedding_provider(INT8, settings)
    assert isinstance(provider, LocalMiniLMInt8) and provider.model_id == INT8
    assert get_embedding_provider("local:all-minilm-l6-v2", settings) is not provider
    assert provider.dims == 384 and provider.window == 256
    with pytest.raises(InvalidInput, match="all-minilm-l6-v2-int8"):
        check_model_id("local:all-minilm-l6-v2-int4", settings)


def test_int8_vectors_stay_close_to_fp32_and_keep_the_order(pair) -> None:  # type: ignore[no-untyped-def]
    fp32, int8 = pair
    a, b = fp32.embed(TEXTS), int8.embed(TEXTS)
    cosines = np.sum(a * b, axis=1)
    assert cosines.min() >= 0.97, cosines
    assert not np.allclose(a, b, atol=1e-4)  # a different graph, not the fp32 one again
    query = int8.embed_queries(["I forgot my login"])[0]
    ranked = np.argsort(-(b @ query))
    assert set(ranked[:2].tolist()) == {0, 1}, ranked  # the two account texts first


def test_the_int8_graph_is_cached_beside_the_fp32_export(pair) -> None:  # type: ignore[no-untyped-def]
    fp32, int8 = pair
    folder = int8.exported
    assert folder is not None and folder == minilm_int8.quantized_dir(fp32.exported)
    info = json.loads((folder / minilm_onnx.INFO_FILE).read_text())
    assert info["format"] == minilm_int8.FORMAT
    assert info["min_cosine_vs_fp32"] >= minilm_int8.MIN_COSINE
    # int8 MatMul weights (the 47 MB word-embedding table stays fp32): ~58 MB of the fp32 ~90 MB
    fp32_size = sum(f.stat().st_size for f in fp32.exported.iterdir())
    assert (folder / minilm_onnx.GRAPH_FILE).stat().st_size < 0.75 * fp32_size


def test_a_base_on_the_int8_model_searches_hybrid_without_torch(pair, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    with Knowledge(Settings(home=home)) as kb:
        base = kb.create_base("docs", embedding_model_id=INT8, file_processor_id=None)
        notes = [AddInput.note(t) for t in TEXTS[:3]]
        kb.add(base.id, notes, wait=True, timeout_s=600)
    script = (
        "import json, sys\n"
        "from knowbase.interfaces.cli import main\n"
        "sys.argv = ['kb', 'search', '--home', sys.argv[1], 'docs', 'forgot my login', '--json']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print(json.dumps(sorted({'torch', 'transformers'} & set(sys.modules))), file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(home)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["mode"] == "hybrid", answer
    assert "password" in answer["results"][0]["text"] or "login" in answer["results"][0]["text"]
    assert json.loads(out.stderr.strip().splitlines()[-1]) == []
