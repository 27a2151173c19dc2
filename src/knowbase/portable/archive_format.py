"""The portable base archive (``kb export`` / ``kb import``): its layout and checks, no I/O.

One zip file (deflate, ZIP64) whose members have fixed, generated names, so no name inside an
archive is ever used as a path on disk::

    manifest.json         format, version, the base's settings, counts, every member's sha256
    items.jsonl           the base's catalog rows (one item per line, ids and statuses kept)
    materials.jsonl       per material: Concept ID, content text, units (offsets, locator,
                          body hash) — the chunks exactly as indexed
    vectors/<n>.hashes    one body hash per line ...
    vectors/<n>.f32       ... and its vector: little-endian float32 rows, keyed by model id
    raw/<n>               the base's raw/ files; the manifest maps ``n`` to the relative path

Archives are untrusted input. :func:`check_entry` refuses a member that is a link or a
directory, has a name outside the layout, or is bigger than :class:`Caps` allow (alone, in
total, or by compression ratio: a decompression bomb); :func:`parse_manifest` and the decoders
refuse anything of the wrong shape, relative paths that escape raw/, chunk offsets outside their
text and bodies whose hash is not the one recorded. Every failure is :class:`ArchiveInvalid`
or :class:`ArchiveUnsafe` and happens before the importer writes anything.
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from knowbase.catalog import base_settings
from knowbase.errors import ArchiveInvalid, ArchiveUnsafe, InvalidInput
from knowbase.files import validate_relative_path
from knowbase.units.chunk import Chunk
from knowbase.units.hashing import text_hash

FORMAT = "knowbase-base-archive"
VERSION = 2
#: Versions an import reads: 2 adds the whole-archive seal (:mod:`.archive_seal`); 1 (before
#: it) has its members' checksums only.
READABLE_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
ITEMS = "items.jsonl"
MATERIALS = "materials.jsonl"
_MEMBER = re.compile(
    r"(?:manifest\.json|items\.jsonl|materials\.jsonl|vectors/[0-9]{1,6}\.(?:hashes|f32)|raw/[0-9]{1,9})"
)

#: Base settings an archive carries (the catalog columns a new base is created with): the name,
#: the model, and every portable setting of the declaration (catalog/base_settings.py).
SETTINGS = ("name", "embedding_model_id", "dimensions", *base_settings.PORTABLE)
ITEM_FIELDS = (
    "id",
    "group_id",
    "type",
    "data",
    "origin",
    "status",
    "error_code",
    "error_message",
    "created_at",
    "updated_at",
)


@dataclass(frozen=True)
class Caps:
    """What an import accepts at most (a member's declared size bounds what is read)."""

    max_members: int = 1_000_000
    max_member_bytes: int = 4 << 30  # one raw file, or the vectors of one model
    max_total_bytes: int = 256 << 30
    max_ratio: int = 200  # uncompressed / compressed, for members over 1 MiB
    max_manifest_bytes: int = 256 << 20


@dataclass(frozen=True)
class VectorSet:
    """The vectors of one embedding model: ``hashes[i]`` is the body hash of ``rows[i]``."""

    model_id: str
    dims: int
    hashes: list[str]
    rows: np.ndarray  # (len(hashes), dims) little-endian float32


@dataclass(frozen=True)
class MaterialRecord:
    """One indexed material: what ``rebuild_material`` needs, offsets as stored."""

    material_id: str
    relative_path: str
    content_text: str
    chunks: list[Chunk]

    @property
    def body_hashes(self) -> set[str]:
        return {text_hash(c.text) for c in self.chunks}


@dataclass(frozen=True)
class Manifest:
    """A parsed, checked ``manifest.json``."""

    base: dict[str, Any]
    source_base_id: str
    members: dict[str, dict[str, Any]]  # name -> {"size", "sha256"}
    raw: dict[str, str]  # member name -> raw/-relative path
    vectors: list[dict[str, Any]]  # {"model_id", "dims", "count", "hashes", "data"}
    counts: dict[str, int] = field(default_factory=dict)
    version: int = VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": self.version,
            "source_base_id": self.source_base_id,
            "base": self.base,
            "counts": self.counts,
            "vectors": self.vectors,
            "raw": self.raw,
            "members": self.members,
        }


