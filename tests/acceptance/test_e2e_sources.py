"""Issue 4 end to end through ``Knowledge``: folders, web pages, sitemaps and notes.

Everything runs on a BM25-only base over a tmp home (no model loads). The web tests talk to a
``ThreadingHTTPServer`` on loopback; a base sees it only with ``allow_local_urls=True``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from knowbase.catalog.models import Item
from knowbase.errors import InvalidUrl
from knowbase.operations.add.inputs import AddInput
from knowbase.pipeline.sources import ratelimit
from knowbase.pipeline.sources.okf import strip_okf_frontmatter
from knowbase.service import Knowledge
from knowbase.settings import load_settings

pytestmark = pytest.mark.timeout(90)

MAX_FILE_BYTES = 4000


@pytest.fixture
def knowledge(tmp_path: Path) -> Iterator[Knowledge]:
    kb = Knowledge(load_settings(tmp_path / "home", max_file_bytes=MAX_FILE_BYTES))
    yield kb
    kb.close()


@pytest.fixture(autouse=True)
def fresh_limiter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh process-wide fetch limiter per test (the real one: 3 at a time, 10 a minute), so
    fetches of earlier tests never make a later one queue for the 60 s window."""
    monkeypatch.setattr(ratelimit, "_default", None)


def by_concept(items: list[Item]) -> dict[str, Item]:
    return {i.concept_id: i for i in items if i.concept_id}


def raw_text(kb: Knowledge, base_id: str, rel: str) -> str:
    return kb.rt.storage(base_id).path_of(rel).read_text(encoding="utf-8")


# --- folders -----------------------------------------------------------------------------------


def build_project(root: Path) -> Path:
    """A project tree with everything a real import meets (see the skip report test)."""
    (root / "docs" / "deep").mkdir(parents=True)
    (root / "docs" / "empty").mkdir()
    (root / "data").mkdir()
    (root / "logs").mkdir()
    (root / "node_modules" / "leftpad").mkdir(parents=True)
    (root / ".git" / "objects").mkdir(parents=True)
    (root / "README.md").write_text(
        "# Project\n\nThe zebra migrates across the savanna every spring.\n", encoding="utf-8"
    )
    (root / ".gitignore").write_text("secret.txt\nlogs/\n*.log\n", encoding="utf-8")
    (root / ".env").write_text("TOKEN=1\n", encoding="utf-8")
    (root / "secret.txt").write_text("the password is swordfish\n", encoding="utf-8")
    (root / "debug.log").write_text("log line\n", encoding="utf-8")
    (root / "tool.exe").write_bytes(b"MZ" + bytes(200))
    (root / "big.txt").write_text("oversized " * 600, encoding="utf-8")  # 6000 bytes > cap
    (root / "logs" / "run.txt").write_text("ignored log folder\n", encoding="utf-8")
    (root / "node_modules" / "leftpad" / "README.md").write_text("leftpad\n", encoding="utf-8")
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    (root / ".git" / "objects" / "notes.md").write_text("git internals\n", encoding="utf-8")
    (root / "docs" / "guide.md").write_text(
        "# Guide\n\nIntro to the guide.\n\n## Install\n\nRun the pelican installer twice.\n",
        encoding="utf-8",
    )
    (root / "docs" / "deep" / "notes.txt").write_text(
        "Flamingos stand on one leg to keep warm.\n", encoding="utf-8"
    )
    (root / "data" / "blob.docx").write_bytes(random.Random(4).randbytes(3000))
    return root


