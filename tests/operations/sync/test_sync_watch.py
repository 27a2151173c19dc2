"""``kb sync --watch``: an edit shows up in search within seconds; the folder may come and go."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from knowbase.catalog.models import Base
from knowbase.interfaces.watch import watch_base
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge

pytestmark = pytest.mark.timeout(90)


def _found(kb: Knowledge, base: Base, word: str, within_s: float = 15) -> float:
    start = time.monotonic()
    while time.monotonic() - start < within_s:
        if any(word in h.text for h in kb.search(base.id, word).results):
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"{word!r} not searchable after {within_s} s")


def test_watch_sees_an_edit_and_a_folder_that_vanishes_and_returns(
    kb: Knowledge, hash_base: Base, tmp_path: Path
) -> None:
    root = tmp_path / "w"
    root.mkdir()
    (root / "a.md").write_text("quiet quokkas", encoding="utf-8")
    kb.add(hash_base.id, [AddInput.directory(root)], wait=True)
    stop = threading.Event()
    reports: list = []
    watcher = threading.Thread(
        target=watch_base,
        args=(kb, hash_base.id),
        kwargs={"stop": stop, "on_report": reports.append},
    )
    watcher.start()
    try:
        time.sleep(1.0)
        (root / "a.md").write_text("quiet quokkas meet loud lemurs", encoding="utf-8")
        assert _found(kb, hash_base, "lemurs") < 10
        shutil.rmtree(root)
        time.sleep(1.5)
        root.mkdir()
        (root / "a.md").write_text("back again with bold badgers", encoding="utf-8")
        assert _found(kb, hash_base, "badgers") < 15
    finally:
        stop.set()
        watcher.join(10)
    assert not watcher.is_alive()
    files = [i for i in kb.list_items(hash_base.id) if i.type == "file"]
    assert len(files) == 1  # edited in place, never duplicated, nothing pruned
