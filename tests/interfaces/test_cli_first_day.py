"""Issue 42: the first day with ``kb`` (the real CLI in a subprocess, as a user drives it)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
def corpus(tmp_path: Path) -> Path:
    """A folder with a sub-folder: a policy, a memo and notes."""
    root = tmp_path / "corpus"
    (root / "office").mkdir(parents=True)
    (root / "notes" / "it").mkdir(parents=True)
    (root / "office" / "travel.md").write_text(
        "# Travel policy\n\nBook trains for trips under four hours. Walruses travel free.\n",
        "utf-8",
    )
    (root / "office" / "memo.txt").write_text("The memo mentions otters.", "utf-8")
    (root / "notes" / "it" / "vpn.md").write_text("# VPN\n\nConnect with the client.\n", "utf-8")
    return root


def test_a_file_inside_an_added_folder_updates_its_item(run, corpus: Path) -> None:
    """Item 3: adding a file the base holds inside a folder updates it; no second copy."""
    run("base", "create", "b")
    run("add", "b", str(corpus))
    travel = corpus / "office" / "travel.md"
    travel.write_text(
        "# Travel policy\n\nBook trains for trips under five hours. Walruses travel free.\n",
        "utf-8",
    )
    again = json.loads(run("add", "b", str(travel), "--json").stdout)
    assert again["items"] == []
    assert [u["concept_id"] for u in again["updated"]] == ["corpus/office/travel.md"]
    assert again["update"]["changed"] == 1
    tree = json.loads(run("tree", "b", "--json").stdout)["nodes"]
    assert [n["title"] for n in tree if n["depth"] == 0] == [str(corpus)]
    hits = json.loads(run("search", "b", "walruses", "--json").stdout)["results"]
    assert [h["concept_id"] for h in hits] == ["corpus/office/travel.md"]
    assert "five hours" in hits[0]["text"]


def test_a_folder_added_after_its_file_adopts_the_files_item(run, corpus: Path) -> None:
    """Item 3, the reverse order: the file added alone first, its folder after: one item (the
    same id, its tag kept) under the folder's Concept ID, one hit."""
    travel = corpus / "office" / "travel.md"
    run("base", "create", "b")
    alone = json.loads(run("add", "b", str(travel), "--tag", "policy", "--json").stdout)
    item_id = alone["items"][0]["id"]
    run("add", "b", str(corpus))
    hits = json.loads(run("search", "b", "walruses", "--json").stdout)["results"]
    assert [(h["item_id"], h["concept_id"]) for h in hits] == [(item_id, "corpus/office/travel.md")]
    tree = json.loads(run("tree", "b", "--json").stdout)["nodes"]
    assert [n["title"] for n in tree if n["depth"] == 0] == [str(corpus)]
    tagged = json.loads(run("search", "b", "walruses", "--tag", "policy", "--json").stdout)
    assert [h["item_id"] for h in tagged["results"]] == [item_id]  # its tag kept


def test_identical_passages_are_listed_once(run, corpus: Path, tmp_path: Path) -> None:
    """Item 3: the same passage held by two items shows once in a result list."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "travel-copy.md").write_bytes((corpus / "office" / "travel.md").read_bytes())
    run("base", "create", "b")
    run("add", "b", str(corpus), str(other / "travel-copy.md"))
    hits = json.loads(run("search", "b", "walruses", "--json").stdout)["results"]
    assert len(hits) == 1


INTRO = (
    "The kitchen has a coffee machine that everyone on the floor shares. Keep it clean, report "
    "faults to the office manager and use only filtered water. " * 4
)
HANDBOOK = f"""# Handbook

## Kitchen

{INTRO}

| Task | How often |
|---|---|
| Clean the drip tray | daily |
| Refill the bean hopper | when empty |
| Wipe the counter | daily |
| Descale | every 6 weeks |

## Travel

| City | Per diem |
|---|---|
{"".join(f"| Town {n} | {n * 10} EUR |{chr(10)}" for n in range(1, 30))}| Tokyo | 22,000 JPY |
| Sydney | 150 AUD |

## Tools