def test_folder_import_honours_ignore_rules_and_fails_only_the_blob(
    knowledge: Knowledge, tmp_path: Path
) -> None:
    base = knowledge.create_base("folders", file_processor_id=None)
    # A first folder with the same name takes the prefix "proj": the second one is deduped.
    other = tmp_path / "other" / "proj"
    other.mkdir(parents=True)
    (other / "only.md").write_text("An earlier import owns the plain prefix.\n")
    knowledge.add(base.id, [AddInput.directory(other)], wait=True)

    project = build_project(tmp_path / "src" / "proj")
    result = knowledge.add(base.id, [AddInput.directory(project)], wait=True, timeout_s=60)
    root = knowledge.get_item(base.id, result.items[0].id)

    items = [i for i in knowledge.list_items(base.id) if i.id != root.id]
    mine = [i for i in items if i.status != "completed" or "proj_1" in (i.concept_id or "")]
    leaves = by_concept([i for i in mine if i.type == "file"])
    assert sorted(leaves) == [
        "proj_1/README.md",
        "proj_1/data/blob.docx",
        "proj_1/docs/deep/notes.txt",
        "proj_1/docs/guide.md",
    ]
    assert root.data["relative_path"] == "proj_1"

    # The skip report says why for everything else (counts + every file, in walk order).
    assert root.data["skipped"] == {
        "ignored_default": {"count": 2, "files": [".git", "node_modules"]},
        "dot_entry": {"count": 2, "files": [".env", ".gitignore"]},
        "too_large": {"count": 1, "files": ["big.txt"]},
        "ignored_gitignore": {"count": 3, "files": ["debug.log", "logs", "secret.txt"]},
        "unsupported_type": {"count": 1, "files": ["tool.exe"]},
    }

    # The blob fails alone; every good child completes.
    blob = leaves.pop("proj_1/data/blob.docx")
    assert (blob.status, blob.error_code) == ("failed", "unreadable_file")
    assert "signature" in (blob.error_message or "").lower()
    assert {c: i.status for c, i in leaves.items()} == dict.fromkeys(leaves, "completed")

    # Roll-up (§1.3): a container with a failed child is failed, with the spec's message; the
    # folder holding only good files is completed.
    assert (root.status, root.error_code) == ("failed", "child_failed")
    assert root.error_message == "One or more child items failed"
    dirs = {i.source: i for i in knowledge.list_items(base.id) if i.type == "directory"}
    assert dirs[str(project / "data")].status == "failed"
    assert dirs[str(project / "docs")].status == "completed"
    assert dirs[str(project / "docs" / "deep")].status == "completed"
    assert str(project / "docs" / "empty") not in dirs

    # Nothing skipped reached raw/; the good files are searchable under their Concept IDs.
    raw = knowledge.rt.storage(base.id).raw / "proj_1"
    copied = sorted(p.relative_to(raw).as_posix() for p in raw.rglob("*") if p.is_file())
    assert copied == ["README.md", "data/blob.docx", "docs/deep/notes.txt", "docs/guide.md"]
    for query, concept in [
        ("zebra savanna", "proj_1/README.md"),
        ("pelican installer", "proj_1/docs/guide.md"),
        ("flamingos leg", "proj_1/docs/deep/notes.txt"),
    ]:
        hits = knowledge.search(base.id, query).results
        assert hits and hits[0].concept_id == concept, query
    (hit,) = [h for h in knowledge.search(base.id, "pelican installer").results]
    assert hit.locator == {"heading": ["Guide", "Install"]}
    for secret in ("swordfish", "leftpad", "oversized", "internals"):
        assert knowledge.search(base.id, secret).results == []


def test_folder_with_nothing_indexable_fails_with_its_report(
    knowledge: Knowledge, tmp_path: Path
) -> None:
    base = knowledge.create_base("empty", file_processor_id=None)
    folder = tmp_path / "junk"
    (folder / "node_modules").mkdir(parents=True)
    (folder / "node_modules" / "a.md").write_text("dependency\n")
    (folder / "app.exe").write_bytes(b"MZ\x90\x00\x03\x00\x00\x00" * 8)  # binary: NUL bytes
    result = knowledge.add(base.id, [AddInput.directory(folder)], wait=True, timeout_s=30)
    item = knowledge.get_item(base.id, result.items[0].id)
    assert (item.status, item.error_code) == ("failed", "no_indexable_files")
    assert [i.id for i in knowledge.list_items(base.id)] == [item.id]


# --- web pages and sitemaps --------------------------------------------------------------------


def article(title: str, heading: str, body: str) -> bytes:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
        f"<nav><a href='/'>Home</a> | <a href='/about'>About</a></nav><article>"
        f"<h1>{heading}</h1><p>{body} This paragraph is long enough for the extractor to keep "
        f"it as the main content of the page, with a few more words for good measure.</p>"
        f"</article><footer>Copyright Footer Corporation</footer></body></html>"
    ).encode()


@dataclass
class Site:
    base: str
    pages: dict[str, tuple[str, bytes]]
    hits: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture
