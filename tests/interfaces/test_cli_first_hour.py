"""Issue 25: what a newcomer meets in ``kb`` (the real CLI in a subprocess, stderr piped)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from knowbase.interfaces.cli.search import passage

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def run(tmp_path):
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home"), "COLUMNS": "200"}

    def _run(*args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "knowbase.interfaces.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode in ok, f"kb {' '.join(args)} -> {proc.returncode}: {proc.stderr}"
        return proc

    return _run


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder as a newcomer has one: good files, an empty one, an unsupported one."""
    root = tmp_path / "docs"
    (root / "office").mkdir(parents=True)
    (root / "guide.md").write_text("# Guide\n\nOtters hold hands. They sleep.\n", "utf-8")
    (root / "office" / "memo.txt").write_text("The memo mentions walruses.", "utf-8")
    (root / "empty.md").write_text("", "utf-8")
    (root / "blob.bin").write_bytes(b"\x00\x01")
    return root


def test_add_counts_files_names_failures_and_exits_4(run, folder: Path) -> None:
    run("base", "create", "kb1")
    proc = run("add", "kb1", str(folder), ok=(4,))
    out = proc.stdout
    assert "2 indexed" in out and "1 skipped (unsupported_type 1)" in out and "1 failed" in out
    assert "empty.md" in out and "no_text_extracted" in out
    assert "docs/…" in out  # where the Concept IDs of the folder start
    # Piped, progress still speaks (in files), and worker log lines stay out.
    assert "files 3/3" in proc.stderr
    assert "knowledge.index-documents[" not in proc.stderr
    summary = json.loads(run("add", "kb1", str(folder / "office"), "--json").stdout)["summary"]
    assert summary == {
        "indexed": 1,
        "active": 0,
        "skipped": {},
        "skipped_files": {},
        "failed": [],
    }


def test_readd_updates_instead_of_copying(run, folder: Path) -> None:
    (folder / "empty.md").unlink()
    run("base", "create", "kb2")
    run("add", "kb2", str(folder))
    (folder / "guide.md").write_text("# Guide\n\nOtters now juggle pebbles.\n", "utf-8")
    again = json.loads(run("add", "kb2", str(folder), "--json").stdout)
    assert again["items"] == [] and len(again["updated"]) == 1
    assert again["update"]["changed"] == 1 and again["update"]["unchanged"] == 1
    tree = json.loads(run("tree", "kb2", "--json").stdout)
    assert [n["title"] for n in tree["nodes"] if n["depth"] == 0] == [str(folder)]
    hit = json.loads(run("search", "kb2", "juggle pebbles", "--json").stdout)["results"]
    assert hit and hit[0]["concept_id"] == "docs/guide.md"
    copied = json.loads(run("add", "kb2", str(folder), "--conflict", "rename", "--json").stdout)
    assert copied["items"][0]["data"]["relative_path"] == "docs_1"


def test_refused_url_is_refused_now_and_failed_items_can_be_removed(run, tmp_path) -> None:
    run("base", "create", "kb3")
    refused = run("add", "kb3", "http://127.0.0.1:9/page", ok=(1,))
    assert "invalid_url" in refused.stderr and "kb base set BASE --allow-local-urls" in (
        refused.stderr
    )
    assert json.loads(run("status", "kb3", "--json").stdout)["counts"] == {}
    # An item that failed has no Concept ID; status shows its id and rm takes it (or its path).
    empty = tmp_path / "void.md"
    empty.write_text("", "utf-8")
    run("add", "kb3", str(empty), ok=(4,))
    status = run("status", "kb3").stdout
    failed = json.loads(run("status", "kb3", "--json").stdout)["failed"]
    assert failed[0]["id"] in status and "kb rm kb3 ID" in status
    removed = run("rm", "kb3", failed[0]["id"])
    assert "deleted" in removed.stdout
    assert json.loads(run("status", "kb3", "--json").stdout)["counts"] == {}
    run("add", "kb3", str(empty), ok=(4,))
    run("rm", "kb3", str(empty))
    assert json.loads(run("status", "kb3", "--json").stdout)["counts"] == {}


def test_status_and_base_show_are_text_with_a_true_state(run, folder: Path, tmp_path) -> None:
    from knowbase.service import Knowledge
    from knowbase.settings import load_settings

    run("base", "create", "kb4")
    for args in (("status",), ("base", "show", "kb4")):
        out = run(*args).stdout
        assert not out.lstrip().startswith("{"), out
    assert "empty" in run("base", "show", "kb4").stdout
    assert "kb4 (empty)" in run("status", "kb4").stdout
    run("add", "kb4", str(folder), "--no-wait")
    assert "processing" in run("status", "kb4").stdout
    assert "processing" in run("base", "list").stdout
    with Knowledge(load_settings(tmp_path / "home")) as kb:
        kb.run_until_idle(timeout_s=120)
    shown = run("base", "list").stdout
    assert "ready, " in shown and "failed" in shown and "(completed)" not in shown


def test_jobs_name_their_base_and_file_and_an_empty_list_says_so(run, tmp_path) -> None:
    run("base", "create", "kb5")
    assert "no active or failed jobs" in run("jobs").stdout
    doc = tmp_path / "a.md"
    doc.write_text("", "utf-8")
    run("add", "kb5", str(doc), ok=(4,))
    listed = run("jobs", "--all").stdout
    assert "kb5" in listed and "a.md" in listed