# --- entries --------------------------------------------------------------------------------
def check_entry(
    name: str, file_size: int, compress_size: int, external_attr: int, caps: Caps
) -> None:
    """Refuse a zip entry that does not belong to the layout or could harm the importer."""
    if not _MEMBER.fullmatch(name):
        raise ArchiveUnsafe(f"archive member {name!r} is not part of a base archive", member=name)
    mode = external_attr >> 16
    if mode and not (stat.S_ISREG(mode) or mode & 0o170000 == 0):
        raise ArchiveUnsafe(f"archive member {name!r} is not a regular file", member=name)
    limit = caps.max_manifest_bytes if name == MANIFEST else caps.max_member_bytes
    if file_size > limit:
        raise ArchiveUnsafe(
            f"archive member {name!r} is {file_size:,} bytes (at most {limit:,})", member=name
        )
    if file_size > 1 << 20 and file_size > caps.max_ratio * max(compress_size, 1):
        raise ArchiveUnsafe(
            f"archive member {name!r} expands {file_size // max(compress_size, 1):,}-fold",
            member=name,
        )


def check_totals(sizes: Sequence[int], caps: Caps) -> None:
    if len(sizes) > caps.max_members:
        raise ArchiveUnsafe(f"archive has {len(sizes):,} members (at most {caps.max_members:,})")
    if sum(sizes) > caps.max_total_bytes:
        raise ArchiveUnsafe(
            f"archive expands to {sum(sizes):,} bytes (at most {caps.max_total_bytes:,})"
        )


# --- manifest -------------------------------------------------------------------------------
def _need(cond: bool, message: str, **details: Any) -> None:
    if not cond:
        raise ArchiveInvalid(message, **details)