def site() -> Iterator[Site]:
    pages: dict[str, tuple[str, bytes]] = {
        "/article.html": (
            "text/html; charset=utf-8",
            article("Migration Guide - Docs", "Migration Guide", "Narwhals migrate in winter."),
        ),
    }
    for n, animal in enumerate(["Ocelots", "Tapirs", "Okapis"], start=1):
        pages[f"/p{n}.html"] = (
            "text/html",
            article(f"{animal} page - Zoo", f"{animal} page", f"{animal} live in the forest."),
        )
    state = Site("", pages)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            state.hits.append(self.path)
            found = state.pages.get(self.path)
            if found is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            ctype, body = found
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    urls = "".join(f"<url><loc>{state.base}/p{n}.html</loc></url>" for n in (1, 2, 3))
    sitemap = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'
    ).encode()
    pages["/sitemap.xml"] = ("application/xml", sitemap)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_url_item_snapshot_okf_title_and_search(knowledge: Knowledge, site: Site) -> None:
    base = knowledge.create_base("web", allow_local_urls=True, file_processor_id=None)
    url = site.url("/article.html")
    result = knowledge.add(base.id, [AddInput.web(url)], wait=True, timeout_s=60)
    item = knowledge.get_item(base.id, result.items[0].id)
    assert (item.type, item.status, item.error_code) == ("url", "completed", None)
    # The title comes from the page (trafilatura drops the " - Docs" site suffix).
    assert item.title == "Migration Guide"
    assert item.concept_id == "Migration Guide.md"
    text = raw_text(knowledge, base.id, item.concept_id)
    assert text.startswith('---\ntype: "URL"\ntitle: "Migration Guide"\nresource: "' + url + '"\n')
    body = strip_okf_frontmatter(text)
    assert "Narwhals migrate in winter." in body and "Footer Corporation" not in body
    (hit,) = knowledge.search(base.id, "narwhals winter").results
    assert (hit.item_id, hit.concept_id, hit.item_type) == (item.id, item.concept_id, "url")
    assert hit.title == "Migration Guide"


def test_sitemap_expands_into_url_children(knowledge: Knowledge, site: Site) -> None:
    base = knowledge.create_base("sitemap", allow_local_urls=True, file_processor_id=None)
    inp = AddInput.web(site.url("/sitemap.xml"))
    assert inp.type == "sitemap"
    result = knowledge.add(base.id, [inp], wait=True, timeout_s=60)
    root = knowledge.get_item(base.id, result.items[0].id)
    assert (root.type, root.status, root.concept_id) == ("sitemap", "completed", None)
    children = [i for i in knowledge.list_items(base.id) if i.group_id == root.id]
    assert sorted(c.data["url"] for c in children) == [site.url(f"/p{n}.html") for n in (1, 2, 3)]
    assert {(c.type, c.status) for c in children} == {("url", "completed")}
    assert sorted(c.concept_id for c in children) == [
        "Ocelots page.md",
        "Okapis page.md",
        "Tapirs page.md",
    ]
    for child in children:
        assert raw_text(knowledge, base.id, child.concept_id).startswith('---\ntype: "URL"\n')
    for animal in ("Ocelots", "Tapirs", "Okapis"):
        (hit,) = knowledge.search(base.id, animal).results
        assert hit.concept_id == f"{animal} page.md"
        assert hit.item_id in {c.id for c in children}
    assert sorted(site.hits) == ["/p1.html", "/p2.html", "/p3.html", "/sitemap.xml"]


def test_loopback_url_without_allow_local_is_refused_and_writes_nothing(
    knowledge: Knowledge, site: Site
) -> None:
    """The SSRF guard answers at ``add`` (issue 25: a refused URL is refused at once, not
    accepted then failed): a loopback URL or sitemap is ``invalid_url`` naming the address, no
    item is written, no request leaves, nothing lands in raw/. The fetch checks again (DNS can
    change in between), as the sources tests show."""
    base = knowledge.create_base("guarded", file_processor_id=None)
    assert base.allow_local_urls is False
    for path in ("/article.html", "/sitemap.xml"):
        with pytest.raises(InvalidUrl) as refused:
            knowledge.add(base.id, [AddInput.web(site.url(path))], wait=True, timeout_s=30)
        assert "127.0.0.1" in refused.value.message
    assert knowledge.list_items(base.id) == []
    assert site.hits == []
    raw = knowledge.rt.storage(base.id).raw
    assert [p for p in raw.rglob("*") if p.is_file()] == []
    assert knowledge.search(base.id, "narwhals").results == []
    with pytest.raises(InvalidUrl):
        knowledge.add(base.id, [AddInput.web("ftp://127.0.0.1/file.html")])
    assert knowledge.list_items(base.id) == []