{INTRO}
Before a release, frobnicate the widgets.
"""


@pytest.fixture
def handbook(run, tmp_path: Path) -> None:
    (tmp_path / "handbook.md").write_text(HANDBOOK, "utf-8")
    run("base", "create", "hb")
    run("add", "hb", str(tmp_path / "handbook.md"))


def _first_hit(out: str) -> str:
    """The text lines of the first result in ``kb search`` output."""
    lines = out.split("\n")
    body = []
    for line in lines[1:]:
        if line.startswith(("2.", "mode:")):
            break
        body.append(line)
    return "\n".join(body)


def test_the_snippet_shows_the_answer(run, handbook) -> None:
    """Item 1: the snippet is centred on the matching lines, a table row under its header."""
    out = run("search", "hb", "how often should the coffee machine be descaled").stdout
    first = _first_hit(out)
    assert "| Descale | every 6 weeks |" in first
    assert len(first) < 700  # a snippet, not the whole section
    tokyo = _first_hit(run("search", "hb", "Tokyo per diem").stdout)
    assert "| Tokyo | 22,000 JPY |" in tokyo
    assert tokyo.strip().startswith("| City | Per diem |")  # the header above the row
    assert "Town 1 |" not in tokyo  # but not the whole table
    last = _first_hit(run("search", "hb", "frobnicate").stdout)
    assert "frobnicate the widgets" in last and len(last) < 400  # the chunk's last line


def test_matched_words_are_marked(run, handbook, tmp_path: Path) -> None:
    """Item 1: in a terminal the matched words stand out (bold yellow)."""
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home"), "FORCE_COLOR": "1",
           "COLUMNS": "200"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", "search", "hb", "frobnicate"],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "\x1b[1;33mfrobnicate\x1b[0m" in out
    hit = json.loads(run("search", "hb", "frobnicate", "--json").stdout)["results"][0]
    s, e = hit["snippet"]["marks"][0]
    assert hit["snippet"]["text"][s:e] == "frobnicate"


def test_full_and_context_print_whole_passages(run, handbook) -> None:
    """Item 1: ``--full`` prints the whole passage; ``--context`` prints the context too."""
    full = _first_hit(run("search", "hb", "descaled", "--full").stdout)
    assert "Handbook" in full or "kitchen has a coffee machine" in full
    assert "| Descale | every 6 weeks |" in full
    hit = json.loads(run("search", "hb", "frobnicate", "--context", "2000", "--json").stdout)
    assert "Descale" in hit["results"][0]["text"]  # the neighbouring chunks are in it
    text = _first_hit(run("search", "hb", "frobnicate", "--context", "2000").stdout)
    assert "| Descale | every 6 weeks |" in text and "frobnicate the widgets" in text


def test_rm_takes_a_folder_and_fails_on_nothing(run, corpus: Path) -> None:
    """Item 4: ``kb rm`` takes the folder prefix ``--under`` and ``kb label`` accept; a name
    that matches nothing exits 1."""
    run("base", "create", "b")
    run("add", "b", str(corpus))
    assert run("search", "b", "otters", "--under", "corpus/office").stdout.startswith("1.")
    removed = run("rm", "b", "corpus/office")
    assert "deleted corpus/office" in removed.stdout
    nodes = json.loads(run("tree", "b", "--json").stdout)["nodes"]
    concept_ids = [n.get("concept_id") for n in nodes]
    assert "corpus/office/memo.txt" not in concept_ids
    assert "corpus/notes/it/vpn.md" in concept_ids
    missing = run("rm", "b", "corpus/nothing-here", ok=(1,))
    assert "not found" in missing.stderr


def test_counts_are_files_everywhere(run, corpus: Path) -> None:
    """Item 5: the add summary, kb base list, kb base show and kb tree count the same files;
    the folder whose files failed is not one more failure."""
    (corpus / "office" / "empty.md").write_text("", "utf-8")
    (corpus / "notes" / "blank.md").write_text("", "utf-8")
    run("base", "create", "b")
    added = run("add", "b", str(corpus), ok=(4,)).stdout
    assert "3 indexed" in added and "2 failed" in added
    listed = json.loads(run("base", "show", "b", "--json").stdout)
    assert listed["item_counts"] == {"completed": 3, "failed": 2}
    assert "ready, 2 failed" in listed["state"]
    table = run("base", "list").stdout
    assert "2 failed" in table and "3 failed" not in table
    tree = run("tree", "b").stdout
    assert "corpus (2 of 5 files failed)" in tree
    assert "office (1 of 3 files failed)" in tree


def test_where_warns_on_unknown_keys_and_refuses_bad_operators(run, corpus: Path) -> None:
    """Item 7: a key no item has warns with the keys there are; ``year=>2023`` is refused."""
    run("base", "create", "b")
    run("add", "b", str(corpus), "--meta", "year=2024")
    found = run("search", "b", "otters", "--where", "year>=2023")
    assert found.stdout.startswith("1.") and "warning" not in found.stderr
    typo = run("search", "b", "otters", "--where", "yaer>=2023")
    assert "no results" in typo.stdout
    assert "yaer" in typo.stderr and "year" in typo.stderr.split("yaer")[1]
    bad = run("search", "b", "otters", "--where", "year=>2023", ok=(1,))
    assert "invalid_filter" in bad.stderr and "year>=2023" in bad.stderr


def test_a_query_the_model_cannot_read_says_why(run, corpus: Path) -> None:
    """Item 11: a Chinese query on a Latin-only model says why the search was keyword-only."""
    run("base", "create", "b", "--embedding", "hash:d64?scripts=Latin")
    run("add", "b", str(corpus))
    out = run("search", "b", "咖啡机多久除垢一次").stdout
    assert "no results" in out and "mode: bm25" in out
    assert "keyword-only" in out and "does not read" in out


def test_eval_says_which_judged_ids_the_base_lacks(run, corpus: Path, tmp_path: Path) -> None:
    """Item 8: qrels naming documents the base lacks are counted; none matching is refused."""
    run("base", "create", "b")
    run("add", "b", str(corpus))
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        '{"_id": "q1", "text": "otters"}\n{"_id": "q2", "text": "walruses travel"}\n', "utf-8"
    )
    some = tmp_path / "some.tsv"
    some.write_text(
        "query-id\tcorpus-id\tscore\nq1\tcorpus/office/memo.txt\t1\nq2\tnot-here\t1\n", "utf-8"
    )
    partly = run("eval", "b", "--queries", str(queries), "--qrels", str(some))
    assert "1 of 2 judged document ids are not in b" in partly.stderr
    none = tmp_path / "none.tsv"
    none.write_text("query-id\tcorpus-id\tscore\nq1\tdoc-1\t1\nq2\tdoc-2\t1\n", "utf-8")
    refused = run("eval", "b", "--queries", str(queries), "--qrels", str(none), ok=(1,))
    assert "invalid_input" in refused.stderr
    assert "none of the 2 judged document ids" in refused.stderr


def test_label_shows_what_a_file_inherits(run, corpus: Path) -> None:
    """Item 6: ``kb label`` on a file shows its folders' labels and where they come from."""
    run("base", "create", "b")
    run("add", "b", str(corpus), "--tag", "handbook", "--meta", "year=2024")
    run("label", "b", "corpus/notes", "--tag", "it", "--meta", "team=infra")
    shown = run("label", "b", "corpus/notes/it/vpn.md").stdout
    assert "vpn.md: tags none; metadata none" in shown
    assert "from corpus/notes: tags it; metadata team=infra" in shown
    assert "from corpus: tags handbook; metadata year=2024" in shown
    data = json.loads(run("label", "b", "corpus/notes/it/vpn.md", "--json").stdout)
    assert [s["path"] for s in data["inherited"]] == ["corpus/notes", "corpus"]


