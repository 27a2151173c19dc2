"""kb import-beir then kb eval end to end (hash: model, so only the plumbing is measured)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from knowbase.interfaces.cli import app

CORPUS = [
    {"_id": "d1", "title": "Tides", "text": "Ocean tides are caused by the pull of the Moon."},
    {"_id": "d/2", "title": "Volcanoes", "text": "A volcano erupts when magma rises."},
    {"_id": ".d3", "title": "", "text": "Sourdough rises because of wild yeast."},
]


def test_import_beir_then_eval_lanes_json_and_run(tmp_path: Path) -> None:
    beir = tmp_path / "set"
    beir.mkdir()
    (beir / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in CORPUS))
    queries = [{"_id": "q1", "text": "what causes tides"}, {"_id": "q2", "text": "magma"},
               {"_id": "q3", "text": "?!"}]  # fmt: skip
    (beir / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries))
    qrels = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq2\td/2\t1\nq3\t.d3\t1\n"
    (beir / "qrels.tsv").write_text(qrels)
    home = str(tmp_path / "home")
    runner = CliRunner()
    r = runner.invoke(app, ["import-beir", str(beir), "B", "--embedding", "hash:d64",
                            "--home", home, "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    run = tmp_path / "run.txt"
    r = runner.invoke(app, ["eval", "B", "--queries", str(beir / "queries.jsonl"),
                            "--qrels", str(beir / "qrels.tsv"), "--home", home, "--json",
                            "--run-out", str(run), "--lane", "bm25"])  # fmt: skip
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    lanes = {x["lane"]: x for x in data["lanes"]}
    assert set(lanes) == {"bm25", "vector", "hybrid"} and data["queries"] == 3
    bm25 = lanes["bm25"]["per_query"]
    assert bm25["q1"]["mrr@10"] == 1.0 and bm25["q2"]["mrr@10"] == 1.0  # ids read back
    assert bm25["q3"] == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    lines = [ln.split() for ln in run.read_text().splitlines()]
    assert [ln[:4] for ln in lines] == [["q1", "Q0", "d1", "1"], ["q2", "Q0", "d/2", "1"]]
    assert all(ln[5] == "knowbase-bm25" for ln in lines)


def test_sweep_rows_equal_the_hybrid_lane_under_each_setting(tmp_path: Path) -> None:
    """``kb eval --sweep`` scores the hybrid lane over the fusion grid; each row equals what
    the plain hybrid lane scores once the base is set to that fusion (``kb base set``), and
    the table marks the best row."""
    beir = tmp_path / "set"
    beir.mkdir()
    docs = [*CORPUS] + [
        {"_id": f"x{i}", "title": "", "text": f"Tides and magma notes, number {i}."}
        for i in range(12)
    ]
    (beir / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs))
    queries = [{"_id": "q1", "text": "what causes tides"}, {"_id": "q2", "text": "magma rises"},
               {"_id": "q3", "text": "wild yeast"}]  # fmt: skip
    (beir / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries))
    (beir / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td/2\t1\nq3\t.d3\t1\n"
    )
    home = str(tmp_path / "home")
    runner = CliRunner()
    r = runner.invoke(app, ["import-beir", str(beir), "S", "--embedding", "hash:d64",
                            "--home", home, "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    ask = ["eval", "S", "--queries", str(beir / "queries.jsonl"),
           "--qrels", str(beir / "qrels.tsv"), "--home", home]  # fmt: skip
    r = runner.invoke(app, [*ask, "--sweep", "--json"])
    assert r.exit_code == 0, r.output
    grid = {row["settings"]: row["metrics"] for row in json.loads(r.stdout)["sweep"]}
    assert len(grid) == 16 and "convex(α=0.2)" in grid and "rrf(k=60, α=0.5)" in grid
    for fusion, alpha, k, label in (("convex", "0.2", None, "convex(α=0.2)"),
                                    ("rrf", "0.9", "20", "rrf(k=20, α=0.9)")):  # fmt: skip
        set_args = ["base", "set", "S", "--home", home, "--fusion", fusion, "--fusion-alpha", alpha]
        r = runner.invoke(app, set_args + (["--rrf-k", k] if k else []))
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, [*ask, "--json", "--lane", "hybrid"])
        hybrid = next(x for x in json.loads(r.stdout)["lanes"] if x["lane"] == "hybrid")
        assert hybrid["metrics"] == grid[label]
    table = runner.invoke(app, [*ask, "--sweep"])
    assert table.exit_code == 0 and "sweep (hybrid, no reranker" in table.stdout
    rows = [ln for ln in table.stdout.splitlines() if ln.startswith("│")]
    assert sum(" *" in ln for ln in rows) == 1  # one best row
