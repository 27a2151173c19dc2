"""The ``IndexStore`` protocol: what the pipeline and query layers need from a per-base index."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from knowbase.units.chunk import Chunk

if TYPE_CHECKING:  # vectors are numpy arrays; a BM25-only search never loads numpy
    import numpy as np

SCHEMA_VERSION = 2  # 2: vectors keyed by model id (sqlite_schema upgrades 1 in place)


@dataclass(frozen=True)
class MaterialInput:
    """Everything ``rebuild_material`` needs: the text, its chunks, and the Concept ID."""

    material_id: str  # = knowledge_item.id
    relative_path: str  # = Concept ID
    content_text: str
    chunks: Sequence[Chunk]
    title: str | None = None


@dataclass(frozen=True)
class StoredMaterial:
    """A material as the store holds it: what a model switch re-chunks from (no source read)."""

    material_id: str
    relative_path: str
    content_hash: str | None
    title: str | None = None


@dataclass(frozen=True)
class SearchHit:
    """One search unit found by a lane. ``score`` is lane-specific (bm25, −length, cosine)."""

    unit_id: str
    material_id: str
    relative_path: str
    unit_index: int
    char_start: int
    char_end: int
    text: str
    score: float
    title: str | None = None
    locator: dict[str, Any] = field(default_factory=dict)


class LaneHit(NamedTuple):
    """A lane's hit before its text is read: enough to fuse, check visibility and cut.

    Search fetches text and locators (:meth:`IndexStore.hits_for`) only for the hits it shows;
    reading them for every lane hit (up to 1,000 per lane) was most of a search's own cost.
    """

    unit_id: str
    material_id: str
    score: float


@dataclass(frozen=True)
class UnitRecord:
    """A stored search unit of one material, in unit_index order."""

    unit_id: str
    unit_index: int
    char_start: int
    char_end: int
    text: str
    locator: dict[str, Any] = field(default_factory=dict)


class IndexStore(Protocol):
    """A per-base derived index. Writers hold the base lock; readers are lock-free."""

    base_id: str
    dims: int | None  # None → BM25-only base
    #: The store has ``rebuild_materials(materials, embeddings) -> [error or None, ...]``: many
    #: materials in one transaction, each in a savepoint (an index batch's final write).
    writes_batches: bool

    def rebuild_material(
        self, material: MaterialInput, embeddings: Mapping[str, np.ndarray | Sequence[float]]
    ) -> None:
        """Replace the material's units atomically; vector bases need every body's embedding."""

    def existing_embedding_hashes(self, hashes: Iterable[str]) -> set[str]: ...

    def stored_vectors(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """The stored vector of each hash that has one (export; nothing is re-embedded)."""
        ...

    def delete_materials(self, material_ids: Iterable[str]) -> None: ...

    def reclaim(self) -> None: ...

    def keyword_lane(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[LaneHit]:
        """The best ``limit`` keyword hits, in a total order (equal scores by unit id): a
        shorter limit must return a prefix of a longer one (search widens on demand).

        ``within``: material ids the hits must belong to, applied before the limit (None: no
        restriction; empty: no hits).
        """
        ...

    def vector_lane(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[LaneHit]:
        """The ``limit`` nearest units by cosine similarity, ``within`` as for keyword_lane."""
        ...

    def hits_for(self, pairs: Sequence[tuple[str, float]]) -> list[SearchHit]:
        """Full hits for ``(unit_id, score)`` pairs, in their order; units gone are skipped."""
        ...

    def keyword_search(
        self, query: str, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        """:meth:`keyword_lane` with each hit's text, Concept ID and locator."""
        ...

    def vector_search(
        self, vector: np.ndarray, limit: int, *, within: frozenset[str] | None = None
    ) -> list[SearchHit]:
        """:meth:`vector_lane` with each hit's text, Concept ID and locator."""
        ...

    def material_path(self, material_id: str) -> str | None: ...

    def material_by_path(self, relative_path: str) -> str | None:
        """The material id whose Concept ID is exactly ``relative_path``."""

    def content_text(self, material_id: str) -> str | None: ...

    def list_units(self, material_id: str) -> list[UnitRecord]: ...

    def material_ids(self) -> set[str]: ...

    def changes_version(self) -> int:
        """``meta.vectors_version``: bumped by every transaction that changes units."""

    def hold(self) -> AbstractContextManager[None]:
        """Keep the store open for the body: a ``close`` meanwhile waits for it to end."""
        ...

    def close(self) -> None:
        """Release the store's resources now, or when the last holder lets go."""

    #: The vectors keyed by model id that the store holds beside its units (a model switch's
    #: reads and writes).
    models: ModelVectorSets

    def for_model(self, model_id: str, dims: int) -> IndexStore:
        """A store on the same index whose vector lane serves ``model_id``; caller closes."""
        ...


class ModelVectorSets(Protocol):
    """Vectors keyed by model id (DESIGN "Vectors are keyed by model id"): every backend's
    store holds one as :attr:`IndexStore.models`. The store's ``model_id`` is the set its vector
    lane serves and ``rebuild_material`` writes; a switch fills another set beside it.
    Writers hold the base lock."""

    def vectors_for(self, hashes: Iterable[str], model_id: str) -> dict[str, np.ndarray]:
        """``{embedding_text_hash: vector}`` of ``model_id`` for those hashes that have one."""
        ...

    def existing_vectors(self, model_id: str, hashes: Iterable[str]) -> set[str]: ...

    def put_vectors(
        self, model_id: str, dims: int, vectors: Mapping[str, np.ndarray | Sequence[float]]
    ) -> None: ...

    def bodies_without_vectors(self, model_id: str, limit: int | None = None) -> dict[str, str]:
        """``{embedding_text_hash: body}`` of stored units lacking a vector of ``model_id``."""
        ...

    def body_count(self) -> int: ...

    def stored_materials(self) -> list[StoredMaterial]: ...

    def replace_units(self, materials: Sequence[MaterialInput], model_id: str) -> None:
        """Re-chunked units in one transaction, covered by ``model_id``'s stored vectors."""

    def drop_vectors(self, model_id: str) -> int: ...

    def model_ids(self) -> set[str]:
        """The models that have vectors in this index."""
        ...
