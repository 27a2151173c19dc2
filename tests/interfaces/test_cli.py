"""The real ``kb`` in a subprocess: create, add, search, status, conflicts, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.fixture
def run(tmp_path):
    env = {**os.environ, "KNOWBASE_HOME": str(tmp_path / "home")}

    def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "knowbase.interfaces.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kb {' '.join(args)} failed: {proc.stderr}")
        return proc

    return _run


def test_cli_cycle(run, tmp_path):
    doc = tmp_path / "otters.md"
    doc.write_text("# Otters\n\nSea otters hold hands while they sleep.\n", encoding="utf-8")
    created = json.loads(run("base", "create", "wild", "--json").stdout)
    assert created["embedding_model_id"] is None
    added = json.loads(run("add", "wild", str(doc), "--json").stdout)
    assert added["items"][0]["status"] == "completed"
    assert added["items"][0]["concept_id"] == "otters.md"
    out = json.loads(run("search", "wild", "otters sleep", "--json").stdout)
    assert out["results"][0]["concept_id"] == "otters.md"
    assert out["mode"] == "bm25"
    status = json.loads(run("status", "wild", "--json").stdout)
    assert status["counts"] == {"completed": 1}
    human = run("search", "wild", "otters").stdout
    assert "otters.md" in human


def test_cli_detect_conflict_exit_code(run, tmp_path):
    doc = tmp_path / "a.txt"
    doc.write_text("alpha", encoding="utf-8")
    run("base", "create", "c")
    run("add", "c", str(doc))
    proc = run("add", "c", str(doc), "--conflict", "detect", "--json", check=False)
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["status"] == "conflicts"


def test_cli_errors_have_codes(run):
    proc = run("search", "missing-base", "x", check=False)
    assert proc.returncode == 1
    assert "not_found" in proc.stderr
    run("base", "create", "e")
    proc = run("search", "e", "!!!", "--json", check=False)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["code"] == "no_searchable_tokens"
    proc = run("add", "e", "--note", "   ", check=False)
    assert proc.returncode == 1 and "empty_content" in proc.stderr


def test_cli_jobs_newest_first_and_status_counts_every_active_job(run, tmp_path):
    from knowbase.operations import kinds
    from knowbase.runtime import queue_of
    from knowbase.service import Knowledge
    from knowbase.settings import load_settings

    with Knowledge(load_settings(tmp_path / "home")) as kb:
        base = kb.create_base("queued")
        with kb.rt.catalog.write_tx() as conn:
            ids = [
                kb.rt.jobs.enqueuer.enqueue(
                    conn,
                    kinds.DELETE_SUBTREE.name,
                    {"base_id": base.id, "root_item_ids": []},
                    queue=queue_of(base.id),
                ).id
                for _ in range(250)  # more than the listing's default page of 200
            ]
    status = json.loads(run("status", "queued", "--json").stdout)
    assert status["active_jobs"] == 250
    page = json.loads(run("jobs", "--base", "queued", "--limit", "2", "--json").stdout)
    assert [j["id"] for j in page] == [ids[-1], ids[-2]]
    more = json.loads(
        run("jobs", "--base", "queued", "--limit", "2", "--before", ids[-2], "--json").stdout
    )
    assert [j["id"] for j in more] == [ids[-3], ids[-4]]


def test_cli_base_create_checks_the_model_id(run):
    proc = run("base", "create", "m", "--embedding", "", check=False)  # was an IntegrityError
    assert proc.returncode == 1 and "invalid_input" in proc.stderr, proc.stderr
    # the subprocess inherits KNOWBASE_TEST_PROVIDERS=1 from tests/conftest.py
    created = json.loads(run("base", "create", "h", "--embedding", "hash:d8", "--json").stdout)
    assert created["dimensions"] == 8
    assert [b["name"] for b in json.loads(run("base", "list", "--json").stdout)] == ["h"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nosuchcmd",), "No such command 'nosuchcmd'"),
        (("search",), "Missing argument"),
        (("serve", "--host", "0.0.0.0"), "exposes the API beyond this machine"),
        (("serve", "--watch", "--no-workers"), "kb worker --watch"),
    ],
)
def test_usage_errors_exit_2_with_a_message_not_a_traceback(run, args, message) -> None:  # type: ignore[no-untyped-def]
    out = run(*args, check=False)
    assert out.returncode == 2, out.stderr
    assert message in " ".join(out.stderr.split())
    assert "Traceback" not in out.stderr
