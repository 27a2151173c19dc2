"""``copy_synced``: a staged copy is the source's exact bytes, never clobbers, and copies
where ``sendfile`` cannot (the portable fallback)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from knowbase.files import staging
from knowbase.files.staging import copy_synced

SIZES = [0, 1, 4096, (1 << 20) + 7, 3 * (1 << 20)]  # empty, tiny, and over one sendfile chunk


@pytest.mark.parametrize("size", SIZES)
def test_the_copy_holds_the_sources_bytes(tmp_path: Path, size: int) -> None:
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(size))
    copy_synced(src, tmp_path / "dest.bin")
    assert (tmp_path / "dest.bin").read_bytes() == src.read_bytes()


def test_an_existing_destination_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "src").write_text("new")
    (tmp_path / "dest").write_text("old")
    with pytest.raises(FileExistsError):
        copy_synced(tmp_path / "src", tmp_path / "dest")
    assert (tmp_path / "dest").read_text() == "old"


@pytest.mark.parametrize("size", SIZES)
def test_without_sendfile_between_files_it_copies_in_user_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    def no_sendfile(*args: object) -> int:
        raise OSError(errno.ENOTSOCK, "Socket operation on non-socket")  # macOS's answer

    monkeypatch.setattr(staging.os, "sendfile", no_sendfile)
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(size))
    copy_synced(src, tmp_path / "dest.bin")
    assert (tmp_path / "dest.bin").read_bytes() == src.read_bytes()


def test_a_read_error_midway_is_raised_not_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.sendfile
    calls = {"n": 0}

    def failing_second_call(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real(out_fd, in_fd, offset, count)

    monkeypatch.setattr(staging.os, "sendfile", failing_second_call)
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 * (1 << 20)))
    with pytest.raises(OSError) as info:
        copy_synced(src, tmp_path / "dest.bin")
    assert info.value.errno == errno.EIO
