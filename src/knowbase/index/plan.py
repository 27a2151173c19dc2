"""What every backend checks and derives before a rebuild writes anything (pure functions).

``plan_units`` validates the chunks against the material text, names each unit by content
(:mod:`knowbase.units.hashing`) and gives it the contextual text the keyword lane indexes, by
the rule the embedder uses too (:mod:`knowbase.units.context`); ``check_vectors`` validates
the supplied embeddings. Both raise before any transaction starts, so a bad input never leaves
a half-written material on any backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from knowbase.errors import EmbeddingMismatch, InvalidInput
from knowbase.index.base import MaterialInput
from knowbase.units import hashing
from knowbase.units.chunk import Chunk
from knowbase.units.context import chunk_locator, unit_text

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class PlannedUnit:
    unit_id: str
    chunk: Chunk  # its locator holds the table header, if any (stored with the unit)
    body: str
    body_hash: str  # = embedding_text_hash
    # the contextual unit text the keyword lane indexes (knowbase.units.context)
    text: str = ""


def plan_units(
    material: MaterialInput, dims: int | None, with_vectors: bool
) -> tuple[str, list[PlannedUnit]]:
    """``(content_hash, units)``; InvalidInput for a slice that is not the text it claims."""
    text = material.content_text
    if with_vectors and dims is None:
        raise InvalidInput(
            "embeddings supplied to a BM25-only index", material_id=material.material_id
        )
    content_hash = hashing.text_hash(text)
    units = []
    for chunk in material.chunks:
        if not 0 <= chunk.char_start <= chunk.char_end <= len(text):
            raise InvalidInput(
                "chunk slice lies outside the material text",
                material_id=material.material_id,
                unit_index=chunk.unit_index,
                char_start=chunk.char_start,
                char_end=chunk.char_end,
                text_length=len(text),
            )
        body = text[chunk.char_start : chunk.char_end]
        if body != chunk.text:
            raise InvalidInput(
                "chunk text is not the slice of the material text it claims",
                material_id=material.material_id,
                unit_index=chunk.unit_index,
            )
        uid = hashing.unit_id(
            material.material_id,
            content_hash,
            "chunk",
            chunk.unit_index,
            chunk.char_start,
            chunk.char_end,
        )
        stored = replace(chunk, locator=chunk_locator(chunk), table_header="")
        searched = unit_text(material.title, stored.locator, body)
        units.append(PlannedUnit(uid, stored, body, hashing.text_hash(body), searched))
    return content_hash, units


def check_vectors(
    embeddings: Mapping[str, np.ndarray | Sequence[float]], needed: Sequence[str], dims: int
) -> dict[str, np.ndarray]:
    """The supplied vectors this material uses, as float32; EmbeddingMismatch for a vector
    of the wrong width or with a non-finite component."""
    import numpy as np  # here: the store's other writers and a search never need it

    out = {}
    for h in needed:
        vec = embeddings.get(h)
        if vec is None:
            continue
        arr = np.asarray(vec, dtype="<f4").ravel()
        if arr.shape[0] != dims or not np.isfinite(arr).all():
            raise EmbeddingMismatch(
                "embedding has the wrong width or is not finite",
                dims=dims,
                got=int(arr.shape[0]),
                embedding_text_hash=h,
            )
        out[h] = arr
    return out
