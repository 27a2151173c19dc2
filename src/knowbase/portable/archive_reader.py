"""Reading a base archive (phases 1 and 2 of :func:`.portable.import_base`): open it, verify
every entry and checksum, then decode items, materials and vectors and check they agree.
Nothing here writes; every refusal is ``archive_invalid`` / ``archive_unsafe`` / ``not_found``.
"""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowbase.errors import ArchiveInvalid, ArchiveUnsafe, NotFound
from knowbase.portable import archive_format as fmt
from knowbase.portable.archive_seal import verify_seal

_COPY = 1 << 20


# --- import: verify -------------------------------------------------------------------------
def stream(zf: zipfile.ZipFile, name: str) -> Iterator[bytes]:
    """A member's bytes in blocks; zip-level damage (CRC, truncation) is ArchiveInvalid."""
    try:
        with zf.open(name) as fh:
            while chunk := fh.read(_COPY):
                yield chunk
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError) as exc:
        raise ArchiveInvalid(f"archive member {name!r} is damaged: {exc}", member=name) from exc


def read_member(zf: zipfile.ZipFile, name: str) -> bytes:
    return b"".join(stream(zf, name))


def open_archive(path: Path) -> zipfile.ZipFile:
    if not path.is_file():
        raise NotFound(f"no archive file {str(path)!r}", path=str(path))
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ArchiveInvalid(f"{path} is not a readable archive: {exc}", path=str(path)) from exc


def verify_archive(zf: zipfile.ZipFile, caps: fmt.Caps) -> fmt.Manifest:
    """Phase 1: entries, manifest, and every member's size and sha256 (nothing is written)."""
    infos = zf.infolist()
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise ArchiveUnsafe("archive has two members of one name")
    for info in infos:
        fmt.check_entry(info.filename, info.file_size, info.compress_size, info.external_attr, caps)
    fmt.check_totals([i.file_size for i in infos], caps)
    if fmt.MANIFEST not in names:
        raise ArchiveInvalid("archive has no manifest.json (not a knowbase base archive)")
    manifest = fmt.parse_manifest(read_member(zf, fmt.MANIFEST))
    if manifest.version >= 2 and zf.filename:
        # The whole file, metadata included (headers, extra fields, central directory, end
        # record): member checksums alone miss a flipped byte there.
        verify_seal(Path(zf.filename))
    listed = set(manifest.members)
    present = set(names) - {fmt.MANIFEST}
    if listed != present:
        raise ArchiveInvalid(
            "archive members differ from its manifest",
            missing=sorted(listed - present)[:10],
            unlisted=sorted(present - listed)[:10],
        )
    for name, spec in sorted(manifest.members.items()):
        digest, size = hashlib.sha256(), 0
        for chunk in stream(zf, name):
            digest.update(chunk)
            size += len(chunk)
        if size != spec["size"] or digest.hexdigest() != spec["sha256"]:
            raise ArchiveInvalid(f"archive member {name!r} fails its checksum", member=name)
    return manifest


# --- import: decode -------------------------------------------------------------------------
@dataclass
class Decoded:
    manifest: fmt.Manifest
    items: list[dict[str, Any]]
    materials: list[fmt.MaterialRecord]
    vectors: fmt.VectorSet | None


def decode(zf: zipfile.ZipFile, manifest: fmt.Manifest) -> Decoded:
    items = fmt.decode_items(read_member(zf, fmt.ITEMS))
    materials = fmt.decode_materials(read_member(zf, fmt.MATERIALS))
    base = manifest.base
    model, dims = base.get("embedding_model_id"), base.get("dimensions")
    vectors = None
    for spec in manifest.vectors:
        if spec["model_id"] == model and spec["dims"] == dims:
            vectors = fmt.decode_vectors(
                spec, read_member(zf, spec["hashes"]), read_member(zf, spec["data"])
            )
    ids = {row["id"] for row in items}
    if any(m.material_id not in ids for m in materials):
        raise ArchiveInvalid("a material has no item row")
    if len({m.relative_path for m in materials}) != len(materials):
        raise ArchiveInvalid("two materials share a Concept ID")
    if model:
        have = set(vectors.hashes) if vectors else set()
        if any(not m.body_hashes <= have for m in materials):
            raise ArchiveInvalid(f"the archive lacks vectors of {model} for some chunks")
    counts = manifest.counts
    got = {
        "items": len(items),
        "materials": len(materials),
        "units": sum(len(m.chunks) for m in materials),
        "vectors": len(vectors.hashes) if vectors else 0,
        "raw_files": len(manifest.raw),
    }
    wrong = {k: (counts[k], v) for k, v in got.items() if k in counts and counts[k] != v}
    if wrong:
        raise ArchiveInvalid("archive counts differ from its manifest", counts=wrong)
    return Decoded(manifest, items, materials, vectors)
