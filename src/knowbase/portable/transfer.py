"""``export_base`` / ``import_base``: move one base between homes and backends as one file.

The layout and its checks are :mod:`.archive_format`, reading and verifying an archive is
:mod:`.archive_reader`; this module writes archives and bases.

Export holds the base lock while it reads (catalog rows, index rows, vectors, raw/ files), so
the archive is one consistent state; a base with items in flight (being indexed or deleted)
is refused (``conflict``) unless the caller is :mod:`.copy_home` moving jobs at rest with it.
Vectors are read as stored (:meth:`IndexStore.stored_vectors`) and written keyed by the
base's model id.

Import runs in three phases, and only the last writes:

1. *verify* — every entry passes :func:`check_entry` (layout, no links, size caps), the member
   set equals the manifest's, and each member's size and sha256 match the manifest (a corrupt
   or truncated archive is ``archive_invalid``);
2. *decode* — items, materials (offsets checked against the text and body hashes) and vectors
   (every body of a vector base has one); the name (or, keeping ids, the ids) must be free
   (``base_exists``) and the models usable here;
3. *write* — the base row, raw/ files, one ``rebuild_material`` per material with its vectors
   supplied (so nothing is embedded), then every item row in one transaction. Any failure
   removes the half-made base again: nothing is left behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.guards import assert_base_runnable
from knowbase.catalog.models import Base, Item
from knowbase.catalog.schema import ACTIVE_STATUSES
from knowbase.catalog.schema import knowledge_item as it
from knowbase.errors import (
    ArchiveInvalid,
    BaseExists,
    Conflict,
    InvalidInput,
    KnowbaseError,
)
from knowbase.ids import new_base_id, new_time_id
from knowbase.index.base import MaterialInput
from knowbase.operations.bases import remove_base
from knowbase.pipeline.processing import check_processor_id
from knowbase.portable import archive_format as fmt
from knowbase.portable import archive_seal
from knowbase.portable.archive_reader import Decoded, decode, open_archive, stream, verify_archive
from knowbase.providers.registry import check_base_models
from knowbase.runtime import Runtime

log = logging.getLogger(__name__)

_COPY = 1 << 20
_TMP_PREFIX = ".kb-tmp-"


@dataclass
class ArchiveReport:
    """What an export wrote or an import made; ``embedded`` counts provider calls (always 0)."""

    base: Base
    path: str
    items: int = 0
    materials: int = 0
    units: int = 0
    vectors: int = 0
    raw_files: int = 0
    bytes: int = 0
    id_map: dict[str, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base.to_dict(),
            "path": self.path,
            "items": self.items,
            "materials": self.materials,
            "units": self.units,
            "vectors": self.vectors,
            "raw_files": self.raw_files,
            "bytes": self.bytes,
        }


# --- export ---------------------------------------------------------------------------------
def _raw_files(raw: Path) -> Iterator[tuple[str, Path]]:
    """``(relative path, file)`` of every regular file under raw/, sorted; links are skipped
    (an archive never carries one) and so are the store's own temp files."""
    if not raw.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(raw):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name.startswith(_TMP_PREFIX) or path.is_symlink() or not path.is_file():
                continue
            yield path.relative_to(raw).as_posix(), path


class _Writer:
    """Zip members written as streams, each one's size and sha256 kept for the manifest."""

    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.zf = zf
        self.members: dict[str, dict[str, Any]] = {}

    @contextmanager
    def member(self, name: str) -> Iterator[Any]:
        digest, size = hashlib.sha256(), 0
        with self.zf.open(name, "w", force_zip64=True) as out:

            def write(data: bytes) -> None:
                nonlocal size
                digest.update(data)
                size += len(data)
                out.write(data)

            yield write
        self.members[name] = {"size": size, "sha256": digest.hexdigest()}

    def file(self, name: str, src: Path) -> None:
        with self.member(name) as write, open(src, "rb") as fh:
            while chunk := fh.read(_COPY):
                write(chunk)


def export_base(
    rt: Runtime, base_id: str, path: Path, *, allow_active: bool = False
) -> ArchiveReport:
    """Write ``base_id`` to ``path`` (replaced atomically; a failure leaves no file)."""
    path = Path(path)
    part = path.with_name(f"{path.name}.part")
    with rt.catalog.read() as conn:
        base = base_repo.get(conn, base_id)
    assert_base_runnable(base, "exporting")
    report = ArchiveReport(base, str(path))
    if not path.parent.is_dir():
        raise InvalidInput(f"cannot write {str(path)!r}: no such folder", path=str(path))
    try:
        with rt.lock(base.id), zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as zf:
            _write_archive(rt, base, _Writer(zf), report, allow_active)
            zf.comment = archive_seal.PLACEHOLDER
        archive_seal.seal(part)  # every byte, zip metadata included (archive_seal.py)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    report.bytes = path.stat().st_size
    return report


