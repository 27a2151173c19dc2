"""``kb serve --watch``: a real server keeps every base's folders current (issue 15 item 2)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from _serve import kb_serve
from knowbase.interfaces.watch import _owners
from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge
from knowbase.settings import Settings

pytestmark = pytest.mark.timeout(120)


def _found(url: str, base: str, word: str, within_s: float = 20) -> float:
    start = time.monotonic()
    while time.monotonic() - start < within_s:
        got = httpx.get(f"{url}/bases/{base}/search", params={"q": word}, timeout=10).json()
        if any(word in r["text"] for r in got.get("results", [])):
            return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"{word!r} not searchable in {base} after {within_s} s")


def test_serve_watch_keeps_every_base_current(tmp_path: Path) -> None:
    home = tmp_path / "home"
    folders = {}
    with Knowledge(Settings(home=home, test_providers=True)) as kb:
        for name in ("alpha", "beta"):
            folder = tmp_path / name
            folder.mkdir()
            (folder / "a.md").write_text(f"{name} begins with quiet quokkas", encoding="utf-8")
            base = kb.create_base(name, embedding_model_id="hash:d32", file_processor_id=None)
            kb.add(base.id, [AddInput.directory(folder)], wait=True)
            folders[name] = folder
    with kb_serve(home, "--watch") as url:
        time.sleep(1.5)  # the watcher's first sync and its watch are set
        (folders["alpha"] / "a.md").write_text("alpha now mentions loud lemurs", encoding="utf-8")
        (folders["beta"] / "new.md").write_text("beta gained bold badgers", encoding="utf-8")
        assert _found(url, "alpha", "lemurs") < 20
        assert _found(url, "beta", "badgers") < 20
        items = httpx.get(f"{url}/bases/alpha/items").json()
        assert sum(i["type"] == "file" for i in items) == 1  # edited in place, not duplicated


def test_a_change_syncs_the_bases_watching_above_it() -> None:
    roots = {"a": {Path("/data/a")}, "b": {Path("/data/b")}, "ab": {Path("/data")}}
    assert _owners({Path("/data/a/x.md")}, roots) == ["a", "ab"]
    assert _owners({Path("/data/b")}, roots) == ["b", "ab"]
    assert _owners({Path("/elsewhere/x.md")}, roots) == []
