"""Row dataclasses of the catalog: what repositories return and workflows pass around."""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from knowbase.catalog import base_settings
from knowbase.catalog.schema import is_container


@dataclass(frozen=True)
class BaseIdentity:
    """What a base is, apart from its settings: id, name, state, model, index backend.

    :class:`Base` adds one field per declared setting (:mod:`.base_settings`).
    """

    id: str
    name: str
    status: str
    error: str | None
    embedding_model_id: str | None
    dimensions: int | None
    created_at: int
    updated_at: int
    index_backend: str = "sqlite"  # the registry in index/backends.py names them

    @classmethod
    def from_row(cls, row: Any) -> Base:
        m = row._mapping
        return cls(**{k: m[k] for k in cls.__dataclass_fields__})  # type: ignore[return-value]

    @property
    def uses_embeddings(self) -> bool:
        return self.embedding_model_id is not None and self.status == "completed"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


#: A knowledge base (§1.1): its identity and one field per setting of
#: :data:`~knowbase.catalog.base_settings.SETTINGS` (``base.chunk_size``, ``base.url_max_age``…).
#: ``embedding_model_id`` None → BM25-only.
Base = make_dataclass(
    "Base",
    [
        (s.name, s.type | None if s.nullable else s.type, field(default=s.default))
        for s in base_settings.SETTINGS
    ],
    bases=(BaseIdentity,),
    frozen=True,
    namespace={
        "__doc__": "A knowledge base (§1.1): identity and declared settings.",
        "__module__": __name__,
    },
)


@dataclass(frozen=True)
class Item:
    """A knowledge item (§1.2): per-type ``data``; ``origin`` is where to re-acquire it from."""

    id: str
    base_id: str
    group_id: str | None
    type: str
    data: dict[str, Any]
    origin: str | None
    status: str
    error_code: str | None
    error_message: str | None
    created_at: int
    updated_at: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_row(cls, row: Any) -> Item:
        return cls.from_mapping(row._mapping)

    @classmethod
    def from_mapping(cls, m: Any) -> Item:
        """From the row's columns by name (``data`` as its stored JSON text)."""
        return cls(
            id=m["id"],
            base_id=m["base_id"],
            group_id=m["group_id"],
            type=m["type"],
            data=json.loads(m["data"]),
            origin=m["origin"],
            status=m["status"],
            error_code=m["error_code"],
            error_message=m["error_message"],
            created_at=m["created_at"],
            updated_at=m["updated_at"],
        )

    @property
    def is_container(self) -> bool:
        return is_container(self.type)

    @property
    def source(self) -> str:
        return str(self.data.get("source", ""))

    @property
    def relative_path(self) -> str | None:
        return self.data.get("relative_path")

    @property
    def concept_id(self) -> str | None:
        """The material path inside raw/ (the processed .md for a processed file)."""
        if self.is_container:
            return None
        return self.data.get("indexed_relative_path") or self.data.get("relative_path")

    @property
    def title(self) -> str:
        """A display title: file name, page title, note's first line."""
        if self.type == "note":
            first = next((ln.strip() for ln in self.source.splitlines() if ln.strip()), "")
            return first[:80] or "Untitled note"
        if self.type in ("url", "sitemap"):
            return str(self.data.get("title") or self.data.get("url") or self.source)
        if self.type == "file":
            return posixpath.basename(self.source.replace("\\", "/")) or self.source
        return self.source

    @property
    def tags(self) -> list[str]:
        """The item's own tags (a folder's also apply to everything under it)."""
        return list(self.data.get("tags") or [])

    @property
    def metadata(self) -> dict[str, Any]:
        """The item's own metadata (a folder's also applies to everything under it)."""
        return dict(self.data.get("metadata") or {})

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "extra"}
        out["concept_id"] = self.concept_id if self.status == "completed" else None
        out["title"] = self.title
        out["tags"] = self.tags
        out["metadata"] = self.metadata
        return out


@dataclass(frozen=True)
class ApiKey:
    """One key as stored (never its token). Times are epoch milliseconds."""

    name: str
    access: str  # "read" | "write"
    base_ids: tuple[str, ...] | None  # None: every base
    created_at: int
    expires_at: int | None
    revoked_at: int | None

    def state(self, now_ms: int) -> str:
        """``active``, ``expired`` or ``revoked``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now_ms >= self.expires_at:
            return "expired"
        return "active"

    def to_dict(self, now_ms: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "access": self.access,
            "base_ids": None if self.base_ids is None else list(self.base_ids),
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
        }
        if now_ms is not None:
            out["state"] = self.state(now_ms)
        return out

    @classmethod
    def from_row(cls, row: Any) -> ApiKey:
        m = row._mapping
        ids = None if m["base_ids"] is None else tuple(json.loads(m["base_ids"]))
        return cls(
            name=m["name"],
            access=m["access"],
            base_ids=ids,
            created_at=int(m["created_at"]),
            expires_at=None if m["expires_at"] is None else int(m["expires_at"]),
            revoked_at=None if m["revoked_at"] is None else int(m["revoked_at"]),
        )


#: Access levels, weakest first: a principal may do what its level and those below allow.
ACCESS_LEVELS = ("read", "write", "admin")


@dataclass(frozen=True)
class Principal:
    """Who a request acts as, once its key is checked: ``name`` (the key's, ``admin`` for the
    API token, None on a server that asks for no key), ``access`` (one of
    :data:`ACCESS_LEVELS`) and the bases it may see (ids; None: every base)."""

    name: str | None
    access: str
    base_ids: frozenset[str] | None = None

    def allows(self, needed: str) -> bool:
        """Whether this principal's access covers ``needed`` (read < write < admin)."""
        return ACCESS_LEVELS.index(self.access) >= ACCESS_LEVELS.index(needed)

    def sees(self, base_id: str) -> bool:
        return self.base_ids is None or base_id in self.base_ids


#: A server without an API token and without keys: everyone is the admin, as before keys.
OPEN = Principal(None, "admin")
