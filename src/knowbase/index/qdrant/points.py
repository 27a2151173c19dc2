"""How the qdrant backend addresses Qdrant: point ids, the client, one collection per width.

Shared by the store (:mod:`.store`) and its vector sets (:mod:`.models`).
"""

from __future__ import annotations

import math
import re
import threading
import uuid
import warnings
from typing import Any

from knowbase.errors import MissingExtra, VectorStoreUnavailable

_NS = uuid.UUID("7b4e2f0a-1c1d-4c55-9a43-0a9f3f1a2b6c")
BATCH = 256  # hashes per filter, points per upsert
PAGE = 1024  # points per scroll page of a whole-set walk (payload only)
_COLLECTION = re.compile(r"kb_(\d+)")


def point_id(base_id: str, unit_id: str, model_id: str = "") -> str:
    return str(
        uuid.uuid5(_NS, f"{base_id}/{model_id}/{unit_id}" if model_id else f"{base_id}/{unit_id}")
    )


def body_point_id(base_id: str, model_id: str, embedding_text_hash: str) -> str:
    """The id of a body point: a set's vector for a body no stored unit has (yet)."""
    return point_id(base_id, f"body:{embedding_text_hash}", model_id)


def connect(location: str, *, timeout_s: float = 5.0) -> Any:
    """A client: ``http(s)://…`` for a server, ``:memory:`` or a folder for local mode."""
    try:
        from qdrant_client import QdrantClient
    except ImportError as exc:
        raise MissingExtra(
            "the qdrant backend needs qdrant-client: pip install 'knowbase[qdrant]'"
        ) from exc
    if location.startswith(("http://", "https://")):
        return QdrantClient(url=location, timeout=int(math.ceil(timeout_s)))
    if location == ":memory:":
        return OneCallAtATime(QdrantClient(location=":memory:"))
    return OneCallAtATime(QdrantClient(path=location))


class OneCallAtATime:
    """A local-mode client, one call at a time across threads.

    qdrant-client's local mode keeps a collection in parallel numpy arrays with no lock: an
    upsert beside a search or another upsert leaves them at mismatched lengths, and the search
    indexes past one (qdrant/qdrant-client#1193, open; seen here as "index 29 is out of bounds"
    when the concurrency test ran on the qdrant backend). A server has no such problem.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def serialized(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return serialized


def ensure_collection(client: Any, dims: int) -> str:
    """The collection of vectors ``dims`` wide (``kb_<dims>``), made with its payload indexes
    if missing."""
    from qdrant_client import models

    name = f"kb_{dims}"
    if client.collection_exists(name):
        return name
    try:
        client.create_collection(
            name, vectors_config=models.VectorParams(size=dims, distance=models.Distance.COSINE)
        )
    except Exception:
        if client.collection_exists(name):  # another process made it meanwhile
            return name
        raise
    with warnings.catch_warnings():  # local mode says its payload indexes do nothing
        warnings.filterwarnings("ignore", "Payload indexes have no effect", UserWarning)
        for key in ("base_id", "model_id", "material_id", "embedding_text_hash"):
            client.create_payload_index(name, key, models.PayloadSchemaType.KEYWORD)
    return name


def unavailable(base_id: str, op: str, exc: BaseException) -> VectorStoreUnavailable:
    """The error of a Qdrant call that failed (refused, timed out, answered badly)."""
    return VectorStoreUnavailable(
        f"Qdrant cannot be used ({op}): {exc}", base_id=base_id, op=op, reason="qdrant"
    )
