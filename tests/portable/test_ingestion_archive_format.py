"""The archive format's pure parts: vectors round-trip bit for bit; names outside the layout,
links and bombs are refused; chunks must be the slices their hashes say."""

from __future__ import annotations

import json
import stat

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowbase.errors import ArchiveInvalid, ArchiveUnsafe
from knowbase.portable import archive_format as fmt
from knowbase.units.hashing import text_hash

CAPS = fmt.Caps()
REGULAR = (stat.S_IFREG | 0o644) << 16


@given(
    st.lists(
        st.lists(
            st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=3, max_size=3
        ),
        max_size=20,
        unique_by=lambda v: tuple(v),
    )
)
def test_vectors_round_trip_bit_for_bit(rows: list[list[float]]) -> None:
    vectors = {text_hash(str(i)): np.asarray(r, dtype="<f4") for i, r in enumerate(rows)}
    hashes_data, rows_data = fmt.encode_vectors(vectors, 3)
    spec = {"model_id": "hash:d3", "dims": 3, "count": len(vectors)}
    back = fmt.decode_vectors(spec, hashes_data, rows_data)
    assert {h: back.rows[i].tobytes() for i, h in enumerate(back.hashes)} == {
        h: v.tobytes() for h, v in vectors.items()
    }


def test_vector_data_of_the_wrong_length_is_invalid() -> None:
    hashes, rows = fmt.encode_vectors({text_hash("a"): np.ones(3, "<f4")}, 3)
    with pytest.raises(ArchiveInvalid):
        fmt.decode_vectors({"model_id": "m", "dims": 3, "count": 1}, hashes, rows[:-4])


@given(st.text(min_size=1, max_size=40))
def test_only_layout_names_pass(name: str) -> None:
    layout = name in ("manifest.json", "items.jsonl", "materials.jsonl") or (
        name.startswith("raw/") and name[4:].isascii() and name[4:].isdigit()
    )
    if layout or name.startswith("vectors/"):
        return
    with pytest.raises(ArchiveUnsafe):
        fmt.check_entry(name, 1, 1, REGULAR, CAPS)


@pytest.mark.parametrize(
    "name", ["../raw/1", "/raw/1", "raw/../../x", "raw/1/", "raw\\1", "raw/-1"]
)
def test_escaping_names_are_refused(name: str) -> None:
    with pytest.raises(ArchiveUnsafe):
        fmt.check_entry(name, 1, 1, REGULAR, CAPS)


def test_links_directories_and_bombs_are_refused() -> None:
    fmt.check_entry("raw/1", 10, 10, REGULAR, CAPS)
    fmt.check_entry("raw/1", 10, 10, 0, CAPS)  # no mode recorded (other zip writers)
    for mode in (stat.S_IFLNK | 0o777, stat.S_IFDIR | 0o755, stat.S_IFIFO | 0o644):
        with pytest.raises(ArchiveUnsafe):
            fmt.check_entry("raw/1", 10, 10, mode << 16, CAPS)
    with pytest.raises(ArchiveUnsafe, match="expands"):
        fmt.check_entry("raw/1", 300 << 20, 1 << 20, REGULAR, CAPS)
    with pytest.raises(ArchiveUnsafe, match="at most"):
        fmt.check_entry("raw/1", 5 << 30, 5 << 30, REGULAR, CAPS)


def _material(units: list[dict]) -> bytes:
    row = {
        "material_id": "m",
        "relative_path": "a.md",
        "content_text": "Hello world",
        "units": units,
    }
    return json.dumps(row).encode()


def test_a_chunk_must_be_the_slice_its_hash_names() -> None:
    good = {"i": 0, "s": 0, "e": 5, "loc": {}, "h": text_hash("Hello")}
    [m] = fmt.decode_materials(_material([good]))
    assert m.chunks[0].text == "Hello" and m.body_hashes == {text_hash("Hello")}
    with pytest.raises(ArchiveInvalid, match="hash"):
        fmt.decode_materials(_material([{**good, "e": 4}]))
    with pytest.raises(ArchiveInvalid, match="outside"):
        fmt.decode_materials(_material([{**good, "e": 99}]))


def test_a_concept_id_outside_raw_is_unsafe() -> None:
    row = {"material_id": "m", "relative_path": "../x.md", "content_text": "", "units": []}
    with pytest.raises(ArchiveUnsafe):
        fmt.decode_materials(json.dumps(row).encode())


def test_manifest_of_another_version_is_refused() -> None:
    doc = fmt.Manifest(base={"name": "x"}, source_base_id="b", members={}, raw={}, vectors=[])
    data = doc.to_dict() | {"version": 99}
    with pytest.raises(ArchiveInvalid, match="version 99"):
        fmt.parse_manifest(json.dumps(data).encode())
    with pytest.raises(ArchiveInvalid, match="not a knowbase"):
        fmt.parse_manifest(b'{"format": "zip"}')
