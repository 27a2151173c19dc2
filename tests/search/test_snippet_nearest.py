"""Issue 42: a vector-only hit's snippet is centred on its sentence nearest the query."""

from __future__ import annotations

import numpy as np
import pytest

from knowbase.operations.add.inputs import AddInput
from knowbase.providers.hashing_provider import HashEmbeddings
from knowbase.search.nearest import MAX_CHARS, nearest_units, units
from knowbase.search.snippet import snippet
from knowbase.service import Knowledge
from knowbase.settings import load_settings

ANSWER = "Anyone who misplaces a building badge must tell the security desk before the next shift."
# ~1,000 characters of office routine, the answer in the middle: no word of the query below.
PASSAGE = " ".join(
    [
        "Building access rules apply to staff, contractors and visitors alike.",
        "The main doors open at seven and lock at eight in the evening.",
        "Guests sign the visitor book at reception and wear a paper pass.",
        "Contractors are escorted by the facilities team at all times.",
        "Cameras cover the lobby, the stairs and the car park.",
        "The alarm is tested every first Monday of the month.",
        "Server rooms need a second approval from the IT manager.",
        ANSWER,
        "A replacement is printed within two working days.",
        "Tailgating through the turnstiles is a disciplinary matter.",
        "Night staff enter through the loading bay after hours.",
    ]
)
QUERY = "what should I do if I lose my ID card"


def test_a_given_nearest_sentence_is_the_centre() -> None:
    """The pure part: with no matching line, the snippet is centred on ``nearest``."""
    at = PASSAGE.index(ANSWER)
    shown = snippet(PASSAGE, QUERY, nearest=(at, at + len(ANSWER)))
    assert ANSWER in shown.text and not shown.matched and shown.nearest
    assert shown.start > 0 and shown.start <= at  # not the opening
    assert ANSWER not in snippet(PASSAGE, QUERY).text  # without it: the opening, as before


def test_a_matching_line_wins_over_nearest() -> None:
    at = PASSAGE.index(ANSWER)
    shown = snippet(PASSAGE, "turnstile", nearest=(at, at + len(ANSWER)))
    assert shown.matched and not shown.nearest and "turnstiles" in shown.text


def test_nearest_units_is_one_bounded_call() -> None:
    """One ``embed`` call for every text; a text past the budget keeps its opening (None)."""
    calls: list[int] = []

    class Counting(HashEmbeddings):
        def embed(self, texts):  # counts the real provider's calls
            calls.append(len(texts))
            return super().embed(texts)

    provider = Counting("d64")
    q = provider.embed(["security desk badge"])[0]
    calls.clear()
    many = [PASSAGE] * (MAX_CHARS // len(PASSAGE) + 2)
    spans = nearest_units(many, q, provider)
    assert calls == [sum(len(units(PASSAGE)) for s in spans if s is not None)]
    assert spans[0] is not None and spans[-1] is None  # the best hits first, within budget
    s, e = spans[0]
    assert PASSAGE[s:e] == ANSWER  # the hash provider shares words: "badge", "security desk"
    assert nearest_units(["One sentence only here."], np.ones(64), provider) == [None]


@pytest.mark.model
def test_a_paraphrase_hit_shows_its_answer_sentence(tmp_path) -> None:
    """A long passage found by meaning alone: the snippet is its answer sentence, not its
    opening (before: the opening sentences, which say nothing of badges)."""
    kb = Knowledge(load_settings(tmp_path / "home"))
    try:
        # threshold 0: every hit shown (one passage and one stranger are too few for the
        # default cut to tell a match)
        kb.create_base("dense", embedding_model_id="local:all-minilm-l6-v2", threshold=0.0)
        flour = "The recipe needs two cups of flour, butter and a pinch of salt."
        notes = [AddInput.note(PASSAGE, title="Building access"), AddInput.note(flour)]
        kb.add("dense", notes, wait=True)
        response = kb.search("dense", QUERY)
        assert response.mode == "hybrid" and response.results
        hit = next(r for r in response.results if r.title == "Building access")
        assert hit.text.strip() == PASSAGE  # one chunk: the answer is mid-passage
        words = {w.strip(".").lower() for w in hit.text.split()}
        assert not words & {"lose", "id", "card", "do", "should"}  # no shared word
        assert ANSWER in hit.snippet["text"] and hit.snippet["nearest"]
        assert not hit.snippet["text"].startswith("Building access rules")
    finally:
        kb.close()


def test_the_first_hit_is_read_whatever_its_size() -> None:
    """A hit longer than the budget (a 1,024-token chunk) still gets its sentence when it is
    the first; the next ones keep their openings."""
    big = " ".join([PASSAGE.replace(ANSWER, "Doors close early on holidays.")] * 6)
    big = big[: len(big) // 2] + " " + ANSWER + " " + big[len(big) // 2 :]
    assert len(big) > MAX_CHARS
    provider = HashEmbeddings("d64")
    q = provider.embed(["security desk badge"])[0]
    first, second = nearest_units([big, big], q, provider)
    assert first is not None and big[first[0] : first[1]] == ANSWER and second is None