def _write_archive(
    rt: Runtime, base: Base, w: _Writer, report: ArchiveReport, allow_active: bool
) -> None:
    with rt.catalog.read() as conn:
        base = base_repo.get(conn, base.id)
        # A move (copy-home) carries items being deleted too: their pending delete job comes
        # along and finishes the deletion there, raw/ files included.
        items = item_repo.list_items(conn, base.id, include_deleting=allow_active)
    busy = [i.id for i in items if i.status in (*ACTIVE_STATUSES, "deleting")]
    if busy and not allow_active:
        raise Conflict(
            f"{len(busy)} item(s) of base {base.name!r} are still being indexed or deleted;"
            " export when they are done",
            base_id=base.id,
            items=busy[:10],
        )
    with w.member(fmt.ITEMS) as write:
        for line in fmt.encode_jsonl(fmt.item_row(i) for i in items):
            write(line)
    carried = {i.id for i in items}
    hashes: set[str] = set()
    with rt.lease(base) as store, w.member(fmt.MATERIALS) as write:
        for mid in sorted(store.material_ids() & carried):
            units = store.list_units(mid)
            rel, text = store.material_path(mid), store.content_text(mid)
            if rel is None or text is None:
                continue  # deleted meanwhile (cannot happen under the lock; be safe)
            row = fmt.material_row(mid, rel, text, units)
            hashes.update(u["h"] for u in row["units"])
            write(next(fmt.encode_jsonl([row])))
            report.materials += 1
            report.units += len(units)
        vectors = store.stored_vectors(hashes) if base.dimensions else {}
    vector_sets = []
    if base.dimensions and base.embedding_model_id:
        missing = hashes - set(vectors)
        if missing:
            raise KnowbaseError(
                f"the index of base {base.name!r} lacks {len(missing)} vector(s); reindex it",
                base_id=base.id,
            )
        hash_bytes, row_bytes = fmt.encode_vectors(vectors, base.dimensions)
        with w.member("vectors/0.hashes") as write:
            write(hash_bytes)
        with w.member("vectors/0.f32") as write:
            write(row_bytes)
        vector_sets.append(
            {
                "model_id": base.embedding_model_id,
                "dims": base.dimensions,
                "count": len(vectors),
                "hashes": "vectors/0.hashes",
                "data": "vectors/0.f32",
            }
        )
    raw: dict[str, str] = {}
    for n, (rel, src) in enumerate(_raw_files(rt.storage(base.id).raw)):
        name = f"raw/{n}"
        w.file(name, src)
        raw[name] = rel
    report.items, report.vectors, report.raw_files = len(items), len(vectors), len(raw)
    manifest = fmt.Manifest(
        base={k: getattr(base, k) for k in fmt.SETTINGS},
        source_base_id=base.id,
        members=dict(w.members),
        raw=raw,
        vectors=vector_sets,
        counts={
            "items": report.items,
            "materials": report.materials,
            "units": report.units,
            "vectors": report.vectors,
            "raw_files": report.raw_files,
        },
    )
    w.zf.writestr(fmt.MANIFEST, json.dumps(manifest.to_dict(), ensure_ascii=False, indent=1))