def parse_manifest(data: bytes) -> Manifest:
    """The manifest, with its shape and every relative path checked."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArchiveInvalid(f"the archive manifest is not JSON: {exc}") from exc
    _need(isinstance(doc, dict) and doc.get("format") == FORMAT, "not a knowbase base archive")
    _need(
        doc.get("version") in READABLE_VERSIONS,
        f"archive format version {doc.get('version')!r} is not supported (this is {VERSION})",
        version=doc.get("version"),
    )
    base, members, raw = doc.get("base"), doc.get("members"), doc.get("raw")
    vectors, counts = doc.get("vectors"), doc.get("counts") or {}
    _need(isinstance(base, dict) and isinstance(base.get("name"), str), "manifest lacks the base")
    _need(isinstance(members, dict) and isinstance(raw, dict), "manifest lacks its member list")
    _need(isinstance(vectors, list) and isinstance(counts, dict), "manifest lacks vectors/counts")
    unknown = set(base) - set(SETTINGS)
    _need(not unknown, f"manifest has unknown base settings {sorted(unknown)}")
    for name, spec in members.items():
        _need(
            isinstance(spec, dict)
            and isinstance(spec.get("size"), int)
            and isinstance(spec.get("sha256"), str)
            and bool(_MEMBER.fullmatch(name)),
            f"manifest lists a bad member {name!r}",
            member=name,
        )
    for name, rel in raw.items():
        if not isinstance(rel, str) or name not in members or not name.startswith("raw/"):
            raise ArchiveInvalid(f"manifest maps a bad raw member {name!r}", member=name)
        try:
            validate_relative_path(rel)
        except InvalidInput as exc:
            raise ArchiveUnsafe(
                f"archive file {rel!r} would land outside the base: {exc}", path=rel
            ) from exc
    if len(set(raw.values())) != len(raw):
        raise ArchiveInvalid("manifest maps two members to one raw path")
    for vs in vectors:
        _need(
            isinstance(vs, dict)
            and isinstance(vs.get("model_id"), str)
            and isinstance(vs.get("dims"), int)
            and vs["dims"] > 0
            and isinstance(vs.get("count"), int)
            and vs.get("hashes") in members
            and vs.get("data") in members,
            "manifest has a bad vector set",
        )
    for name in (ITEMS, MATERIALS):
        _need(name in members, f"archive lacks {name}")
    return Manifest(
        base=base,
        source_base_id=str(doc.get("source_base_id") or ""),
        members=members,
        raw=raw,
        vectors=vectors,
        counts={k: int(v) for k, v in counts.items()},
        version=int(doc["version"]),
    )


# --- items ----------------------------------------------------------------------------------
def encode_jsonl(rows: Iterable[Mapping[str, Any]]) -> Iterator[bytes]:
    for row in rows:
        yield (json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def _lines(data: bytes, what: str) -> Iterator[dict[str, Any]]:
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ArchiveInvalid(f"{what} line {n} is not JSON: {exc}") from exc
        _need(isinstance(row, dict), f"{what} line {n} is not an object")
        yield row


def item_row(item: Any) -> dict[str, Any]:
    """An ``Item`` as an archive row (``data`` as an object)."""
    return {k: getattr(item, k) for k in ITEM_FIELDS}


def decode_items(data: bytes) -> list[dict[str, Any]]:
    rows = list(_lines(data, ITEMS))
    ids = set()
    for row in rows:
        _need(set(row) == set(ITEM_FIELDS), "an item row has the wrong fields", fields=sorted(row))
        _need(isinstance(row["id"], str) and isinstance(row["data"], dict), "a bad item row")
        _need(row["id"] not in ids, f"item {row['id']} appears twice")
        ids.add(row["id"])
    for row in rows:
        _need(row["group_id"] is None or row["group_id"] in ids, "an item's container is missing")
    return rows


# --- materials ------------------------------------------------------------------------------
def material_row(
    material_id: str, relative_path: str, content_text: str, units: Iterable[Any]
) -> dict[str, Any]:
    """A material as an archive row; ``units`` are ``UnitRecord``s in unit order."""
    return {
        "material_id": material_id,
        "relative_path": relative_path,
        "content_text": content_text,
        "units": [
            {
                "i": u.unit_index,
                "s": u.char_start,
                "e": u.char_end,
                "loc": u.locator or {},
                "h": text_hash(u.text),
            }
            for u in units
        ],
    }


def decode_materials(data: bytes) -> list[MaterialRecord]:
    """Materials with each chunk's text taken from its offsets and checked against its hash."""
    out: list[MaterialRecord] = []
    for row in _lines(data, MATERIALS):
        try:
            mid, rel, text = row["material_id"], row["relative_path"], row["content_text"]
            _need(all(isinstance(v, str) for v in (mid, rel, text)), "a bad material row")
            chunks = []
            for u in row["units"]:
                start, end = int(u["s"]), int(u["e"])
                _need(0 <= start <= end <= len(text), "a chunk lies outside its text", path=rel)
                body = text[start:end]
                _need(text_hash(body) == u["h"], "a chunk's text does not match its hash", path=rel)
                chunks.append(Chunk(body, start, end, int(u["i"]), dict(u.get("loc") or {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise ArchiveInvalid(f"a bad material row: {exc}") from exc
        try:
            validate_relative_path(rel)
        except InvalidInput as exc:
            raise ArchiveUnsafe(f"Concept ID {rel!r} is unsafe: {exc}", path=rel) from exc
        out.append(MaterialRecord(mid, rel, text, chunks))
    return out


# --- vectors --------------------------------------------------------------------------------
def encode_vectors(vectors: Mapping[str, np.ndarray], dims: int) -> tuple[bytes, bytes]:
    """``(hashes member, f32 member)`` in sorted hash order."""
    hashes = sorted(vectors)
    rows = np.zeros((len(hashes), dims), dtype="<f4")
    for i, h in enumerate(hashes):
        rows[i] = np.asarray(vectors[h], dtype="<f4").ravel()
    return ("\n".join(hashes) + "\n").encode() if hashes else b"", rows.tobytes()


def decode_vectors(spec: Mapping[str, Any], hashes_data: bytes, rows_data: bytes) -> VectorSet:
    """A vector set, its counts and width checked against the manifest (no pickle: raw f32)."""
    hashes = hashes_data.decode("ascii", "replace").split()
    dims, count = int(spec["dims"]), int(spec["count"])
    _need(len(hashes) == count == len(set(hashes)), "vector hashes do not match their count")
    _need(len(rows_data) == count * dims * 4, "vector data does not match its count and width")
    _need(all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), "a bad vector hash")
    rows = np.frombuffer(rows_data, dtype="<f4").reshape(count, dims)
    _need(bool(np.isfinite(rows).all()), "vector data holds non-finite values")
    return VectorSet(str(spec["model_id"]), dims, hashes, rows)
