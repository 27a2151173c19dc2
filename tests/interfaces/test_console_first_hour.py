"""Issue 25 (console): what a newcomer meets in ``kb serve``'s console, in Debian's chromium.

Uploads keep the good files and name the rejected ones; a refused URL is refused at once with a
hint that names a setting the console has; ``/docs`` needs no network; the base page asks for
nothing that is not there; counts add up; a folder with one failed file is not "failed"; Retry is
offered only where it can help; highlights mark whole words, never stopwords.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _serve import free_port, kb_serve

CHROMIUM = os.environ.get("KNOWBASE_CHROMIUM", "/usr/bin/chromium")
playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
    pytest.skip(
        f"chromium not found at {CHROMIUM} (apt-get install chromium)", allow_module_level=True
    )

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("first-hour") / "home"
    with kb_serve(home) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser, served: str) -> Iterator[object]:  # type: ignore[no-untyped-def]
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.on("dialog", lambda d: d.accept())
    tab.requested = []  # type: ignore[attr-defined]
    tab.failed = []  # type: ignore[attr-defined]
    tab.on("request", lambda r: tab.requested.append(r.url))  # type: ignore[attr-defined]
    tab.on(
        "response",
        lambda r: tab.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None,  # type: ignore[attr-defined]
    )
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    yield tab
    tab.close()
    assert errors == []


def goto(page, url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(url)
    page.wait_for_selector("body[data-ready]")


def create(url: str, name: str) -> None:
    httpx.post(url + "/bases", json={"name": name}).raise_for_status()


def test_uploads_keep_the_good_files_and_name_the_rejected(page, served, tmp_path) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    create(served, "uploads")
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "a.md").write_text("# A\n\nAlpha text.\n")
    (loose / "b.txt").write_text("Beta text.")
    (loose / "tool.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00")  # binary, not text
    goto(page, served + "/console/bases/uploads")
    page.set_input_files("#pick-files", [str(p) for p in sorted(loose.iterdir())])
    notice = page.locator("#notice")
    expect_(notice).to_contain_text("Added 2 file(s).")
    expect_(notice).to_contain_text("Not added: 1 — tool.bin (unsupported knowledge file type")
    expect_(page.locator('#items-table tr[data-title="a.md"]')).to_have_count(1)

    folder = tmp_path / "kit"
    (folder / "sub").mkdir(parents=True)
    (folder / "one.md").write_text("One.")
    (folder / "sub" / "two.md").write_text("Two.")
    (folder / "x.exe").write_bytes(b"MZ")
    page.set_input_files("#pick-folder", str(folder))
    expect_(notice).to_contain_text("Added 2 file(s).")
    expect_(notice).to_contain_text("kit/x.exe")
    expect_(page.locator('#items-table tr[data-title="two.md"]')).to_have_count(1, timeout=30_000)
    # the API answers the same: the good files in, the rejected ones listed
    files = [("files", ("c.md", b"Gamma.")), ("files", ("d.xyz", b"?\x00\x01"))]
    out = httpx.post(served + "/bases/uploads/uploads", files=files).json()
    assert [i["title"] for i in out["items"]] == ["c.md"]
    assert [r["name"] for r in out["rejected"]] == ["d.xyz"]


def test_a_refused_url_is_refused_at_once_with_a_setting_that_exists(page, served) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    create(served, "pages")
    goto(page, served + "/console/bases/pages")
    page.get_by_label("URL or sitemap").fill("http://127.0.0.1:9/private")
    page.get_by_role("button", name="Add URL").click()
    notice = page.locator("#notice")
    expect_(notice).to_contain_text("invalid_url")
    expect_(notice).to_contain_text("console's base Settings")
    assert httpx.get(served + "/bases/pages/items").json() == []
    # the setting the hint names is on this page
    page.get_by_label("Fetch local and private addresses").check()
    page.get_by_role("button", name="Save settings").click()
    expect_(notice).to_have_text("Settings saved.")
    assert httpx.get(served + "/bases/pages").json()["allow_local_urls"] is True


def test_docs_base_pages_and_search_list_ask_only_for_what_exists(page, served) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    goto(page, served + "/docs")
    expect_(page.locator("h1")).to_have_text("HTTP API")
    expect_(page.locator("main")).to_contain_text("/bases/{base}/search")
    assert all(u.startswith(served) for u in page.requested), page.requested  # no CDN
    for n in range(4):
        create(served, f"listed-{n}")
    goto(page, served + "/console/bases/listed-0")
    page.wait_for_timeout(500)  # the settings card's requests
    assert not any("/model-switch" in u for u in page.requested), page.requested
    assert page.failed == [], page.failed
    goto(page, served + "/console/bases/no-such-base")
    assert page.evaluate("document.body.dataset.missing") == "1"
    expect_(page.locator("#dropzone")).to_be_hidden()
    expect_(page.locator("#base-info")).to_contain_text('There is no base named "no-such-base"')
    goto(page, served + "/console/search")
    # every base is a checkbox in view (issue 42: chips, not a 3-row list box)
    shown = page.locator("#search-bases input[type=checkbox]")
    count = len(httpx.get(served + "/bases").json())
    expect_(shown).to_have_count(count)
    for n in range(count):
        expect_(shown.nth(n)).to_be_visible()


def test_counts_add_up_partial_folders_and_retry_only_where_it_helps(  # type: ignore[no-untyped-def]
    page, served, tmp_path
) -> None:
    expect_ = playwright_api.expect
    create(served, "counts")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "full.md").write_text("# Full\n\nSome text.\n")
    (folder / "empty.md").write_text("")
    goto(page, served + "/console/bases/counts")
    page.set_input_files("#pick-folder", str(folder))
    text = page.locator("#progress-text")
    expect_(text).to_have_text(
        "All done: 2 of 2 files done (1 completed, 1 failed), 0 active · 1 folder(s)",
        timeout=60_000,
    )
    folder_row = page.locator('#items-table tr[data-title="notes"]')
    expect_(folder_row.locator(".badge")).to_have_text("1 of 2 files failed")
    expect_(folder_row).not_to_contain_text("child_failed")
    empty = page.locator('#items-table tr[data-title="empty.md"]')
    expect_(empty.locator(".error-code")).to_have_text("no_text_extracted")
    expect_(empty.get_by_role("button", name="Retry")).to_have_count(0)
    expect_(empty.locator(".retry-blocked")).to_contain_text("empty")
    # the bases page says what the state means, not "completed" for everything
    create(served, "nothing-yet")
    goto(page, served + "/")
    expect_(page.locator('#bases-table tr[data-base="counts"]')).to_contain_text("ready, ")
    expect_(page.locator('#bases-table tr[data-base="counts"] .badge')).to_contain_text("failed")
    expect_(page.locator('#bases-table tr[data-base="nothing-yet"] .badge')).to_have_text("empty")


def test_highlights_mark_whole_words_and_skip_stopwords(page, served) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    create(served, "court")
    note = {"inputs": [{"type": "note", "content": "The dispositions of the court is final."}]}
    httpx.post(served + "/bases/court/items", json=note).raise_for_status()
    deadline = time.monotonic() + 30
    while httpx.get(served + "/bases/court/items").json()[0]["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    goto(page, served + "/console/search?base=court&q=disposition%20is")
    hit = page.locator(".result").first
    expect_(hit).to_be_visible(timeout=30_000)
    assert hit.locator("mark").all_inner_texts() == ["dispositions"]


def test_kb_serve_prints_the_console_address(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "knowbase.interfaces.cli", "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(20)
    assert f"knowbase console: http://127.0.0.1:{port}/" in first, first


def test_the_add_cards_tags_label_notes_files_and_folders(page, served, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 27: tags set in the console at add time reach the items and the tag filter."""
    expect_ = playwright_api.expect
    create(served, "tagged")
    goto(page, served + "/console/bases/tagged")
    page.get_by_label("Tags").fill("team, ops")
    page.get_by_label("Note text").fill("The alpaca VPN key rotates weekly.")
    page.get_by_role("button", name="Add note").click()
    expect_(page.locator("#notice")).to_contain_text("Added a note.")
    (tmp_path / "f.md").write_text("Alpaca file.")
    page.set_input_files("#pick-files", [str(tmp_path / "f.md")])
    expect_(page.locator("#notice")).to_contain_text("Added 1 file(s).")
    (tmp_path / "dir" / "sub").mkdir(parents=True)
    (tmp_path / "dir" / "sub" / "g.md").write_text("Alpaca folder file.")
    page.evaluate("document.getElementById('notice').textContent = ''")  # wait for a new one
    page.set_input_files("#pick-folder", str(tmp_path / "dir"))
    expect_(page.locator("#notice")).to_contain_text("Added 1 file(s).")
    roots = [i for i in httpx.get(served + "/bases/tagged/items").json() if not i["group_id"]]
    assert len(roots) == 3 and all(i["tags"] == ["ops", "team"] for i in roots)
    deadline = time.monotonic() + 60
    while True:
        found = httpx.post(
            served + "/bases/tagged/search", json={"query": "alpaca", "tags": ["ops"]}
        ).json()["results"]
        if len(found) == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(found) == 3
