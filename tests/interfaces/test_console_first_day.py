"""Issue 42 (console): the first day in ``kb serve``'s console, in Debian's chromium.

Search shows a snippet with "More", Markdown rendered (as text only: nothing a document holds
runs) and where the threshold cut; the base picker is checkboxes and "Back to search" keeps
every base; the progress counts chunks; a 150-item base page folds, filters and pages, with
its counts at the top and badges that do not wrap; settings show the basic ones first and
only what applies. A failing test leaves a screenshot of its page (the path is printed).

Screenshots for people go to ``$KNOWBASE_CONSOLE_SCREENSHOTS`` when set (docs/ holds the ones
committed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _serve import kb_serve

CHROMIUM = os.environ.get("KNOWBASE_CHROMIUM", "/usr/bin/chromium")
playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
    pytest.skip(
        f"chromium not found at {CHROMIUM} (apt-get install chromium)", allow_module_level=True
    )

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 375, "height": 800}
SHOTS = os.environ.get("KNOWBASE_CONSOLE_SCREENSHOTS")

HANDBOOK = """# Office handbook

## Kitchen

The kitchen is shared by every team on the floor. Please keep it tidy, wash your cups and
label what you leave in the fridge; anything unlabelled is thrown out on Fridays. The kettle,
the toaster and the microwave are checked by facilities once a year, and the water filter is
changed every quarter by the building's contractor, who also services the dishwasher.

- Wash your cups
- Label your food

