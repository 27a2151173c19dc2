"""``export_base`` / ``import_base`` from an embedded home, and what an import refuses.

The source is always an embedded home; the target is the conftest ``kb`` (SQLite here,
PostgreSQL in the conformance run). Round trip: same items and Concept IDs, chunk offsets,
vectors bit-equal, same top results, zero embedding calls while importing. Refusals (corrupt,
truncated, traversal, link, bomb, name clash) raise a stable code and leave no base, no
directory and no index behind.
"""

from __future__ import annotations

import io
import json
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from knowbase.errors import ArchiveInvalid, ArchiveUnsafe, BaseExists, Conflict
from knowbase.portable import archive_format as fmt
from knowbase.portable import archive_seal
from knowbase.service import Knowledge
from knowbase.settings import Settings
from portable_checks import assert_same_base, build_source, count_embeddings, raw_tree, snapshot

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Knowledge]:
    kb = Knowledge(Settings(home=tmp_path / "a", test_providers=True))
    try:
        yield kb
    finally:
        kb.close()


@pytest.fixture
def target(kb: Knowledge) -> Knowledge:
    """The importing home: the conftest ``kb``, so the conformance run (``KB_TEST_BACKENDS``)
    imports into a PostgreSQL catalog with the ``postgres`` index as well."""
    return kb


@pytest.fixture
def archive(source: Knowledge, tmp_path: Path) -> Path:
    build_source(source, tmp_path / "src")
    path = tmp_path / "docs.kbz"
    source.export_base("docs", path)
    return path


def assert_nothing_left(kb: Knowledge) -> None:
    assert kb.list_bases() == []
    assert list(kb.settings.bases_dir.iterdir()) == []


def test_round_trip_from_an_embedded_home(
    source: Knowledge, target: Knowledge, archive: Path
) -> None:
    with count_embeddings(target) as calls:
        report = target.import_base(archive)
    assert calls == []  # nothing re-embedded
    before, after = snapshot(source, "docs"), snapshot(target, "docs")
    assert_same_base(before, after)
    assert report.items == len(source.list_items("docs")) == 6  # folder + 2 files, file, 2 notes
    assert report.materials == 5 and report.units == after["unit_count"]
    src_raw = raw_tree(source.rt.storage(source.get_base("docs").id).raw)
    assert raw_tree(target.rt.storage(report.base.id).raw) == src_raw
    # fresh ids: the same archive imports twice under another name
    again = target.import_base(archive, "docs copy")
    assert again.base.id != report.base.id
    assert snapshot(target, "docs copy")["searches"] == before["searches"]


def test_archive_members_and_manifest(archive: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        manifest = json.loads(zf.read(fmt.MANIFEST))
        names = set(zf.namelist())
    assert manifest["format"] == fmt.FORMAT and manifest["version"] == fmt.VERSION
    assert manifest["vectors"][0]["model_id"] == "hash:d16"
    assert set(manifest["members"]) | {fmt.MANIFEST} == names
    paths = set(manifest["raw"].values())
    assert {"reef/otters.md", "reef/kelp.txt", "rust.md"} <= paths and len(paths) == 5
    assert manifest["counts"]["raw_files"] == len(manifest["raw"])


def test_name_clash_is_refused_and_a_new_name_works(target: Knowledge, archive: Path) -> None:
    target.create_base("Docs ")
    with pytest.raises(BaseExists) as exc:
        target.import_base(archive)
    assert exc.value.code == "base_exists"
    assert [b.name for b in target.list_bases()] == ["Docs"]
    assert target.import_base(archive, "other").base.name == "other"


def test_truncated_archive_fails_and_leaves_nothing(target: Knowledge, archive: Path) -> None:
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArchiveInvalid) as exc:
        target.import_base(archive)
    assert exc.value.code == "archive_invalid"
    assert_nothing_left(target)


