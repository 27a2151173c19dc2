"""estimate_tokens: CJK one per character, other text four characters per token."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.pipeline.indexing.tokens import estimate_tokens


def test_empty_is_zero_and_whitespace_is_one():
    assert estimate_tokens("") == 0
    assert estimate_tokens(" \n\t") == 1


def test_latin_is_four_chars_per_token_rounded_up():
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("hello world") == 3  # 11 chars


def test_cjk_scripts_count_one_each():
    assert estimate_tokens("知识库") == 3
    assert estimate_tokens("ひらがな") == 4
    assert estimate_tokens("カタカナー") == 5  # the prolonged sound mark belongs to the run
    assert estimate_tokens("한국어") == 3


def test_mixed_text_adds_both_parts():
    assert estimate_tokens("知识 base") == 2 + 2  # "知识" + " base" (5 chars)


def test_whitespace_counts_like_other_characters():
    # Discounting it would stretch the splitter's budget for the rest of the document.
    assert estimate_tokens("a" + " " * 98 + "b") == 25


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_positive_for_non_empty_and_bounded_by_length(text):
    n = estimate_tokens(text)
    assert (n >= 1) == bool(text)
    assert n <= max(1, len(text))


@given(st.text(alphabet="ab \n知识库ー。한글カタ", max_size=60), st.data())
@settings(max_examples=300, deadline=None)
def test_range_tokens_equals_the_estimate_of_the_slice(text: str, data: st.DataObject) -> None:
    from knowbase.pipeline.indexing.tokens import RangeTokens

    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    assert RangeTokens(text).count(start, end) == estimate_tokens(text[start:end])
