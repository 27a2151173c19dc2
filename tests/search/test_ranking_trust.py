"""Issue 29: scores on an absolute scale, the default threshold, merges on one scale, tie order
that survives an export and import, contextual units, small-to-big results."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowbase.index.base import MaterialInput
from knowbase.index.sqlite.store import SqliteIndexStore
from knowbase.operations.add.inputs import AddInput
from knowbase.providers.registry import get_embedding_provider
from knowbase.search.context import with_context
from knowbase.search.search import DEFAULT_THRESHOLD, SearchConfig, VisibleItem, search
from knowbase.service import Knowledge
from knowbase.settings import Settings
from knowbase.units.chunk import Chunk
from knowbase.units.context import unit_text
from knowbase.units.hashing import text_hash

pytestmark = pytest.mark.timeout(120)


def everything(ids: set[str]) -> dict[str, VisibleItem]:
    return {i: VisibleItem(i, "file", i, i) for i in ids}


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = SqliteIndexStore.open(tmp_path / "i.sqlite", base_id="b", dims=None)
    texts = {
        "kelp": "Kelp forests grow fast in cold water near the coast.",
        "otter": "Sea otters float on their backs and hold hands while they sleep.",
        "reef": "Coral reefs shelter many fish in warm shallow water.",
        "owl": "Owls hunt at night and see well in the dark.",
    }
    for mid, text in texts.items():
        s.rebuild_material(
            MaterialInput(mid, f"{mid}.md", text, [Chunk(text, 0, len(text), 0)]), {}
        )
    yield s
    s.close()


def test_threshold_cuts_the_same_way_across_queries(store: SqliteIndexStore) -> None:
    """A hit's score is its own match, not its place among the query's hits: a weak best hit
    (one query word of three) is cut where a full match of the same unit is kept."""
    config = SearchConfig(threshold=0.3)
    full = search(store, "kelp", config=config, embedder=None, reranker=None, visible=everything)
    assert [r.item_id for r in full.results] == ["kelp"] and full.results[0].score >= 0.3
    weak = search(store, "kelp zzqx wubble", config=SearchConfig(threshold=0.0), embedder=None,
                  reranker=None, visible=everything)  # fmt: skip
    assert [r.item_id for r in weak.results] == ["kelp"]  # rank 1: min-max made it 1.0
    assert 0 < weak.results[0].score < 0.3 and weak.results[0].score_kind == "keyword"
    cut = search(store, "kelp zzqx wubble", config=config, embedder=None, reranker=None,
                 visible=everything)  # fmt: skip
    assert cut.results == [] and cut.explain["threshold"]["cut"] == 1
    # the score of a unit for a query does not move when another unit matches better
    both = search(store, "kelp otters", config=SearchConfig(threshold=0.0), embedder=None,
                  reranker=None, visible=everything)  # fmt: skip
    alone = search(store, "kelp otters", config=SearchConfig(threshold=0.0), embedder=None,
                   reranker=None, visible=lambda ids: everything(ids - {"otter"}))  # fmt: skip
    score = {r.item_id: r.score for r in both.results}
    assert alone.results[0].item_id == "kelp" and alone.results[0].score == score["kelp"]


@pytest.fixture
def home(tmp_path: Path):  # type: ignore[no-untyped-def]
    kb = Knowledge(Settings(home=tmp_path / "home", test_providers=True))
    yield kb
    kb.close()


NOTES = [
    "The lighthouse keeper wrote in the logbook every night.",
    "Kelp forests grow fast in cold water near the coast.",
    "Sea otters hold hands while they sleep.",
    "Owls hunt at night and see well in the dark.",
]


def test_gibberish_on_a_hybrid_base_returns_nothing_at_the_default(home: Knowledge) -> None:
    base = home.create_base("h", embedding_model_id="hash:d256")
    home.add(base.id, [AddInput.note(n) for n in NOTES], wait=True)
    assert base.threshold is None  # the documented default applies
    r = home.search("h", "zzzzqqq nonexistent gibberish")
    assert r.mode == "hybrid" and r.results == []
    assert r.explain["threshold"] == {"value": DEFAULT_THRESHOLD, "source": "default",
                                      "cut": r.explain["threshold"]["cut"]}  # fmt: skip
    assert r.explain["threshold"]["cut"] >= 1  # the dense lane found something; it was cut
    hit = home.search("h", "lighthouse logbook").results
    assert hit and "lighthouse" in hit[0].text and hit[0].score_kind == "hybrid"


def test_a_multi_base_search_puts_the_relevant_hit_first(home: Knowledge) -> None:
    """Raw BM25 of a keyword-stuffed passage (~4.5) no longer outranks the one passage that
    answers, on another base of another kind."""
    stuffed = home.create_base("stuffed")  # BM25-only, listed first
    home.add(stuffed.id, [AddInput.note("keeper keeper keeper of the zoo keeper"),
                          *[AddInput.note(f"animal {n} in the zoo") for n in range(6)]],
             wait=True)  # fmt: skip
    other = home.create_base("other", embedding_model_id="hash:d256")
    home.add(other.id, [AddInput.note("A ship's logbook records the weather.")], wait=True)
    answer = home.create_base("answer", embedding_model_id="hash:d256")
    home.add(answer.id, [AddInput.note(n) for n in NOTES], wait=True)
    found = home.search_many(["stuffed", "other", "answer"], "lighthouse keeper logbook")
    top = found.results[0]
    assert top.base_id == answer.id and "lighthouse keeper" in top.result.text
    scores = [m.result.score for m in found.results]
    assert scores == sorted(scores, reverse=True)  # merged on one scale


def test_tie_order_survives_export_and_import(home: Knowledge, tmp_path: Path) -> None:
    base = home.create_base("ties")
    same = "Tide tables list the high and low water times: {}."
    # one word apart: equal scores, yet not the same passage (that one would be listed once)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    home.add(base.id, [AddInput.note(same.format(w), title=f"t{n}") for n, w in enumerate(words)],
             wait=True)  # fmt: skip
    home.add(base.id, [AddInput.note("Tide pools hold crabs.")], wait=True)
    before = home.search("ties", "tide water times").results
    assert len({r.score for r in before[:6]}) == 1  # six equal scores
    paths = [r.concept_id for r in before]
    assert paths[:6] == sorted(paths[:6])  # equal scores in Concept ID order
    home.export_base("ties", tmp_path / "ties.kbz")
    home.import_base(tmp_path / "ties.kbz", "ties again")
    after = home.search("ties again", "tide water times").results
    assert [r.concept_id for r in after] == paths
    assert [r.chunk_id for r in after] != [r.chunk_id for r in before]  # new ids, same order


def test_contextual_text_is_searched_and_embedded_but_the_slice_is_stored(
    home: Knowledge, tmp_path: Path
) -> None:
    base = home.create_base("ctx", embedding_model_id="hash:d64")
    doc = tmp_path / "tarball.md"
    doc.write_text(
        "# Archiver\n\nIt packs files.\n\n## Options\n\nUse -C to change directory first.\n",
        "utf-8",
    )
    home.add(base.id, [AddInput.file(doc)], wait=True)
    # "archiver" and "options" are only in the heading path of the second section's chunk
    r = home.search("ctx", "tarball options", top_k=5)
    hit = next(x for x in r.results if "change directory" in x.text)
    assert hit.text == "## Options\n\nUse -C to change directory first."  # verbatim slice
    content = doc.read_text("utf-8")
    stored = home.rt.store(home.get_base("ctx"))
    assert stored.content_text(hit.item_id)[hit.char_start : hit.char_end] == hit.text
    assert content.strip().endswith(hit.text)
    # the keyword lane found it by its title (not in the slice)
    assert "tarball" not in hit.text.lower()
    # its vector is the model's vector of the unit text, keyed by the slice's hash
    provider = get_embedding_provider("hash:d64", home.settings)
    text = unit_text("tarball.md", hit.locator, hit.text)
    assert text.startswith("tarball > Archiver > Options\n\n")
    vec = stored.stored_vectors({text_hash(hit.text)})[text_hash(hit.text)]
    assert vec.tolist() == pytest.approx(provider.embed([text])[0].tolist(), abs=1e-6)


def test_context_returns_merged_exact_offset_surroundings(tmp_path: Path) -> None:
    s = SqliteIndexStore.open(tmp_path / "c.sqlite", base_id="b", dims=None)
    paras = [f"Paragraph {n} says {'alpha' if n in (2, 3) else 'beta'} things." for n in range(6)]
    content = "\n\n".join(paras)
    chunks, at = [], 0
    for n, p in enumerate(paras):
        chunks.append(Chunk(p, at, at + len(p), n))
        at += len(p) + 2
    s.rebuild_material(MaterialInput("m", "m.md", content, chunks), {})
    try:
        r = search(s, "alpha", config=SearchConfig(threshold=0.0), embedder=None, reranker=None,
                   visible=everything)  # fmt: skip
        assert [x.unit_index for x in r.results] == [2, 3]
        wide = with_context(s, r.results, 30)  # ~2 paragraphs a hit: they touch, so merge
        assert len(wide) == 1 and wide[0].rank == 1
        w = wide[0]
        assert w.text == content[w.char_start : w.char_end]
        assert w.char_start <= chunks[2].char_start and w.char_end >= chunks[3].char_end
        assert w.context is not None and len(w.context["chunks"]) == 2
        assert (w.context["hit_start"], w.context["hit_end"]) == (
            r.results[0].char_start,
            r.results[0].char_end,
        )
        narrow = with_context(s, r.results[:1], 1)  # a budget under the hit: the hit itself
        assert narrow[0].text == r.results[0].text
    finally:
        s.close()


def test_search_with_context_through_the_facade(home: Knowledge, tmp_path: Path) -> None:
    base = home.create_base("big", chunk_size=16, chunk_overlap=0)
    doc = tmp_path / "guide.md"
    doc.write_text(
        "# Guide\n\nThe tool packs files into one archive for you.\n\n"
        "It keeps owners and modes of every file it packs.\n\n"
        "Give the zanzibar flag to change the directory first.\n",
        "utf-8",
    )
    home.add(base.id, [AddInput.file(doc)], wait=True)
    plain = home.search("big", "zanzibar").results
    wide = home.search("big", "zanzibar", context=64).results
    assert len(plain[0].text) < len(wide[0].text) and "zanzibar" in wide[0].text
    raw = home.rt.store(home.get_base("big")).content_text(wide[0].item_id)
    assert raw[wide[0].char_start : wide[0].char_end] == wide[0].text