| Task | How often |
| --- | --- |
| clean the fridge | every Friday |
| descale the coffee machine | every 6 weeks |
"""

SCRIPTED = 'A note that holds <img src=x onerror="document.title=1"> and <b>tags</b> as text.'


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("first-day") / "home"


@pytest.fixture(scope="module")
def served(home: Path) -> Iterator[str]:
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
def page(browser, request, tmp_path: Path) -> Iterator[object]:  # type: ignore[no-untyped-def]
    tab = browser.new_page(viewport=DESKTOP)
    tab.on("dialog", lambda d: d.accept())
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    failed_before = request.session.testsfailed
    yield tab
    if request.session.testsfailed > failed_before:  # this test failed: show its page
        shot = tmp_path / f"{request.node.name}.png"
        tab.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the failing page: {shot}")
    tab.close()
    assert errors == []


def goto(page, url: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(url)
    page.wait_for_selector("body[data-ready]")


def wait_for(check, timeout_s: float = 60):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        out = check()
        if out:
            return out
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def settled(url: str, base: str, count: int, timeout_s: float = 90) -> list[dict]:
    def check() -> list[dict] | None:
        items = httpx.get(f"{url}/bases/{base}/items").json()
        files = [i for i in items if i["type"] != "directory"]
        done = all(i["status"] in ("completed", "failed") for i in items)
        return items if len(files) >= count and done else None

    return wait_for(check, timeout_s)


def make_base(url: str, name: str, model: str | None = None, **settings: object) -> None:
    body: dict[str, object] = {"name": name, **settings}
    if model:
        body["embedding_model_id"] = model
    httpx.post(url + "/bases", json=body).raise_for_status()


def add_notes(url: str, base: str, *notes: tuple[str, str]) -> None:
    inputs = [{"type": "note", "title": t, "content": c} for t, c in notes]
    httpx.post(f"{url}/bases/{base}/items", json={"inputs": inputs}).raise_for_status()
    settled(url, base, len(notes))


def upload_folder(url: str, base: str, files: dict[str, str]) -> None:
    parts = [("files", (Path(p).name, body.encode())) for p, body in files.items()]
    data = {"paths": list(files)}
    r = httpx.post(f"{url}/bases/{base}/uploads/folders", files=parts, data=data, timeout=60)
    r.raise_for_status()


def shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / name), full_page=True)


# --- item 14: search results -------------------------------------------------------------------
def test_search_shows_a_rendered_snippet_with_more_and_the_cut(page, served) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    # a threshold that keeps the handbook (~0.3) and cuts the weak matches (~0.1)
    make_base(served, "handbook", threshold=0.2)
    add_notes(
        served,
        "handbook",
        ("Handbook", HANDBOOK),
        ("Scripted", SCRIPTED),
        ("Lobby", "The coffee is served at noon in the lobby."),
        ("ML", "Machine learning notes."),
    )
    goto(page, served + "/console/search?base=handbook&q=how%20often%20descale%20coffee%20machine")
    hit = page.locator(".result").first
    expect_(hit).to_be_visible(timeout=30_000)
    # the snippet is the matched row under its table's header, rendered as a table
    table = hit.locator(".passage table")
    expect_(table.locator("th").first).to_have_text("Task")
    expect_(table).to_contain_text("every 6 weeks")
    expect_(hit.locator(".passage mark").first).to_be_visible()
    assert "| ---" not in hit.inner_text() and "---|" not in hit.inner_text()
    # the opening paragraph is not in the snippet; "More" shows the whole passage, rendered
    expect_(hit.locator(".passage")).not_to_contain_text("shared by every team")
    hit.get_by_role("button", name="More").click()
    expect_(hit.locator(".passage")).to_contain_text("shared by every team")
    expect_(hit.locator(".passage h4").first).to_have_text("Kitchen")  # "## Kitchen"
    expect_(hit.locator(".passage li").first).to_have_text("Wash your cups")
    hit.get_by_role("button", name="Less").click()
    expect_(hit.locator(".passage")).not_to_contain_text("shared by every team")
    # where the threshold cut: a note after the last result
    cut = page.locator("#results .cut")
    expect_(cut).to_contain_text(re.compile(r"Threshold 0\.2 \(this base's threshold\): [1-9]"))
    expect_(cut).to_contain_text("weaker hit(s) below it are not shown")
    assert page.locator("#results > li").last.get_attribute("class") == "cut"
    shot(page, "search-desktop.png")
    page.set_viewport_size(PHONE)
    shot(page, "search-phone.png")
    assert table.locator("thead").is_visible()  # still a table with its header on a phone
    page.set_viewport_size(DESKTOP)
    # the viewer renders the table too, and the cited passage is marked
    hit.get_by_role("link").click()
    expect_(page.locator("#cited")).to_be_visible()
    expect_(page.locator("#doc-body table")).to_contain_text("every 6 weeks")
    assert "| ---" not in page.locator("#doc-body").inner_text()


def test_markup_in_a_document_is_shown_as_text(page, served) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    goto(page, served + "/console/search?base=handbook&q=note%20holds%20tags")
    hit = page.locator('.result:has-text("holds")').first
    expect_(hit).to_be_visible(timeout=30_000)
    expect_(hit.locator(".passage")).to_contain_text("<img src=x")
    assert hit.locator(".passage img, .passage b").count() == 0
    assert page.title() != "1"


# --- item 17: base picker, back to search, progress in chunks ----------------------------------
def test_the_base_picker_is_checkboxes_and_back_keeps_every_base(page, served) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    for name, text in (("first", "Otters float on their backs."), ("second", "Otters hold hands.")):
        make_base(served, name)
        add_notes(served, name, (name, text))
    goto(page, served + "/console/search")
    page.get_by_label("first", exact=True).check()
    page.get_by_label("second", exact=True).check()
    page.get_by_label("Query").fill("otters")
    page.get_by_role("button", name="Search").click()
    expect_(page.locator(".result")).to_have_count(2)
    # each base's threshold, named, after the merged list
    cut = page.locator("#results .cut")
    expect_(cut).to_contain_text("first: Threshold 0.05 (the default threshold)")  # issue 40 floor
    expect_(cut).to_contain_text("second: Threshold 0.05")
    page.locator(".result a.open").first.click()
    expect_(page.locator("#cited")).to_be_visible()
    page.get_by_role("link", name="Back to search").click()
    page.wait_for_selector("body[data-ready]")
    expect_(page.get_by_label("first", exact=True)).to_be_checked()
    expect_(page.get_by_label("second", exact=True)).to_be_checked()
    expect_(page.locator(".result")).to_have_count(2)


def test_progress_counts_chunks_while_a_model_embeds(page, served) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    make_base(served, "slow", "hash:d64?delay=1")  # 10 chunks a second
    body = " ".join(["river mountain coffee policy"] * 900)
    files = {f"long/doc{n:02d}.md": f"# Doc {n}\n\n{body}\n" for n in range(40)}
    goto(page, served + "/console/bases/slow")
    upload_folder(served, "slow", files)
    chunks = page.locator("#progress-chunks")
    expect_(chunks).to_contain_text("embedded", timeout=30_000)
    expect_(chunks).to_contain_text("Chunks:")
    expect_(chunks).to_contain_text("chunks/s", timeout=30_000)
    answer = httpx.get(served + "/bases/slow/progress").json()
    assert answer["busy"] and answer["chunks_estimated"] >= answer["chunks_done"] > 0, answer
    httpx.post(served + "/bases/slow/jobs/cancel").raise_for_status()


# --- item 15: a 150-item base page -------------------------------------------------------------
@pytest.fixture(scope="module")
def big(served: str) -> str:
    make_base(served, "big")
    files = {}
    for n in range(150):
        folder = ("alpha", "beta", "gamma")[n % 3]
        files[f"corpus/{folder}/file-{n:03d}.md"] = f"# File {n}\n\nText number {n}.\n"
    upload_folder(served, "big", files)
    settled(served, "big", 150)
    return "big"


def test_a_150_item_base_page_folds_filters_and_pages(page, served, big) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    goto(page, served + f"/console/bases/{big}")
    counts = page.locator("#item-counts")
    expect_(counts.locator('[data-status="completed"]')).to_contain_text("150")
    expect_(counts.locator('[data-status="folder"]')).to_contain_text("4")
    # the nested folders start folded: the page is short
    expect_(page.locator("#items-table tbody tr")).to_have_count(4)
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 3500, height
    shot(page, "base-150-desktop.png")
    # unfold one folder: its 50 files are one page
    page.get_by_role("button", name="Unfold alpha (50 files)").click()
    expect_(page.locator('#items-table tr[data-title="file-000.md"]')).to_have_count(1)
    expect_(page.locator("#items-range")).to_contain_text("Rows 1–50 of 54")
    page.get_by_role("button", name="Next").click()
    expect_(page.locator("#items-range")).to_contain_text("Rows 51–54 of 54")
    page.get_by_role("button", name="Unfold beta (50 files)").click()
    expect_(page.locator("#items-range")).to_contain_text("Rows 51–100 of 104")
    # the filter finds a file in a folded folder, with its folders
    page.get_by_label("Filter items").fill("file-149")
    expect_(page.locator('#items-table tr[data-title="file-149.md"]')).to_have_count(1)
    expect_(page.locator("#items-table tbody tr")).to_have_count(3)  # corpus, gamma, the file
    page.get_by_label("Filter items").fill("")
    # a status count filters too
    counts.locator('[data-status="failed"]').click()
    expect_(page.locator("#items-none")).to_be_visible()
    counts.locator('[data-status="failed"]').click()
    # on a phone the badges stay on one line
    page.set_viewport_size(PHONE)
    page.get_by_role("button", name="Fold alpha (50 files)").click()
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 9000, height
    wide = page.evaluate(
        "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right"
        " > innerWidth + 1).map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 5)"
    )
    assert wide == [], wide  # nothing runs off the side of a phone
    page.get_by_role("button", name="Fold beta (50 files)").click()
    expect_(page.locator("#items-table tbody tr")).to_have_count(4)
    shot(page, "base-150-phone.png")
    assert page.evaluate("document.documentElement.scrollHeight") < 4000
    for box in page.locator("#items-table .badge").evaluate_all(
        "els => els.map(e => [e.getBoundingClientRect().height, "
        "parseFloat(getComputedStyle(e).lineHeight) || 20])"
    ):
        assert box[0] < 1.6 * box[1], box


# --- item 16: settings -------------------------------------------------------------------------
def test_settings_show_the_basics_first_and_only_what_applies(page, served, tmp_path) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    make_base(served, "plain")
    goto(page, served + "/console/bases/plain")
    advanced = page.locator("#settings-advanced")
    expect_(page.get_by_label("Chunk size (tokens)")).to_be_visible()
    expect_(page.get_by_label("Rerank model")).to_be_hidden()  # under Advanced, closed
    advanced.locator("summary").click()
    expect_(page.get_by_label("Rerank model")).to_be_visible()
    # a BM25-only base has one lane: nothing to fuse
    for field in ("#set-fusion", "#set-fusion-alpha", "#set-rrf-k"):
        expect_(page.locator(field)).to_have_count(1)
        expect_(page.locator(field)).to_be_hidden()
    # a checkbox sits beside its label, on the same line
    box = page.get_by_label("Sync deletes items whose files vanished")
    text = page.get_by_text("Sync deletes items whose files vanished")
    b, t = box.bounding_box(), text.bounding_box()
    assert b["x"] < t["x"] and abs((b["y"] + b["height"] / 2) - (t["y"] + t["height"] / 2)) < 8
    # the model field's placeholder is not a model id; restore explains itself, imports a file
    assert ":" not in (page.locator("#set-embedding").get_attribute("placeholder") or "")
    expect_(page.locator("#settings")).to_contain_text("No file is needed")
    expect_(page.get_by_label("Archive file")).to_have_attribute("type", "file")
    # chunk size below the overlap: said plainly, nothing sent
    page.get_by_label("Chunk size (tokens)").fill("5")
    page.get_by_role("button", name="Save settings").click()
    expect_(page.locator("#settings-error")).to_contain_text("cannot share 200 tokens")
    assert httpx.get(served + "/bases/plain").json()["chunk_size"] == 1024
    # a base with a model: fusion shows, and the weight that applies to the chosen fusion
    make_base(served, "hybrid", "hash:d64")
    goto(page, served + "/console/bases/hybrid")
    page.locator("#settings-advanced summary").click()
    expect_(page.locator("#set-fusion")).to_be_visible()
    expect_(page.locator("#set-fusion-alpha")).to_be_visible()
    expect_(page.locator("#set-rrf-k")).to_be_hidden()
    page.locator("#set-fusion").select_option("rrf")
    expect_(page.locator("#set-rrf-k")).to_be_visible()
    expect_(page.locator("#set-fusion-alpha")).to_be_hidden()


def test_an_archive_is_imported_from_a_file_picker(page, served, home, tmp_path) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    make_base(served, "exported")
    add_notes(served, "exported", ("Gulls", "Gulls nest on the roof."))
    archive = tmp_path / "exported.zip"
    env = {**os.environ, "KNOWBASE_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", "export", "exported", str(archive)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    goto(page, served + "/console/bases/exported")
    page.get_by_label("Archive file").set_input_files(str(archive))
    page.get_by_label("Name of the imported base").fill("imported")
    page.get_by_role("button", name="Import archive").click()
    expect_(page.locator("#notice")).to_contain_text("into the new base imported")
    assert httpx.get(served + "/bases/imported").status_code == 200
