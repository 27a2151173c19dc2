"""A keyword hit outside the vector lane's window is fused with its own cosine, not 0 (found by
the soak, issue 37): a document's score must not depend on how deep ``top_k`` made the windows,
or the top 10 is not the first 10 of the top 50."""

from __future__ import annotations

import random

from knowbase.operations.add.inputs import AddInput
from knowbase.service import Knowledge


def test_a_score_does_not_depend_on_the_window(kb: Knowledge) -> None:
    rng = random.Random(4)
    words = [f"w{n}" for n in range(300)]
    base = kb.create_base("h", embedding_model_id="hash:d32", file_processor_id=None)
    filler = [" ".join(rng.choice(words) for _ in range(30)) for _ in range(120)]
    unique = [f"zq{n:02d}x" for n in range(12)]
    notes = [AddInput.note(text, title=f"n{i}") for i, text in enumerate(filler)]
    notes += [AddInput.note(f"{rng.choice(filler)} {u}", title=u) for u in unique]
    kb.add(base.id, notes, wait=True)
    outside = 0
    for u in unique:
        # top_k 1: lanes of 25; top_k 50: lanes of 1,000 (every unit)
        narrow = kb.search(base.id, u, top_k=1)
        wide = {r.title: r.score for r in kb.search(base.id, u, top_k=50).results}
        outside += narrow.explain["lanes"]["vector"] > 25  # the window was widened for it
        if narrow.results and narrow.results[0].title == u:
            assert narrow.results[0].score == wide[u]
        else:  # not first at top_k 1: then not first at top_k 50 either
            assert max(wide, key=wide.get) != u
    assert outside, "no unique document fell outside the narrow vector window: test too easy"
