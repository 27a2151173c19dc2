"""What an import will cost before it starts (issue 42): chunks to embed and minutes.

A newcomer adding a folder to a base with a local model waited minutes with no idea how many;
a BM25-only base would have been ready in seconds. :func:`import_cost` estimates the chunks
from the files' sizes and the base's chunk settings, and the time from this machine's rate,
measured by embedding one batch of chunk-sized texts with the base's own model (the model is
loaded for the import anyway, in this process: nothing is wasted but one batch).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from knowbase.catalog.models import Base
from knowbase.errors import KnowbaseError
from knowbase.runtime import Runtime

CHARS_PER_TOKEN = 4  # the estimate's own (DESIGN: estimate_tokens), for plain text
# Packed formats hold less text than their size: a PDF or an office file's text is a fraction
# of its bytes (fonts, images, zip). A rough share; the line says "≈".
PACKED_SHARE = {".pdf": 0.1, ".docx": 0.5, ".xlsx": 0.5, ".pptx": 0.2, ".epub": 0.5}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".tif", ".tiff", ".bmp", ".webp"}
MIN_CHUNKS_TO_MEASURE = 200  # below this an import is short anyway: no probe, no line
MAX_FILES_WALKED = 200_000


@dataclass(frozen=True)
class ImportCost:
    """An estimate: ``chunks`` to embed, at ``rate`` chunks/s (measured), ``seconds`` in all."""

    files: int
    chunks: int
    rate: float
    seconds: float
    model_id: str

    def to_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "chunks": self.chunks,
            "chunks_per_s": round(self.rate, 2),
            "seconds": round(self.seconds),
            "model": self.model_id,
        }


def _files(paths: Iterable[str]) -> Iterable[Path]:
    seen = 0
    for raw in paths:
        root = Path(raw)
        if root.is_file():
            yield root
            continue
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in names:
                if name.startswith("."):
                    continue
                seen += 1
                if seen > MAX_FILES_WALKED:
                    return
                yield Path(folder) / name


def estimate_chunks(paths: Iterable[str], chunk_size: int, chunk_overlap: int) -> tuple[int, int]:
    """``(files, chunks)`` for the files at ``paths`` (folders walked, hidden entries left
    out), with ``chunk_size``/``chunk_overlap`` in tokens.

    >>> estimate_chunks([], 256, 32)
    (0, 0)
    """
    step = max(chunk_size - chunk_overlap, 1) * CHARS_PER_TOKEN
    files = chunks = 0
    for path in _files(paths):
        suffix = path.suffix.lower()
        if suffix in IMAGE_SUFFIXES:
            continue
        try:
            size = path.stat().st_size
        except OSError:
            continue
        files += 1
        chars = size * PACKED_SHARE.get(suffix, 1.0)
        chunks += max(1, -(-int(chars) // step))
    return files, chunks


def measure_rate(rt: Runtime, base: Base, *, chunk_chars: int) -> float | None:
    """Chunks per second of the base's model on this machine: one batch of chunk-sized texts,
    timed after a one-text warm-up (the model's load is not the rate). None: no model, or it
    cannot run (the import reports that itself)."""
    try:
        embedder = rt.embedder(base)
    except KnowbaseError:
        return None
    if embedder is None:
        return None
    n = max(int(getattr(embedder, "batch_size", 0) or 0), 8)
    words = ("the quick brown fox jumps over a lazy dog near the river bank " * 200)[:chunk_chars]
    try:
        embedder.embed(["warm up"])
        started = time.perf_counter()
        embedder.embed([f"{i} {words}" for i in range(n)])
        elapsed = time.perf_counter() - started
    except Exception:  # noqa: BLE001 - an estimate never fails an add
        return None
    return n / elapsed if elapsed > 0 else None


def import_cost(rt: Runtime, base: Base, paths: list[str]) -> ImportCost | None:
    """The cost of embedding the files at ``paths`` into ``base``; None for a BM25-only base,
    for a small import (under :data:`MIN_CHUNKS_TO_MEASURE` chunks) or when the model cannot
    be timed."""
    if not base.embedding_model_id or not paths:
        return None
    files, chunks = estimate_chunks(paths, base.chunk_size, base.chunk_overlap)
    if chunks < MIN_CHUNKS_TO_MEASURE:
        return None
    rate = measure_rate(rt, base, chunk_chars=base.chunk_size * CHARS_PER_TOKEN)
    if not rate:
        return None
    return ImportCost(files, chunks, rate, chunks / rate, base.embedding_model_id)


__all__ = ["ImportCost", "estimate_chunks", "import_cost", "measure_rate"]