def _rewrite(archive: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Rewrite the archive with ``edit(name, data) -> data | None`` (None drops the member),
    sealed again as a crafted archive would be: the seal is integrity, not authenticity, so the
    member-level checks below it must hold on their own."""
    with zipfile.ZipFile(archive) as zf:
        members = [(i, zf.read(i)) for i in zf.infolist()]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as out:
        for info, data in members:
            new = edit(info.filename, data)
            if new is not None:
                out.writestr(info.filename, new)
        out.comment = archive_seal.PLACEHOLDER
    archive.write_bytes(buf.getvalue())
    archive_seal.seal(archive)


def test_a_changed_byte_fails_its_checksum(target: Knowledge, archive: Path) -> None:
    def flip(name: str, data: bytes) -> bytes:
        if name == fmt.MATERIALS:
            return data.replace(b"otters", b"0tters", 1)
        return data

    _rewrite(archive, flip)
    with pytest.raises(ArchiveInvalid, match="checksum"):
        target.import_base(archive)
    assert_nothing_left(target)


def _metadata_offsets(data: bytes, start_dir: int, comment: bytes) -> dict[str, int]:
    """Where zip metadata lies (not member data): the first local header's extra field, the
    first central-directory entry's "version made by" and compressed size, its extra field,
    and the end record's comment length."""
    assert data[:4] == b"PK\x03\x04" and data[start_dir : start_dir + 4] == b"PK\x01\x02"
    name_len = int.from_bytes(data[26:28], "little")
    assert int.from_bytes(data[28:30], "little") > 0  # ZIP64 archives carry an extra field
    cd_name = int.from_bytes(data[start_dir + 28 : start_dir + 30], "little")
    end = len(data) - 22 - len(comment)
    assert data[end : end + 4] == b"PK\x05\x06"
    return {
        "local-extra-field": 30 + name_len + 4,
        "central-version-made-by": start_dir + 4,
        "central-compressed-size": start_dir + 20,
        "central-extra-field": start_dir + 46 + cd_name + 4,
        "comment-length": end + 20,
    }


@pytest.mark.parametrize(
    "where",
    [
        "local-extra-field",
        "central-version-made-by",
        "central-compressed-size",
        "central-extra-field",
        "comment-length",
    ],
)
def test_a_flipped_byte_in_zip_metadata_is_refused(
    target: Knowledge, archive: Path, where: str
) -> None:
    """Issue 26 item 11: members' checksums alone miss these; the whole-archive seal does not."""
    with zipfile.ZipFile(archive) as zf:
        start_dir, comment = zf.start_dir, zf.comment
    data = bytearray(archive.read_bytes())
    offset = _metadata_offsets(bytes(data), start_dir, comment)[where]
    data[offset] ^= 0x01
    archive.write_bytes(bytes(data))
    with pytest.raises(ArchiveInvalid) as exc:
        target.import_base(archive)
    assert exc.value.code in ("archive_invalid", "archive_unsafe")
    assert_nothing_left(target)


def test_an_archive_of_format_version_1_still_imports(target: Knowledge, archive: Path) -> None:
    """Archives exported before the seal (version 1) import on their members' checksums."""

    def as_v1(name: str, data: bytes) -> bytes:
        if name == fmt.MANIFEST:
            return json.dumps(json.loads(data) | {"version": 1}).encode()
        return data

    with zipfile.ZipFile(archive) as zf:
        members = [(i.filename, zf.read(i)) for i in zf.infolist()]
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in members:
            out.writestr(name, as_v1(name, data))
    assert target.import_base(archive).items == 6


def test_a_traversal_member_is_refused(target: Knowledge, archive: Path) -> None:
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("../../evil.txt", b"owned")
    with pytest.raises(ArchiveUnsafe) as exc:
        target.import_base(archive)
    assert exc.value.code == "archive_unsafe"
    assert not (target.settings.home.parent / "evil.txt").exists()
    assert_nothing_left(target)


def test_a_manifest_path_outside_raw_is_refused(target: Knowledge, archive: Path) -> None:
    def escape(name: str, data: bytes) -> bytes:
        if name == fmt.MANIFEST:
            doc = json.loads(data)
            first = sorted(doc["raw"])[0]
            doc["raw"][first] = "../../../evil.txt"
            return json.dumps(doc).encode()
        return data

    _rewrite(archive, escape)
    with pytest.raises(ArchiveUnsafe, match="outside the base"):
        target.import_base(archive)
    assert_nothing_left(target)


def test_a_symlink_member_is_refused(target: Knowledge, archive: Path) -> None:
    with zipfile.ZipFile(archive, "a") as zf:
        info = zipfile.ZipInfo("raw/999")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(ArchiveUnsafe, match="not a regular file"):
        target.import_base(archive)
    assert_nothing_left(target)


def test_a_decompression_bomb_is_refused(target: Knowledge, archive: Path) -> None:
    with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("raw/998", b"\0" * (16 << 20))  # 16 MiB of zeros deflate ~1000-fold
    with pytest.raises(ArchiveUnsafe, match="expands"):
        target.import_base(archive)
    assert_nothing_left(target)


def test_size_caps_apply_before_reading(target: Knowledge, archive: Path) -> None:
    from knowbase.portable.transfer import import_base

    with pytest.raises(ArchiveUnsafe, match="at most"):
        import_base(target.rt, archive, caps=fmt.Caps(max_member_bytes=64))
    with pytest.raises(ArchiveUnsafe, match="expands to"):
        import_base(target.rt, archive, caps=fmt.Caps(max_total_bytes=1024))
    assert_nothing_left(target)


def test_a_failure_while_writing_removes_the_base(target: Knowledge, archive: Path) -> None:
    # the base row, raw/ files and index are written when the last step fails
    from knowbase.portable import transfer as portable

    original = portable._insert_items

    def boom(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError("disk full")

    portable._insert_items = boom  # the last write step fails
    try:
        with pytest.raises(OSError, match="disk full"):
            target.import_base(archive)
    finally:
        portable._insert_items = original
    assert_nothing_left(target)


def test_export_refuses_items_in_flight(source: Knowledge, tmp_path: Path) -> None:
    base = source.create_base("busy", file_processor_id=None)
    source.add(base.id, [source_note()])  # no wait: the item stays active, its job pending
    with pytest.raises(Conflict, match="still being indexed or deleted"):
        source.export_base("busy", tmp_path / "busy.kbz")
    assert not (tmp_path / "busy.kbz").exists()
    assert not (tmp_path / "busy.kbz.part").exists()


def source_note():  # type: ignore[no-untyped-def]
    from knowbase.operations.add.inputs import AddInput

    return AddInput.note("Still indexing.")


def test_bm25_only_base_round_trips(source: Knowledge, target: Knowledge, tmp_path: Path) -> None:
    base = source.create_base("plain", file_processor_id=None)
    source.add_note(base.id, "Alpacas give soft wool.")
    source.export_base("plain", tmp_path / "plain.kbz")
    report = target.import_base(tmp_path / "plain.kbz")
    assert report.vectors == 0 and report.base.embedding_model_id is None
    assert target.search("plain", "alpacas").results[0].text == "Alpacas give soft wool."


def test_two_paths_naming_one_file_are_refused(target: Knowledge, archive: Path) -> None:
    def alias(name: str, data: bytes) -> bytes:
        if name == fmt.MANIFEST:
            doc = json.loads(data)
            first, second = sorted(doc["raw"])[:2]
            doc["raw"][first], doc["raw"][second] = "x/y.md", "x/./y.md"
            return json.dumps(doc).encode()
        return data

    _rewrite(archive, alias)
    with pytest.raises(ArchiveInvalid, match="collide"):
        target.import_base(archive)
    assert_nothing_left(target)


def test_a_missing_archive_is_not_found(target: Knowledge, tmp_path: Path) -> None:
    from knowbase.errors import NotFound

    with pytest.raises(NotFound):
        target.import_base(tmp_path / "nope.kbz")


def test_import_into_the_qdrant_backend(source: Knowledge, archive: Path, tmp_path: Path) -> None:
    """Qdrant in its local mode (in-process, not a server): same hits as the source."""
    pytest.importorskip("qdrant_client")
    from knowbase.index.backends import close_qdrant_clients

    with Knowledge(Settings(home=tmp_path / "q", test_providers=True)) as kb:
        try:
            with count_embeddings(kb) as calls:
                report = kb.import_base(archive, index_backend="qdrant")
            assert calls == [] and report.base.index_backend == "qdrant"
            assert snapshot(kb, "docs")["searches"] == snapshot(source, "docs")["searches"]
        finally:
            close_qdrant_clients()