# --- import: write --------------------------------------------------------------------------
def _container_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows ordered so that every container precedes its children (the group FK)."""
    by_id = {r["id"]: r for r in rows}
    done: set[str] = set()
    out: list[dict[str, Any]] = []
    for row in rows:
        chain = []
        cur: dict[str, Any] | None = row
        while cur is not None and cur["id"] not in done:
            chain.append(cur)
            done.add(cur["id"])
            cur = by_id.get(cur["group_id"]) if cur["group_id"] else None
        out.extend(reversed(chain))
    return out


def import_base(
    rt: Runtime,
    path: Path,
    name: str | None = None,
    *,
    keep_ids: bool = False,
    index_backend: str | None = None,
    caps: fmt.Caps | None = None,
) -> ArchiveReport:
    """Make a new base from the archive at ``path``; see the module docstring.

    ``name`` None keeps the archived name. Ids are new unless ``keep_ids`` (``copy-home``
    moves a home and its jobs, whose payloads name items), in which case they must be free.
    """
    path = Path(path)
    with open_archive(path) as zf:
        manifest = verify_archive(zf, caps or fmt.Caps())
        decoded = decode(zf, manifest)
        settings = dict(manifest.base)
        name = (name or settings.pop("name")).strip()
        settings.pop("name", None)
        check_base_models(
            rt.settings,
            embedding_model_id=settings.get("embedding_model_id"),
            dimensions=settings.get("dimensions"),
            rerank_model_id=settings.get("rerank_model_id"),
        )
        check_processor_id(settings.get("file_processor_id"), rt.settings)
        id_map = {row["id"]: row["id"] if keep_ids else new_time_id() for row in decoded.items}
        # The base's lock is held from before its row is visible until it is whole: a reader
        # that meets the row without its index waits on it instead of failing the base.
        base_id = manifest.source_base_id if keep_ids else new_base_id()
        with rt.lock(base_id):
            base = _insert_base(rt, name, settings, keep_ids, index_backend, base_id, id_map)
            report = ArchiveReport(base, str(path), id_map=id_map)
            try:
                _write_base(rt, base, zf, decoded, id_map, report)
            except BaseException:
                remove_base(rt, base.id)
                raise
    report.bytes = path.stat().st_size
    return report


def _insert_base(
    rt: Runtime,
    name: str,
    settings: dict[str, Any],
    keep_ids: bool,
    index_backend: str | None,
    base_id: str,
    id_map: dict[str, str],
) -> Base:
    with rt.catalog.write_tx() as conn:
        if base_repo.find_by_name(conn, name) is not None:
            raise BaseExists(f"a base named {name!r} already exists here", name=name)
        if keep_ids:
            if base_repo.find(conn, base_id) is not None:
                raise BaseExists(f"base id {base_id} already exists here", base_id=base_id)
            if item_repo.find_many(conn, id_map):
                raise BaseExists("some of the archive's item ids already exist here")
        return base_repo.insert(
            conn, name=name, index_backend=index_backend, id=base_id, **settings
        )


def _write_raw(rt: Runtime, base: Base, zf: zipfile.ZipFile, raw: dict[str, str]) -> None:
    storage = rt.storage(base.id)
    for member, rel in sorted(raw.items()):
        target = storage.path_of(rel)  # checked again for this host (backslashes, drives)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:  # a new base: nothing may be there already
                _copy(stream(zf, member), out)
        except (FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
            # two paths naming one file ("a/b", "a/./b") or a file where a folder must be
            raise ArchiveInvalid(f"archive files collide at {rel!r}: {exc}", path=rel) from exc


def _copy(chunks: Iterator[bytes], out: IO[bytes]) -> None:
    for chunk in chunks:
        out.write(chunk)


def _write_base(
    rt: Runtime,
    base: Base,
    zf: zipfile.ZipFile,
    decoded: Decoded,
    id_map: dict[str, str],
    report: ArchiveReport,
) -> None:
    rows = {row["id"]: row for row in decoded.items}
    vectors = decoded.vectors
    index = {h: i for i, h in enumerate(vectors.hashes)} if vectors else {}
    # (the caller holds the base's lock) the index first: readers wait on the lock meanwhile
    rt.storage(base.id).ensure()
    store = rt.store(base, create=True)
    _write_raw(rt, base, zf, decoded.manifest.raw)
    for m in decoded.materials:
        row = rows[m.material_id]
        title = Item(**{**row, "base_id": base.id}).title
        supplied: dict[str, np.ndarray] = {}
        if vectors is not None and base.dimensions:
            supplied = {h: vectors.rows[index[h]] for h in m.body_hashes}
        store.rebuild_material(
            MaterialInput(id_map[m.material_id], m.relative_path, m.content_text, m.chunks, title),
            supplied,
        )
        report.materials += 1
        report.units += len(m.chunks)
    _insert_items(rt, base, decoded.items, id_map)
    report.items = len(decoded.items)
    report.vectors = len(vectors.hashes) if vectors else 0
    report.raw_files = len(decoded.manifest.raw)
    with rt.catalog.read() as conn:
        report.base = base_repo.get(conn, base.id)


def _insert_items(
    rt: Runtime, base: Base, rows: list[dict[str, Any]], id_map: dict[str, str]
) -> None:
    values = [
        {
            **row,
            "id": id_map[row["id"]],
            "group_id": id_map[row["group_id"]] if row["group_id"] else None,
            "base_id": base.id,
            "data": json.dumps(row["data"], ensure_ascii=False),
        }
        for row in _container_first(rows)
    ]
    with rt.catalog.write_tx() as conn:
        for start in range(0, len(values), 500):
            conn.execute(it.insert(), values[start : start + 500])