def test_url_reindex_refetches_the_page(knowledge: Knowledge, site: Site) -> None:
    base = knowledge.create_base("refetch", allow_local_urls=True, file_processor_id=None)
    url = site.url("/article.html")
    item = knowledge.add(base.id, [AddInput.web(url)], wait=True, timeout_s=60).items[0]
    site.pages["/article.html"] = (
        "text/html",
        article("Migration Guide - Docs", "Migration Guide", "Belugas sing in summer."),
    )
    knowledge.reindex_items(base.id, [item.id], wait=True)
    item = knowledge.get_item(base.id, item.id)
    assert item.status == "completed" and item.concept_id == "Migration Guide.md"
    assert "Belugas" in raw_text(knowledge, base.id, item.concept_id)
    assert knowledge.search(base.id, "narwhals").results == []
    assert [h.item_id for h in knowledge.search(base.id, "belugas summer").results] == [item.id]
    assert site.hits == ["/article.html", "/article.html"]


# --- notes -------------------------------------------------------------------------------------


def test_note_snapshot_written_on_first_index_and_rewritten_by_reindex(
    knowledge: Knowledge,
) -> None:
    base = knowledge.create_base("notes", file_processor_id=None)
    content = "Axolotls regrow limbs\n\nThey live in lakes near Mexico City."
    added = knowledge.add(base.id, [AddInput.note(content)]).items[0]
    assert added.relative_path is None  # nothing written before the first index
    assert [p for p in knowledge.rt.storage(base.id).raw.rglob("*") if p.is_file()] == []
    knowledge.run_until_idle(timeout_s=30)

    item = knowledge.get_item(base.id, added.id)
    assert (item.status, item.concept_id) == ("completed", "Axolotls regrow limbs.md")
    first = raw_text(knowledge, base.id, item.concept_id)
    assert first.startswith('---\ntype: "Note"\ntitle: "Axolotls regrow limbs"\ntimestamp: "')
    assert strip_okf_frontmatter(first) == content
    (hit,) = knowledge.search(base.id, "axolotls lakes").results
    assert hit.concept_id == item.concept_id

    # Someone scribbles over the snapshot; a reindex rewrites it from the note's own content.
    path = knowledge.rt.storage(base.id).path_of(item.concept_id)
    path.write_text('---\ntype: "Note"\n---\n\nvandalised text\n', encoding="utf-8")
    knowledge.reindex_items(base.id, [item.id], wait=True)
    item = knowledge.get_item(base.id, item.id)
    assert (item.status, item.concept_id) == ("completed", "Axolotls regrow limbs.md")
    second = raw_text(knowledge, base.id, item.concept_id)
    assert second.startswith('---\ntype: "Note"\ntitle: "Axolotls regrow limbs"\n')
    assert strip_okf_frontmatter(second) == content
    assert knowledge.search(base.id, "vandalised").results == []
    assert [h.item_id for h in knowledge.search(base.id, "axolotls").results] == [item.id]


def test_url_reindex_when_the_page_is_gone_rebuilds_from_the_snapshot(
    knowledge: Knowledge, site: Site
) -> None:
    """DESIGN improvement 1: a gone origin never fails a reindex; the raw/ copy is rebuilt and
    the item reports ``origin_missing``."""
    base = knowledge.create_base("gone", allow_local_urls=True, file_processor_id=None)
    item = knowledge.add(
        base.id, [AddInput.web(site.url("/article.html"))], wait=True, timeout_s=60
    ).items[0]
    snapshot = raw_text(knowledge, base.id, knowledge.get_item(base.id, item.id).concept_id)
    del site.pages["/article.html"]  # now a 404
    knowledge.reindex_items(base.id, [item.id], wait=True)
    item = knowledge.get_item(base.id, item.id)
    assert (item.status, item.error_code) == ("completed", None)
    assert item.data.get("warning") == "origin_missing"
    assert raw_text(knowledge, base.id, item.concept_id) == snapshot
    assert [h.item_id for h in knowledge.search(base.id, "narwhals").results] == [item.id]

    # The page comes back: the next reindex fetches it again and clears the warning.
    site.pages["/article.html"] = (
        "text/html",
        article("Migration Guide - Docs", "Migration Guide", "Orcas hunt in pods."),
    )
    knowledge.reindex_items(base.id, [item.id], wait=True)
    item = knowledge.get_item(base.id, item.id)
    assert item.status == "completed" and "warning" not in item.data
    assert [h.item_id for h in knowledge.search(base.id, "orcas pods").results] == [item.id]
