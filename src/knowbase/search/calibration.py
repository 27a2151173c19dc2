"""Cosines on one scale before fusion (issue 40 item 1): each model's unrelated band to 0.

e5's cosines crowd into a narrow band — two unrelated passages score about 0.78 — while
MiniLM's spread from about 0.03. Fused as they are, a convex α that lets MiniLM's dense lane be
heard leaves e5's barely audible (eval/zh: 0.915 at α 0.5 against 0.938 for e5's vector lane
alone). Each model's cosine is mapped to ``(cos − band) / (1 − band)``, floored at 0, before
fusion: the band (the median cosine between unrelated passages) goes to 0, a cosine of 1 stays 1.
The band is measured once, offline, from the model itself (``bench/calibration.py``: the
median cosine between passages of different topics of a fixed sample, ``eval/en``'s 163
passages), and kept here. A model without a measured band (an API model, the test providers)
is fused as it is.

The map is linear above the band, so the dense lane's own order and the margin
:mod:`.matched` reads (a share of the room above the query's band) do not change.

    >>> round(calibrate(0.86, "local:multilingual-e5-small"), 3)
    0.359
    >>> calibrate(0.5, "openai:text-embedding-3-small")
    0.5
"""

from __future__ import annotations

from collections.abc import Sequence

from knowbase.index.base import LaneHit

#: The median cosine between unrelated passages, per model (``bench/calibration.py``,
#: 2026-12-07; the 90th percentile of related pairs, for reference: 0.417 and 0.859).
BANDS: dict[str, float] = {
    "local:all-minilm-l6-v2": 0.0272,
    "local:multilingual-e5-small": 0.7817,
}


def band(model_id: str | None) -> float | None:
    """The model's unrelated band, or None when it has not been measured."""
    if not model_id:
        return None
    return BANDS.get(model_id.split("?", 1)[0].lower())


def calibrate(cosine: float, model_id: str | None) -> float:
    """``cosine`` on the common scale: ``(cos − band) / (1 − band)``, at least 0."""
    b = band(model_id)
    if b is None:
        return cosine
    return max(0.0, (cosine - b) / (1.0 - b))


def calibrate_hits(hits: Sequence[LaneHit], model_id: str | None) -> list[LaneHit]:
    """The vector lane's hits with calibrated scores (the same hits when none is measured)."""
    if band(model_id) is None:
        return list(hits)
    return [h._replace(score=calibrate(h.score, model_id)) for h in hits]


__all__ = ["BANDS", "band", "calibrate", "calibrate_hits"]
