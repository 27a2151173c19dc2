"""all-MiniLM-L6-v2 in int8: the same weights, quantized once per machine, ~2× faster on CPU.

``local:all-minilm-l6-v2-int8`` is its own model id (DESIGN.md, "A faster local model is a new
model id"): a base's query and document vectors come from this one graph, never mixed with the
fp32 model's, so switching a base to it re-embeds like any model switch.

**The graph** is ONNX Runtime's dynamic quantization of the fused fp32 export
(:mod:`knowbase.providers.minilm_onnx`): MatMul weights only, per output channel, constant
weights only (``MatMulConstBOnly``): activations are quantized at run time. Quantizing every
MatMul (the attention products too) drops the cosine to fp32 to ~0.90, so it is not done. The
result is checked against the fp32 graph on the export's check texts (padded, one past the
window): a cosine under :data:`MIN_COSINE` refuses it and nothing is cached.

Measured (docs/models.md): 2.0–2.2× the fp32 graph's encode rate on NFCorpus abstracts
(batches of 32, one thread), cosine to fp32 mean 0.995, min 0.991 over 256 abstracts.

The folder lives beside the fp32 export in the model cache, keyed by the fp32 folder (weights,
runtime version) and :data:`FORMAT`; it is published by one rename under a file lock, as the
fp32 export is. Needs ``onnx`` (the ``local`` extra) once, to quantize; a process that only
encodes opens the saved graph with ONNX Runtime alone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from knowbase.errors import EmbeddingMismatch, ProviderUnavailable
from knowbase.providers import minilm_onnx

FORMAT = 1  # bump when the quantization recipe changes: old folders are then ignored
MODEL_ID = "local:all-minilm-l6-v2-int8"
MIN_COSINE = (
    0.95  # int8 vs fp32, smallest over the check texts (0.97 measured: "hello"); all-MatMul 0.90
)

_lock = threading.Lock()


def quantized_dir(fp32_folder: Path) -> Path:
    """Where the int8 graph made from ``fp32_folder`` lives (or will)."""
    return fp32_folder.with_name(f"{fp32_folder.name}-int8-q{FORMAT}")


def ensure_quantized(model_dir: Path, threads: int | None = None) -> Path:
    """The folder of the int8 graph for ``model_dir``'s weights, quantizing it first if absent
    (and exporting the fp32 graph before that, if that is absent too)."""
    fp32 = minilm_onnx.ensure_exported(model_dir, threads)
    folder = quantized_dir(fp32)
    if (folder / minilm_onnx.INFO_FILE).is_file():
        return folder
    from filelock import FileLock

    try:
        with _lock, FileLock(str(folder) + ".lock"):
            if not (folder / minilm_onnx.INFO_FILE).is_file():
                quantize(model_dir, fp32, folder, threads=threads)
    except OSError as exc:
        raise ProviderUnavailable(
            f"{MODEL_ID}: cannot write its int8 graph under {folder.parent}: {exc}",
            hint="set KNOWBASE_MODEL_CACHE to a writable folder",
            model_id=MODEL_ID,
            path=str(folder.parent),
        ) from exc
    return folder


def quantize(
    model_dir: Path, fp32: Path, folder: Path, *, threads: int | None = None
) -> dict[str, Any]:
    """Quantize ``fp32``'s graph into ``folder`` (checked, then published by one rename)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:  # onnx is missing: the quantizer imports it
        raise minilm_onnx._missing("onnx") from exc
    work = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        final = work / "final"
        final.mkdir()
        with _without_advice():
            quantize_dynamic(
                str(fp32 / minilm_onnx.GRAPH_FILE),
                str(final / minilm_onnx.GRAPH_FILE),
                op_types_to_quantize=["MatMul"],
                per_channel=True,
                weight_type=QuantType.QInt8,
                # the fused graph's contrib ops defeat shape inference: their outputs are float
                extra_options={"MatMulConstBOnly": True, "DefaultTensorType": 1},
            )
        cosine = _check(model_dir, fp32, final, threads)
        info = {"format": FORMAT, "from": str(fp32), "min_cosine_vs_fp32": cosine}
        (final / minilm_onnx.INFO_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
        try:
            os.replace(final, folder)
        except OSError:  # published by another process meanwhile
            if not (folder / minilm_onnx.INFO_FILE).is_file():
                raise
        return info
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def _without_advice() -> Iterator[None]:
    """The quantizer logs a tutorial link on the root logger; a CLI's stderr stays clean."""

    def advice(record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()

    logging.getLogger().addFilter(advice)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(advice)


def open_session(folder: Path, threads: int | None = None) -> Any:
    """A session over the int8 graph (the runtime fuses what quantization left unfused)."""
    ort = minilm_onnx._runtime()
    return ort.InferenceSession(
        str(folder / minilm_onnx.GRAPH_FILE),
        minilm_onnx._session_options(ort, threads, optimize=True),
        providers=["CPUExecutionProvider"],
    )


def _check(model_dir: Path, fp32: Path, folder: Path, threads: int | None) -> float:
    """The smallest cosine between the int8 and fp32 graphs on the check texts; refuse < MIN."""
    tokenizer = minilm_onnx.load_tokenizer(model_dir, window=minilm_onnx.WINDOW)
    texts = minilm_onnx._CHECK_TEXTS
    want = minilm_onnx.encode(minilm_onnx.open_session(fp32, threads), tokenizer, texts)
    got = minilm_onnx.encode(open_session(folder, threads), tokenizer, texts)
    cosine = float(np.min(np.sum(got * want, axis=1)))
    if got.shape != want.shape or not cosine >= MIN_COSINE:
        raise EmbeddingMismatch(
            f"{MODEL_ID}: the int8 graph disagrees with fp32 (cosine {cosine:.4f} < "
            f"{MIN_COSINE}); nothing was cached",
            model_id=MODEL_ID,
            cosine=cosine,
        )
    return cosine