def test_a_name_that_is_not_utf8_is_named(run, corpus: Path) -> None:
    """Item 10: the add summary names the file whose name is not UTF-8, bytes escaped."""
    with open(os.fsencode(corpus / "notes") + b"/r\xe9sum\xe9.md", "wb") as fh:
        fh.write(b"# CV\n\nSome text.\n")
    run("base", "create", "b")
    out = run("add", "b", str(corpus)).stdout
    assert "1 skipped (undecodable_name 1)" in out
    assert "skipped notes/r\\xe9sum\\xe9.md: undecodable_name" in out
    summary = json.loads(run("add", "b", str(corpus), "--json").stdout)["summary"]
    assert summary["undecodable"] == ["notes/r\\xe9sum\\xe9.md"]


def test_help_has_no_rst_and_dates_read_as_dates(run) -> None:
    """Item 12: help without RST markup; kb base show gives created_at as a date."""
    for command in ("add", "search", "import-beir"):
        assert "``" not in run(command, "--help").stdout, command
    run("base", "create", "b")
    shown = run("base", "show", "b").stdout
    assert re.search(r"created_at\s+20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC", shown), shown


def test_a_readd_says_the_files_state(run, corpus: Path) -> None:
    """Item 12: a re-add of unchanged files does not claim to have indexed them now."""
    run("base", "create", "b")
    run("add", "b", str(corpus))
    again = run("add", "b", str(corpus)).stdout
    assert "3 unchanged" in again and "files now: 3 indexed" in again


