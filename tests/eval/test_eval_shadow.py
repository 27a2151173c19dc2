"""``kb eval --model shadow``: the shadow vectors of a switch in progress, scored before they
serve (issue 15 item 6; ``eval/shadow.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowbase.errors import InvalidInput
from knowbase.interfaces.cli import app
from knowbase.operations.add.inputs import AddInput
from knowbase.providers.hashing_provider import hash_vector
from knowbase.service import Knowledge
from knowbase.settings import Settings
from knowbase.units.hashing import text_hash

DOCS = {
    "tides": "Ocean tides are caused by the pull of the Moon.",
    "volcano": "A volcano erupts when magma rises through the crust.",
    "bread": "Sourdough rises because of wild yeast in the starter.",
}
QUERIES = {"q1": "moon pull on the ocean", "q2": "magma crust", "q3": "yeast starter"}


def _set(tmp_path: Path, ids: dict[str, str]) -> tuple[Path, Path]:
    queries = tmp_path / "queries.jsonl"
    queries.write_text("\n".join(json.dumps({"_id": q, "text": t}) for q, t in QUERIES.items()))
    qrels = tmp_path / "qrels.tsv"
    rows = [f"q1\t{ids['tides']}\t1", f"q2\t{ids['volcano']}\t1", f"q3\t{ids['bread']}\t1"]
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return queries, qrels


def _base(kb: Knowledge, name: str, model: str) -> dict[str, str]:
    b = kb.create_base(name, embedding_model_id=model, file_processor_id=None)
    items = kb.add(b.id, [AddInput.note(t, title=k) for k, t in DOCS.items()], wait=True).items
    return {k: kb.get_item(b.id, i.id).concept_id or "" for k, i in zip(DOCS, items, strict=True)}


def _eval(home: Path, base: str, queries: Path, qrels: Path, *extra: str) -> dict:
    r = CliRunner().invoke(app, ["eval", base, "--queries", str(queries), "--qrels", str(qrels),
                                 "--home", str(home), "--json", *extra])  # fmt: skip
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_shadow_scores_equal_a_base_built_with_the_new_model(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with Knowledge(Settings(home=home, test_providers=True)) as kb:
        ids = _base(kb, "old", "hash:d32")
        assert _base(kb, "new", "hash:d48") == ids  # same notes, same Concept IDs
        status = kb.set_embedding_model("old", "hash:d48")  # no worker here: the job waits
        # Fill the shadow set as the switch's build would (every stored body, new model).
        base = kb.get_base("old")
        store = kb.rt.store(base)
        bodies = store.models.bodies_without_vectors("hash:d48")
        with kb.rt.lock(base.id):
            store.models.put_vectors(
                "hash:d48", 48, {h: hash_vector(b, 48) for h, b in bodies.items()}
            )
        assert all(text_hash(b) == h for h, b in bodies.items())
    queries, qrels = _set(tmp_path, ids)
    shadow = _eval(home, "old", queries, qrels, "--model", "shadow")
    built = _eval(home, "new", queries, qrels)
    serving = _eval(home, "old", queries, qrels)
    assert shadow["model"] == {"model": "hash:d48", "shadow": True, "covered": 3, "bodies": 3}
    lanes = {x["lane"]: x["metrics"] for x in shadow["lanes"]}
    assert lanes == {x["lane"]: x["metrics"] for x in built["lanes"]}
    assert serving["model"] is None
    with Knowledge(Settings(home=home, test_providers=True)) as kb:
        # Scoring changed nothing: the old model still serves, the switch still waits.
        assert kb.get_base("old").embedding_model_id == "hash:d32"
        assert kb.model_switch("old")["job_id"] == status["job_id"]  # type: ignore[index]


def test_shadow_without_a_switch_in_progress_is_refused(kb: Knowledge, tmp_path: Path) -> None:
    _base(kb, "b", "hash:d32")
    with pytest.raises(InvalidInput, match="no model switch in progress"):
        kb.eval_context("b", {}, model="shadow")
    with pytest.raises(InvalidInput, match="--model takes"):
        kb.eval_context("b", {}, model="hash:d48")
