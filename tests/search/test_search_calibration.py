"""Cosines on one scale before fusion (issue 40 item 1): e5's narrow band no longer hides a
dense-only match behind a passage that shares a word but not the meaning."""

from __future__ import annotations

import pytest

from knowbase.index.base import LaneHit
from knowbase.search.calibration import BANDS, band, calibrate, calibrate_hits
from knowbase.search.fusion import FusionSettings, fuse
from knowbase.search.matched import dense_margin

E5 = "local:multilingual-e5-small"


def _fused(vector: list[LaneHit], keyword: list[tuple[str, float]]) -> list[str]:
    return [u for u, _ in fuse([(h.unit_id, h.score) for h in vector], keyword, FusionSettings())]


def test_calibration_lets_e5s_dense_only_match_rise_above_a_shared_word() -> None:
    # "word": shares a word with the query, e5 finds it unrelated (0.78, its band);
    # "meaning": shares no word, e5's clear match (0.86, near its related pairs' 0.859).
    vector = [LaneHit("meaning", "m1", 0.86), LaneHit("word", "m2", 0.78)]
    keyword = [("word", 0.2)]
    assert _fused(vector, keyword) == ["word", "meaning"]  # raw at α 0.4: 0.43 against 0.34
    assert _fused(calibrate_hits(vector, E5), keyword) == ["meaning", "word"]
    # MiniLM's band is near 0: its order and scores barely move
    mini = [LaneHit("meaning", "m1", 0.45), LaneHit("word", "m2", 0.1)]
    assert _fused(calibrate_hits(mini, "local:all-minilm-l6-v2"), keyword) == _fused(mini, keyword)


def test_the_band_goes_to_zero_a_perfect_match_stays_one_and_unknown_models_pass() -> None:
    for model, b in BANDS.items():
        assert calibrate(b, model) == 0 and calibrate(1.0, model) == pytest.approx(1.0)
        assert calibrate(b - 0.1, model) == 0  # below the band: floored
    assert band("LOCAL:Multilingual-E5-Small?batch=8") == BANDS[E5]
    assert calibrate(0.42, "hash:d64") == 0.42 and band(None) is None
    hits = [LaneHit("a", "m", 0.5)]
    assert calibrate_hits(hits, "hash:d64") == hits


def test_the_margin_that_decides_nothing_matched_does_not_move() -> None:
    cosines = [0.9, 0.82, 0.8, 0.79, 0.79]
    hits = [LaneHit(str(n), "m", c) for n, c in enumerate(cosines)]
    after = [h.score for h in calibrate_hits(hits, E5)]
    assert dense_margin(after) == pytest.approx(dense_margin(cosines))
