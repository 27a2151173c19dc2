"""The web console in a real browser: playwright driving Debian's chromium against a real
``kb serve`` subprocess on loopback, with real files (a reportlab PDF, Markdown, a corrupt PDF)
and the deterministic ``hash:d64`` embeddings.

Screenshots of each main page go to ``$KNOWBASE_CONSOLE_SCREENSHOTS`` (default: a folder under
the test's tmp dir, printed); they are for people and not asserted on.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _serve import free_port, kb_serve
from waiting import wait_until

CHROMIUM = os.environ.get("KNOWBASE_CHROMIUM", "/usr/bin/chromium")
playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
    pytest.skip(
        f"chromium not found at {CHROMIUM} (apt-get install chromium)", allow_module_level=True
    )

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
TOKEN = "console-test-token"
PASSAGE = "The lighthouse keeper counts zebra migrations every winter"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("KNOWBASE_CONSOLE_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"console screenshots in {folder}")
    return folder


def make_folder(root: Path) -> Path:
    """``papers/``: a two-page PDF (the passage on page 2), a Markdown note, a corrupt PDF,
    and a file of a type no reader knows."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    folder = root / "papers"
    (folder / "sub").mkdir(parents=True)
    pdf = canvas.Canvas(str(folder / "report.pdf"), pagesize=A4)
    pdf.drawString(72, 750, "Annual report, first page: budgets and staffing.")
    pdf.showPage()
    pdf.drawString(72, 750, PASSAGE + ".")
    pdf.showPage()
    pdf.save()
    (folder / "sub" / "notes.md").write_text("# Notes\n\nHarbour tides are logged hourly.\n")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(2048))
    (folder / "tool.bin").write_bytes(b"\x7fELF")  # not indexable: named in the upload notice
    return folder


def goto(page, url: str) -> None:  # type: ignore[no-untyped-def]
    """Open a console page and wait until its script has loaded its data and wired its forms."""
    page.goto(url)
    page.wait_for_selector("body[data-ready]")


def item_row(page, title: str):  # type: ignore[no-untyped-def]
    return page.locator(f'#items-table tr[data-title="{title}"]')


