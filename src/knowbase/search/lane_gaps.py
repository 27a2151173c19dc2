"""A keyword hit the vector window missed still gets its own cosine before fusion.

Each lane ranks a window (``lane_limit``) sized from ``top_k``. A passage the keyword lane finds
but whose cosine falls outside the vector lane's window used to be fused as if its cosine were
0, so a larger ``top_k`` (a larger window) could rank it first while a smaller one left it out:
the top 10 was not the first 10 of the top 50 (found by the soak, issue 37). Asking the vector
lane again, restricted to the materials of those hits, gives their real cosines at the cost of
one small lane call, on every backend (``within`` is part of the store protocol).
"""

from __future__ import annotations

import numpy as np

from knowbase.index.base import IndexStore, LaneHit


def cosines_for_missed(
    store: IndexStore,
    vector: np.ndarray,
    vhits: list[LaneHit],
    khits: list[LaneHit],
    within: frozenset[str] | None,
    limit: int,
) -> list[LaneHit]:
    """The vector-lane hits of the keyword hits missing from ``vhits`` (their own cosines), to
    add to ``vhits`` before fusion; empty when the window held them all."""
    seen = {h.unit_id for h in vhits}
    wanted = {h.unit_id for h in khits if h.unit_id not in seen}
    if not wanted:
        return []
    materials = frozenset(h.material_id for h in khits if h.unit_id in wanted)
    if within is not None:
        materials &= within
    if not materials:
        return []
    # Sibling units of those materials may outrank the wanted ones: a deep window over few
    # materials (a wanted unit past it, in a document of thousands of chunks, keeps 0).
    extra = store.vector_lane(vector, limit, within=materials)
    return [h for h in extra if h.unit_id in wanted]


__all__ = ["cosines_for_missed"]
