"""Reciprocal rank fusion: exact values, weights, ties, k validation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowbase.errors import InvalidInput
from knowbase.search.rrf import rrf_fuse


def test_exact_values_one_based_ranks() -> None:
    fused = dict(rrf_fuse([(["a", "b", "c"], 0.5), (["c", "a"], 0.5)]))
    assert fused["a"] == pytest.approx(0.5 / 61 + 0.5 / 62)
    assert fused["b"] == pytest.approx(0.5 / 62)
    assert fused["c"] == pytest.approx(0.5 / 63 + 0.5 / 61)


def test_order_weights_and_custom_k() -> None:
    assert [i for i, _ in rrf_fuse([(["a", "b"], 1.0), (["b"], 1.0)])] == ["b", "a"]
    assert [i for i, _ in rrf_fuse([(["a"], 0.9), (["b"], 0.1)])] == ["a", "b"]
    assert rrf_fuse([(["x"], 1.0)], k=1) == [("x", 0.5)]


def test_ties_break_by_best_rank_then_id() -> None:
    # b and z tie on score; both reach rank 1 → id order. y (rank 2 only) comes after.
    fused = rrf_fuse([(["z", "y"], 0.5), (["b", "y"], 0.5)])
    assert [i for i, _ in fused] == ["y", "b", "z"]  # y is in both lanes: 2 × 0.5/62
    fused = rrf_fuse([(["z"], 0.5), (["b"], 0.5)])
    assert [i for i, _ in fused] == ["b", "z"]


def test_duplicates_in_a_lane_count_once() -> None:
    assert rrf_fuse([(["a", "a", "b"], 1.0)]) == [("a", 1 / 61), ("b", 1 / 62)]


@pytest.mark.parametrize("k", [0, -1])
def test_rejects_non_positive_k(k: int) -> None:
    with pytest.raises(InvalidInput):
        rrf_fuse([(["a"], 1.0)], k=k)


@given(st.lists(st.lists(st.sampled_from("abcdefg"), max_size=7), max_size=3))
def test_deterministic_and_descending(lanes: list[list[str]]) -> None:
    spec = [(ids, 0.5) for ids in lanes]
    fused = rrf_fuse(spec)
    assert fused == rrf_fuse(spec)
    assert [s for _, s in fused] == sorted((s for _, s in fused), reverse=True)
    assert {i for i, _ in fused} == {i for ids in lanes for i in ids}