def test_console_import_search_view_delete(browser, tmp_path: Path, shots: Path) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    folder = make_folder(tmp_path / "src")
    with kb_serve(tmp_path / "home") as url:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.on("dialog", lambda d: d.accept())
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        # 1. create a base, by keyboard only: Tab to the labelled field, type, Enter
        goto(page, url + "/")
        for _ in range(12):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.id") == "create-name":
                break
        expect_(page.get_by_label("Name")).to_be_focused()
        page.keyboard.type("docs")
        page.keyboard.press("Tab")
        expect_(page.get_by_label("Embedding model")).to_be_focused()
        page.keyboard.type("hash:d64")
        page.keyboard.press("Enter")
        row = page.locator('#bases-table tr[data-base="docs"]')
        expect_(row).to_contain_text("hash:d64")
        expect_(row).to_contain_text("empty")
        page.screenshot(path=str(shots / "1-bases.png"), full_page=True)

        # 2. drop a folder (the folder picker gives the same files with relative paths)
        row.get_by_role("link", name="docs").click()
        page.wait_for_url("**/console/bases/docs")
        page.wait_for_selector("body[data-ready]")
        expect_(page.locator("#base-info")).to_contain_text("hash:d64")
        page.set_input_files("#pick-folder", str(folder))

        # 3. progress reaches the end; the corrupt file shows its code and message
        expect_(page.locator("#progress-text")).to_have_text(
            "All done: 3 of 3 files done (2 completed, 1 failed), 0 active · 2 folder(s)",
            timeout=90_000,
        )
        expect_(page.locator("#progress-bar")).to_have_attribute("value", "3")
        broken = item_row(page, "broken.pdf")
        expect_(broken).to_have_attribute("data-status", "failed")
        item = next(
            i for i in httpx.get(url + "/bases/docs/items").json() if i["title"] == "broken.pdf"
        )
        assert item["error_code"] and item["error_message"]
        expect_(broken.locator(".error-code")).to_have_text(item["error_code"])
        expect_(broken.locator(".error-message")).to_have_text(item["error_message"])
        # relative paths kept: papers/ then sub/ then notes.md, as one tree
        concept = item_row(page, "notes.md").locator(".concept")
        expect_(concept).to_have_text("papers/sub/notes.md")
        expect_(item_row(page, "sub")).to_have_attribute("aria-level", "2")
        # the file no reader knows is not uploaded; the notice names it (issue 25)
        expect_(page.locator("#notice")).to_contain_text("Added 3 file(s).")
        expect_(page.locator("#notice")).to_contain_text("Not added: 1 — papers/tool.bin")
        page.screenshot(path=str(shots / "2-base.png"), full_page=True)

        # 4. retry: a reindex job for the item runs and it fails again, as it must
        before = item["updated_at"]
        broken.get_by_role("button", name="Retry").click()
        expect_(page.locator("#notice")).to_contain_text("Retrying broken.pdf")

        def retried() -> dict | None:
            now = httpx.get(url + f"/bases/docs/items/{item['id']}").json()
            return now if now["updated_at"] > before and now["status"] == "failed" else None

        wait_until(retried, 60, interval_s=0.2)
        kinds = [j["kind"] for j in httpx.get(url + "/bases/docs/jobs").json()]
        assert any("reindex" in k for k in kinds), kinds
        expect_(broken.locator(".error-code")).to_have_text(item["error_code"])

        # 5. search: title, Concept ID, locator, highlighted terms, score kind
        page.get_by_role("link", name="Search this base").click()
        page.wait_for_url("**/console/search?base=docs")
        page.wait_for_selector("body[data-ready]")
        page.get_by_label("Query").fill("lighthouse zebra")
        page.get_by_role("button", name="Search").click()
        expect_(page.locator("#search-summary")).to_contain_text("result(s)")
        # The PDF's Concept ID is its processed .md when the base has an OCR processor (the
        # default where tesseract is installed), else the PDF itself: take it from the API.
        report = next(
            i for i in httpx.get(url + "/bases/docs/items").json() if i["title"] == "report.pdf"
        )
        report_concept = report["concept_id"]
        assert report_concept in ("papers/report.pdf", "papers/report.md"), report
        hit = page.locator(".result").first  # rank 1: the page with both words
        expect_(hit).to_have_attribute("data-concept", report_concept)
        expect_(hit.locator(".concept")).to_have_text(report_concept)
        expect_(hit.locator(".where")).to_have_text("page 2")
        # a hybrid base: the score's kind is hybrid, or keyword when the dense lane sat out
        expect_(hit.locator(".score")).to_contain_text(re.compile(r"(hybrid|keyword) score"))
        expect_(hit.locator("mark").first).to_have_text("lighthouse")
        page.get_by_text("How this search ran").click()  # explain details on demand
        expect_(page.locator("#explain-body")).to_be_visible()
        expect_(page.locator("#explain-body")).not_to_be_empty()
        page.screenshot(path=str(shots / "3-search.png"), full_page=True)

        # 6. the viewer opens at the cited page, passage highlighted and scrolled into view
        hit.get_by_role("link").click()
        expect_(page.locator("#doc-where")).to_have_text("Cited from page 2")
        cited = page.locator("#cited")
        expect_(cited).to_contain_text(PASSAGE)
        expect_(cited).to_be_in_viewport()
        expect_(cited).to_be_focused()
        expect_(page.locator("#doc-body")).to_contain_text("first page")  # neighbouring text
        page.screenshot(path=str(shots / "4-viewer.png"), full_page=True)

        # 7. delete the PDF (tick it, "Delete selected"); it leaves search
        goto(page, url + "/console/bases/docs")
        page.get_by_label("Select report.pdf").check()
        page.get_by_role("button", name="Delete selected").click()
        expect_(item_row(page, "report.pdf")).to_have_count(0, timeout=30_000)
        goto(page, url + "/console/search?base=docs&q=lighthouse%20zebra")
        expect_(page.locator("#search-summary")).to_contain_text("result(s)")
        expect_(page.locator(f'.result[data-concept="{report_concept}"]')).to_have_count(0)
        goto(page, url + "/console/search?base=docs&q=harbour%20tides")
        notes = page.locator(".result").first
        expect_(notes).to_have_attribute("data-concept", "papers/sub/notes.md")
        expect_(notes.locator(".where")).to_have_text("Notes")  # the heading path

        # 8. settings are saved; a restore makes a new base from the raw/ copies
        goto(page, url + "/console/bases/docs")
        page.get_by_label("Results per search").fill("5")
        page.get_by_role("button", name="Save settings").click()
        expect_(page.locator("#notice")).to_have_text("Settings saved.")
        assert httpx.get(url + "/bases/docs").json()["document_count"] == 5
        page.get_by_label("Restore into a new base named").fill("docs-copy")
        page.get_by_role("button", name="Restore").click()
        expect_(page.locator("#notice")).to_contain_text("Restored into docs-copy")
        goto(page, url + "/")
        expect_(page.locator('#bases-table tr[data-base="docs-copy"]')).to_be_visible()
        page.screenshot(path=str(shots / "5-bases-after.png"), full_page=True)

        # several bases at once: results name their base
        def copy_settled() -> bool:
            items = httpx.get(url + "/bases/docs-copy/items").json()
            return bool(items) and all(i["status"] in ("completed", "failed") for i in items)

        wait_until(copy_settled, 60, interval_s=0.2)
        goto(page, url + "/console/search")
        page.get_by_label("docs", exact=True).check()  # the bases are checkboxes (issue 42)
        page.get_by_label("docs-copy", exact=True).check()
        page.get_by_label("Query").fill("harbour tides")
        page.get_by_role("button", name="Search").click()
        bases_seen = page.locator('.result[data-concept="papers/sub/notes.md"] .base')
        expect_(bases_seen).to_have_count(2, timeout=15_000)
        assert sorted(bases_seen.all_inner_texts()) == ["docs", "docs-copy"]

        # 9. readable at 375 px: nothing wider than the screen
        page.set_viewport_size({"width": 375, "height": 800})
        for path, name, loaded in (
            ("/", "bases", '#bases-table tr[data-base="docs"]'),
            ("/console/bases/docs", "base", '#items-table tr[data-title="broken.pdf"]'),
            ("/console/search?base=docs&q=harbour", "search", ".result"),
        ):
            goto(page, url + path)
            expect_(page.locator(loaded).first).to_be_visible()
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 375, (path, width)
            page.screenshot(path=str(shots / f"6-{name}-375.png"), full_page=True)
        assert errors == []
        page.close()