def test_retry_prints_a_summary_not_worker_logs(run, tmp_path) -> None:
    run("base", "create", "kb6")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 8)
    empty = tmp_path / "a.md"
    empty.write_text("", "utf-8")
    run("add", "kb6", str(broken), str(empty), ok=(4,))
    proc = run("retry", "kb6")
    assert "knowledge." not in proc.stderr and "#1 failed" not in proc.stderr
    assert "still failed" in proc.stdout and "broken.pdf" in proc.stdout
    # an empty file cannot succeed by a retry: named, not retried
    assert "a.md: the file is empty" in proc.stdout
    assert json.loads(run("retry", "kb6", "--json").stdout)["not_retried"]


def test_polish_version_help_and_under_hint(run, folder: Path) -> None:
    assert run("--version").stdout.startswith("knowbase ")
    for args in (("--help",), ("add", "--help"), ("search", "--help")):
        assert "<bool>" not in run(*args).stdout
    assert "How many results" in run("search", "--help").stdout
    run("base", "create", "kb7")
    run("add", "kb7", str(folder), ok=(4,))
    miss = run("search", "kb7", "walruses", "--under", "office").stdout
    assert "no results" in miss and "--under docs/office" in miss
    hit = json.loads(run("search", "kb7", "walruses", "--under", "docs/office", "--json").stdout)[
        "results"
    ]
    assert hit[0]["concept_id"] == "docs/office/memo.txt"


def test_search_shows_whole_sentences(run, tmp_path) -> None:
    sentences = [f"Sentence {i} tells about otters number {i}." for i in range(200)]
    doc = tmp_path / "long.txt"
    doc.write_text(" ".join(sentences), "utf-8")
    run("base", "create", "kb8")
    run("add", "kb8", str(doc))
    out = run("search", "kb8", "otters").stdout.split("mode:")[0]
    # the passage under each citation line
    blocks = re.split(r"^\d+\. long\.txt.*\]  \w+ [\d.]+$", out, flags=re.M)[1:]
    lines = [" ".join(b.split()) for b in blocks]
    assert lines
    for line in lines:
        assert line.endswith("."), line  # never cut inside a sentence
        assert line.lstrip("… ").startswith("Sentence"), line


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ends here. Next one starts. And goes on", "… Next one starts."),
        ("Whole. Sentences.", "Whole. Sentences."),
        ("A first one.\n\nA second paragraph", "A first one."),
    ],
)
def test_passage_cuts_at_sentence_ends(text: str, shown: str) -> None:
    assert passage(text, 30) == shown


def test_passage_without_any_sentence_end_cuts_on_a_word() -> None:
    shown = passage("word " * 200, 40)
    assert shown.endswith(" …") and "wor …" not in shown and len(shown) < 50


def test_enable_embedding_says_when_the_chunk_size_changes(run, tmp_path) -> None:
    doc = tmp_path / "long.txt"
    doc.write_text(" ".join(f"Sentence {i} is about otters." for i in range(800)), "utf-8")
    run("base", "create", "kb9")
    run("add", "kb9", str(doc))
    out = run("base", "enable-embedding", "kb9", "hash:d16?window=258").stdout
    assert "now uses hash:d16?window=258" in out
    base = json.loads(run("base", "show", "kb9", "--json").stdout)
    assert base["chunk_size"] < 1024 and base["chunk_overlap"] < 200
    said = f"chunk size 1024 → {base['chunk_size']} tokens (overlap 200 → {base['chunk_overlap']})"
    assert said in " ".join(out.split()), out


def test_enable_embedding_help_and_docs_tell_the_same_story(run) -> None:
    """One behaviour, three texts (issue 25 item 17): no source re-read, and the chunk size
    changes when the model reads fewer tokens than the chunks hold."""
    root = Path(__file__).resolve().parents[2]
    texts = {
        "--help": " ".join(run("base", "enable-embedding", "--help").stdout.split()),
        "http.md": (root / "docs" / "http.md").read_text("utf-8"),
        "console.md": " ".join((root / "docs" / "console.md").read_text("utf-8").split()),
    }
    for name, text in texts.items():
        assert "no source re-read" in text or "no file is read again" in text, name
        assert "re-split" in text or "re-splits" in text, name
        assert "chunk_size" in text, name
        assert "reindexes from raw" not in text, name


def test_readding_a_failed_page_fetches_it_again(run, tmp_path) -> None:
    import functools
    import http.server
    import threading

    site = tmp_path / "site"
    site.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/page.html"
        run("base", "create", "kb10", "--allow-local-urls")
        assert "origin_missing" in run("add", "kb10", url, ok=(4,)).stdout  # 404 for now
        (site / "page.html").write_text("<html><title>Page</title><p>Otters float.</p></html>")
        again = json.loads(run("add", "kb10", url, "--json").stdout)
        assert again["items"] == [] and again["update"]["refetched"] == 1
        assert again["summary"]["indexed"] == 1 and again["summary"]["failed"] == []
    finally:
        server.shutdown()
