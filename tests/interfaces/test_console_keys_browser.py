"""The console with scoped keys (issue 44 item 3), in a real browser: playwright driving
Debian's chromium against a real ``kb serve`` subprocess on loopback. A write key scoped to one
base sees that base only and its changes are listed under its name, via the console; a
read-only key's change is refused and another base is "no base" to it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from _serve import kb_serve
from knowbase.service import Knowledge
from knowbase.settings import load_settings

CHROMIUM = os.environ.get("KNOWBASE_CHROMIUM", "/usr/bin/chromium")
playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
    pytest.skip(
        f"chromium not found at {CHROMIUM} (apt-get install chromium)", allow_module_level=True
    )

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(240)]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
ADMIN = "console-admin-token"


def sign_in(page, url: str, token: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(url)
    page.get_by_role("textbox", name="API token").fill(token)
    page.get_by_role("button", name="Use token").click()


def test_the_console_with_scoped_keys(tmp_path: Path) -> None:
    expect_ = playwright_api.expect
    home = tmp_path / "home"
    with Knowledge(load_settings(home)) as kb:
        kb.create_base("alpha", file_processor_id=None)
        kb.create_base("beta", file_processor_id=None)
        _, writer = kb.create_key("editor", write=True, bases=["alpha"])
        _, reader = kb.create_key("viewer", write=False, bases=["alpha"])
    with kb_serve(home, token=ADMIN) as url, playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_context().new_page()
            sign_in(page, url + "/", writer)
            expect_(page.locator('#bases-table tr[data-base="alpha"]')).to_be_visible()
            expect_(page.locator("#bases-table tbody tr")).to_have_count(1)  # no beta
            page.goto(url + "/console/bases/alpha")
            page.wait_for_selector("body[data-ready]")
            page.get_by_label("Note title").fill("Owl log")
            page.get_by_label("Note text").fill("The barn owl hunted at dusk.")
            page.get_by_role("button", name="Add note").click()
            expect_(page.locator("#notice")).to_have_text("Added a note.")
            changes = page.locator("#changes-table tbody")
            expect_(changes).to_contain_text("editor via console", timeout=30_000)
            # a change that started no job is listed too: the base's creation (no key: the facade)
            expect_(changes.locator("tr", has_text="create")).to_have_count(1)

            viewer = browser.new_context().new_page()
            sign_in(viewer, url + "/console/bases/alpha", reader)
            viewer.wait_for_selector("body[data-ready]")
            expect_(viewer.locator("#changes-table tbody")).to_contain_text("editor via console")
            viewer.get_by_label("Note text").fill("A read-only key tries to write.")
            viewer.get_by_role("button", name="Add note").click()
            expect_(viewer.locator("#notice")).to_contain_text("key_not_allowed")
            viewer.goto(url + "/console/bases/beta")
            expect_(viewer.locator("#base-info")).to_contain_text('There is no base named "beta"')
        finally:
            browser.close()