def test_console_needs_the_token_and_shows_readiness(  # type: ignore[no-untyped-def]
    browser, tmp_path: Path, shots: Path
) -> None:
    """With a token required: the page asks once per tab, keeps it out of URLs, sends it as a
    header (the event stream too); a queued job without workers raises the degraded banner."""
    expect_ = playwright_api.expect
    with kb_serve(tmp_path / "home", "--no-workers", token=TOKEN) as url:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(url + "/bases").status_code == 401
        httpx.post(url + "/bases", json={"name": "secret"}, headers=auth).raise_for_status()
        note = {"inputs": [{"type": "note", "content": "queued note"}]}
        httpx.post(url + "/bases/secret/items", json=note, headers=auth).raise_for_status()

        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        seen: list[tuple[str, str | None]] = []
        page.on("request", lambda r: seen.append((r.url, r.headers.get("authorization"))))
        page.goto(url + "/")
        dialog = page.locator("#token-dialog")
        expect_(dialog).to_be_visible()
        expect_(page.locator("#bases-table tbody tr")).to_have_count(0)  # no data without it
        page.get_by_role("textbox", name="API token").fill("wrong")
        page.get_by_role("button", name="Use token").click()
        expect_(page.locator("#token-error")).to_be_visible()  # refused: asked again
        expect_(page.locator("#bases-table tbody tr")).to_have_count(0)
        page.get_by_role("textbox", name="API token").fill(TOKEN)
        page.get_by_role("button", name="Use token").click()
        expect_(page.locator('#bases-table tr[data-base="secret"]')).to_be_visible()
        banner = page.locator("#readiness")
        expect_(banner).to_contain_text("degraded")
        expect_(banner).to_contain_text("queued, no worker running")
        page.screenshot(path=str(shots / "7-token-banner.png"), full_page=True)

        # once per tab: other pages of the same tab do not ask again
        page.goto(url + "/console/bases/secret")
        queued = httpx.get(url + "/bases/secret/items", headers=auth).json()[0]["status"]
        expect_(page.locator(f'#items-table tr[data-status="{queued}"]')).to_have_count(1)
        expect_(page.locator("#progress-text")).to_contain_text("1 active")  # from the stream
        expect_(page.locator("#imports li")).to_have_text("queued note: 0 of 1")
        expect_(dialog).not_to_be_visible()
        # cancel: the queued job ends and the item's new state arrives over the stream
        page.get_by_role("button", name="Cancel running work").click()
        expect_(page.locator("#notice")).to_have_text("Cancelled 1 job(s).")
        expect_(page.locator("#progress-text")).to_contain_text("0 active", timeout=15_000)
        expect_(page.get_by_role("button", name="Cancel running work")).to_be_disabled()
        ended = httpx.get(url + "/bases/secret/items", headers=auth).json()[0]
        assert ended["status"] == "failed", ended
        expect_(page.locator(f'#items-table tr[data-status="{ended["status"]}"]')).to_have_count(1)
        # a new tab (new session storage) asks again
        other = context.new_page()
        other.goto(url + "/")
        expect_(other.locator("#token-dialog")).to_be_visible()

        assert not [u for u, _ in seen if TOKEN in u]
        events = [h for u, h in seen if u.endswith("/events")]
        assert events and events[-1] == f"Bearer {TOKEN}"
        context.close()