def test_jobs_and_tree_read_at_80_columns(run, corpus: Path, tmp_path: Path) -> None:
    """Item 12: kb jobs legible at 80 columns (not "ind… run…"); kb tree one line a node."""
    deep = corpus / "a-rather-long-folder-name-for-a-narrow-terminal" / "and-a-sub-folder-too"
    deep.mkdir(parents=True)
    (deep / "a-file-with-a-long-name-as-people-write-them.md").write_text("Deep text.", "utf-8")
    run("base", "create", "b")
    run("add", "b", str(corpus))
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home"), "COLUMNS": "80"}

    def narrow(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "knowbase.interfaces.cli", *args],
            capture_output=True, text=True, env=env, timeout=120, check=True,
        ).stdout  # fmt: skip

    (corpus / "office" / "memo.txt").write_text("The memo now mentions seals.", "utf-8")
    run("add", "b", str(corpus), "--no-wait")
    jobs = narrow("jobs")
    assert "sync" in jobs and "pending" in jobs and "…" not in jobs
    tree = narrow("tree", "b")
    line = next(x for x in tree.splitlines() if "a-file-with-a-long-name" in x)
    assert line.endswith("a-file-with-a-long-name-as-people-write-them.md")  # not wrapped


def test_a_pruned_folder_is_not_listed_again(run, corpus: Path) -> None:
    """Item 9: a folder that lost its files (still on disk, empty) is pruned for good."""
    (corpus / "notes" / "hr").mkdir()
    (corpus / "notes" / "hr" / "leave.md").write_text("# Leave\n\nThirty days.\n", "utf-8")
    run("base", "create", "b")
    run("add", "b", str(corpus))
    (corpus / "notes" / "hr" / "leave.md").unlink()
    pruned = run("sync", "b", "--prune").stdout
    assert f"{corpus / 'notes' / 'hr'} (deleted)" in pruned
    again = run("sync", "b").stdout
    assert "0 vanished" in again and "kept; --prune" not in again
    tree = json.loads(run("tree", "b", "--json").stdout)["nodes"]
    assert not any(n["title"].endswith("/hr") for n in tree)


def test_a_chunk_that_starts_mid_word_is_shown_from_a_word(run, tmp_path: Path) -> None:
    """Item 12: a chunk whose overlap starts inside a word ("mple outputs") is shown from
    the next word, marked "…"."""
    words = " ".join(f"example{i} outputs otters" for i in range(3000))
    doc = tmp_path / "long.txt"
    doc.write_text(words, "utf-8")
    run("base", "create", "b")
    run("add", "b", str(doc))
    hits = json.loads(run("search", "b", "otters", "-k", "20", "--json").stdout)["results"]
    mid = [h for h in hits if h["text"][0].islower() and not h["text"].startswith("example")]
    assert mid, [h["text"][:20] for h in hits]  # the overlap restarted inside a word
    out = run("search", "b", "otters", "-k", "20").stdout
    for h in mid:
        head = h["text"].split(" ", 1)[0]
        assert f"   {head} " not in out  # the partial word is never shown as a start


def test_repeats_do_not_crowd_out_the_next_document(run, corpus: Path, tmp_path: Path) -> None:
    """Item 3: with -k 2 and one passage held twice, the second result is another document."""
    other = tmp_path / "copies"
    other.mkdir()
    text = (corpus / "office" / "travel.md").read_bytes()
    (other / "a.md").write_bytes(text)
    (other / "b.md").write_bytes(text)
    (other / "c.md").write_text("Walruses nap on ice.", "utf-8")
    run("base", "create", "b")
    run("add", "b", str(other))
    hits = json.loads(run("search", "b", "walruses travel", "-k", "2", "--json").stdout)
    assert sorted(h["concept_id"] for h in hits["results"]) == ["copies/a.md", "copies/c.md"]