# --- one server for the tests below: each makes its own base -----------------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``kb serve`` whose home configures one remote profile, ``deadend``, on a loopback port
    nothing listens on (offered as a prefix; a base that reranks with it is unavailable)."""
    home = tmp_path_factory.mktemp("console") / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[providers.deadend]\nbase_url = "http://127.0.0.1:{free_port()}/v1"\n'
    )
    with kb_serve(home) as url:
        yield url


@pytest.fixture
def page(browser, served: str) -> Iterator[object]:  # type: ignore[no-untyped-def]
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.on("dialog", lambda d: d.accept())
    errors: list[str] = []
    tab.on("pageerror", lambda e: errors.append(str(e)))
    yield tab
    tab.close()
    assert errors == []


def settled(url: str, base: str, count: int) -> list[dict]:
    """The base's items once ``count`` of them exist and none is in flight."""

    def check() -> list[dict] | None:
        items = httpx.get(f"{url}/bases/{base}/items").json()
        done = all(i["status"] in ("completed", "failed") for i in items)
        return items if len(items) == count and done else None

    return wait_until(check, 30, interval_s=0.2)


def make_base(url: str, name: str, model: str | None, *notes: str) -> None:
    body: dict[str, object] = {"name": name}
    if model:
        body["embedding_model_id"] = model
    httpx.post(url + "/bases", json=body).raise_for_status()
    if notes:
        inputs = [{"type": "note", "content": n} for n in notes]
        httpx.post(f"{url}/bases/{name}/items", json={"inputs": inputs}).raise_for_status()
        settled(url, name, len(notes))


def searched(url: str, base: str, q: str) -> dict:
    r = httpx.get(f"{url}/bases/{base}/search", params={"q": q, "explain": "true"})
    r.raise_for_status()
    return r.json()


def test_switch_the_model_from_the_settings_page(page, served: str, shots: Path) -> None:  # type: ignore[no-untyped-def]
    """A base with a model switches through the model-switch job; the page follows it to the
    end, the new model serves and search still works. The picker offers the server's models."""
    expect_ = playwright_api.expect
    make_base(served, "switching", "hash:d8", "Kelp forests shelter otters.", "Basalt cliffs.")
    goto(page, served + "/console/bases/switching")
    expect_(page.locator("#base-info")).to_contain_text("hash:d8")
    for model in ("local:all-minilm-l6-v2", "local:multilingual-e5-small", "hash:d64", "deadend:"):
        expect_(page.locator(f'#models option[value="{model}"]')).to_have_count(1)
    button = page.get_by_role("button", name="Switch embedding model")
    text = page.locator("#switch-text")
    # a switch that ends early says why and that the old model still serves (the 1 s delay
    # per batch keeps it running while Cancel is pressed)
    page.get_by_label("Embedding model").fill("hash:d16?delay=1")
    button.click()
    expect_(text).to_contain_text("hash:d8 serves searches until the swap")
    page.get_by_role("button", name="Cancel running work").click()
    expect_(text).to_have_text(
        "The switch to hash:d16?delay=1 was cancelled; hash:d8 still serves.", timeout=15_000
    )
    expect_(page.locator("#switch")).to_have_attribute("data-status", "cancelled")
    expect_(button).to_be_enabled()
    expect_(page.locator("#base-info")).to_contain_text("hash:d8")
    page.get_by_label("Embedding model").fill("hash:d16")
    button.click()
    # the old model serves while the new vectors are built (the swap waits a grace second)
    expect_(text).to_contain_text("hash:d8 serves searches until the swap")
    expect_(button).to_be_disabled()
    expect_(text).to_have_text("Done: the base now embeds with hash:d16.", timeout=30_000)
    expect_(page.locator("#base-info")).to_contain_text("hash:d16")
    expect_(page.locator("#notice")).to_be_hidden()
    base = httpx.get(served + "/bases/switching").json()
    assert (base["embedding_model_id"], base["dimensions"]) == ("hash:d16", 16)
    assert httpx.get(served + "/bases/switching/model-switch").json()["status"] == "completed"
    page.screenshot(path=str(shots / "8-switched.png"), full_page=True)
    # search still works, both lanes
    goto(page, served + "/console/search?base=switching&q=kelp%20otters")
    expect_(page.locator(".result").first).to_contain_text("Kelp forests shelter otters")
    out = searched(served, "switching", "kelp otters")
    assert out["mode"] == "hybrid" and out["explain"]["dense_lane"]["used"], out["explain"]


def test_enable_embedding_on_a_bm25_only_base(page, served: str) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    make_base(served, "keywords", None, "Glaciers carve fjords slowly.")
    goto(page, served + "/console/bases/keywords")
    expect_(page.locator("#base-info")).to_contain_text("BM25 only")
    page.get_by_label("Embedding model").fill("hash:d16")
    page.get_by_role("button", name="Enable embedding").click()
    expect_(page.locator("#switch-text")).to_have_text(
        "Done: the base now embeds with hash:d16.", timeout=30_000
    )
    expect_(page.locator("#base-info")).to_contain_text("hash:d16")
    expect_(page.get_by_role("button", name="Switch embedding model")).to_be_enabled()
    assert httpx.get(served + "/bases/keywords").json()["embedding_model_id"] == "hash:d16"
    out = searched(served, "keywords", "glaciers fjords")
    assert out["mode"] == "hybrid" and out["results"], out


def test_a_note_from_the_editor_is_found_by_search(page, served: str) -> None:  # type: ignore[no-untyped-def]
    expect_ = playwright_api.expect
    make_base(served, "notebook", "hash:d64")
    goto(page, served + "/console/bases/notebook")
    page.get_by_label("Note title").fill("Beekeeping log")
    page.get_by_label("Note text").fill("The quince hive swarmed on a windy Tuesday.")
    page.get_by_role("button", name="Add note").click()
    expect_(page.locator("#notice")).to_have_text("Added a note.")
    row = item_row(page, "Beekeeping log")
    expect_(row).to_have_attribute("data-status", "completed", timeout=30_000)
    expect_(page.get_by_label("Note text")).to_have_value("")
    goto(page, served + "/console/search?base=notebook&q=quince%20hive")
    hit = page.locator(".result").first
    expect_(hit).to_contain_text("Beekeeping log")
    expect_(hit).to_contain_text("swarmed on a windy Tuesday")


def test_dropping_loose_files_adds_them(page, served: str) -> None:  # type: ignore[no-untyped-def]
    """A drop of loose files (a DataTransfer built in the page, as a drag from the desktop
    would carry) uploads each as its own item."""
    expect_ = playwright_api.expect
    make_base(served, "dropped", "hash:d64")
    goto(page, served + "/console/bases/dropped")
    page.evaluate(
        """() => {
        const data = new DataTransfer();
        data.items.add(new File(["# Orchard\\n\\nPear trees blossom in April.\\n"],
          "orchard.md", { type: "text/markdown" }));
        data.items.add(new File(["Copper kettles need polishing.\\n"], "kettle.txt",
          { type: "text/plain" }));
        const zone = document.getElementById("dropzone");
        zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: data, bubbles: true,
          cancelable: true }));
        zone.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true,
          cancelable: true }));
    }"""
    )
    expect_(page.locator("#notice")).to_have_text("Added 2 file(s).")
    expect_(page.locator("#dropzone")).not_to_have_class("dropzone over")
    for name in ("orchard.md", "kettle.txt"):
        expect_(item_row(page, name)).to_have_attribute("data-status", "completed", timeout=30_000)
    assert item_row(page, "orchard.md").get_attribute("aria-level") == "1"  # no folder
    goto(page, served + "/console/search?base=dropped&q=pear%20blossom")
    expect_(page.locator(".result").first).to_have_attribute("data-concept", "orchard.md")


def test_a_base_page_shows_the_readiness_banner(page, served: str, shots: Path) -> None:  # type: ignore[no-untyped-def]
    """A base that reranks with an endpoint nothing answers: its page names the component."""
    expect_ = playwright_api.expect
    body = {"name": "deadbase", "rerank_model_id": "deadend:rerank-1"}
    httpx.post(served + "/bases", json=body).raise_for_status()
    try:
        goto(page, served + "/console/bases/deadbase")
        banner = page.locator("#readiness")
        expect_(banner).to_be_visible()
        expect_(banner).to_contain_text("knowbase is degraded")
        expect_(banner).to_contain_text("rerank (deadbase): unavailable")
        expect_(banner).to_contain_text("unreachable")
        page.screenshot(path=str(shots / "9-base-banner.png"), full_page=True)
    finally:
        httpx.delete(served + "/bases/deadbase").raise_for_status()


def test_the_settings_form_saves_every_declared_setting(page, served: str) -> None:  # type: ignore[no-untyped-def]
    """The form is built from catalog/base_settings.py: a select, a checkbox, a number and a
    nullable number emptied (null) all reach the base in one save."""
    expect_ = playwright_api.expect
    # a base with a model: fusion applies to it (a BM25-only base does not show it, issue 42)
    make_base(served, "tuned", "hash:d64", "Tides turn twice a day.")
    httpx.patch(served + "/bases/tuned", json={"url_max_age": 3600}).raise_for_status()
    goto(page, served + "/console/bases/tuned")
    page.get_by_text("Advanced").click()  # the settings past the basic ones
    expect_(page.get_by_label("Re-fetch pages older than (seconds)")).to_have_value("3600")
    page.get_by_label("Fusion").select_option("rrf")
    page.get_by_label("RRF k").fill("30")
    page.get_by_label("Sync deletes items whose files vanished").check()
    page.get_by_label("Re-fetch pages older than (seconds)").fill("")
    page.get_by_role("button", name="Save settings").click()
    expect_(page.locator("#notice")).to_have_text("Settings saved.")
    base = httpx.get(served + "/bases/tuned").json()
    assert (base["fusion"], base["rrf_k"], base["sync_deletes"], base["url_max_age"]) == (
        "rrf",
        30,
        True,
        None,
    )
    kept = (base["chunk_size"], base["chunk_strategy"], base["fusion_alpha"])
    assert kept == (1024, "structured", 0.4)  # fusion_alpha kept at the default (issue 40: 0.4)
