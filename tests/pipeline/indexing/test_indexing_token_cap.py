"""apply_token_cap: re-split spans over a model's window, offsets kept, few counter calls."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from knowbase.pipeline.indexing.splitter import split_text_with_offsets
from knowbase.pipeline.indexing.token_cap import apply_token_cap

WORDS = st.sampled_from(
    ["alpha", "beta", "gamma.", "delta,", "知识库。", "库，", "ok!", "why?", "x", "semi;", "ー"]
)
GAPS = st.sampled_from([" ", "  ", "\n", "\n\n", "\t", " \n ", ". ", "", "。"])


def words(text: str) -> int:
    return len(text.split())


def words_with_specials(text: str) -> int:
    """Like a BERT tokenizer's count: [CLS] and [SEP] on every call."""
    return len(text.split()) + 2


@st.composite
def texts(draw):
    out = ""
    for word in draw(st.lists(st.one_of(WORDS, st.text(max_size=8)), max_size=120)):
        out += draw(GAPS) + word
    return out


def assert_pieces(text, spans, max_tokens, count):
    previous = -1
    covered = [False] * len(text)
    for start, end in spans:
        assert 0 <= start < end <= len(text)
        assert start > previous
        previous = start
        assert not text[start].isspace() and not text[end - 1].isspace()
        assert count(text[start:end]) <= max_tokens
        for i in range(start, end):
            covered[i] = True
    assert all(covered[i] for i, ch in enumerate(text) if not ch.isspace())


@settings(max_examples=150, deadline=None)
@given(
    text=texts(),
    size=st.integers(min_value=1, max_value=120),
    overlap=st.integers(min_value=0, max_value=60),
    max_tokens=st.integers(min_value=1, max_value=25),
    overlap_tokens=st.integers(min_value=0, max_value=30),
    strategy=st.sampled_from(["structured", "delimiter"]),
)
def test_capped_spans_fit_cover_and_progress(
    text, size, overlap, max_tokens, overlap_tokens, strategy
):
    spans = split_text_with_offsets(text, chunk_size=size, chunk_overlap=overlap, strategy=strategy)
    capped = apply_token_cap(
        text, spans, max_tokens=max_tokens, overlap_tokens=overlap_tokens, count_tokens=words
    )
    assert_pieces(text, capped, max_tokens, words)


@settings(max_examples=80, deadline=None)
@given(text=texts(), max_tokens=st.integers(min_value=3, max_value=20))
def test_counter_with_special_tokens(text, max_tokens):
    spans = split_text_with_offsets(text, chunk_size=200, chunk_overlap=20)
    capped = apply_token_cap(
        text,
        spans,
        max_tokens=max_tokens,
        overlap_tokens=2,
        count_tokens=words_with_specials,
    )
    assert_pieces(text, capped, max_tokens, words_with_specials)


def test_fitting_spans_pass_through_with_one_count_each():
    text = "one two three\n\nfour five"
    calls = []

    def count(s):
        calls.append(s)
        return words(s)

    spans = [(0, 13), (15, 24)]
    assert apply_token_cap(text, spans, max_tokens=3, overlap_tokens=1, count_tokens=count) == spans
    assert calls == ["one two three", "four five"]


def test_prefers_a_sentence_end_past_half_of_the_prefix():
    text = "one two three four five six. seven eight nine ten eleven"
    out = apply_token_cap(
        text, [(0, len(text))], max_tokens=8, overlap_tokens=0, count_tokens=words
    )
    assert text[out[0][0] : out[0][1]] == "one two three four five six."
    assert text[out[1][0] : out[1][1]] == "seven eight nine ten eleven"


def test_a_paragraph_break_before_half_is_passed_over():
    text = "a\n\nb c d e f g h i j k l"
    out = apply_token_cap(
        text, [(0, len(text))], max_tokens=6, overlap_tokens=0, count_tokens=words
    )
    assert text[out[0][0] : out[0][1]] == "a\n\nb c d e f"  # the space after "f", not "\n\n"


def test_cjk_boundaries():
    text = "知识库很好。" * 6

    def chars(s):
        return len(s.strip())

    out = apply_token_cap(
        text, [(0, len(text))], max_tokens=14, overlap_tokens=0, count_tokens=chars
    )
    assert [text[s:e] for s, e in out] == ["知识库很好。知识库很好。"] * 3


def test_overlap_repeats_the_last_tokens():
    text = " ".join(f"w{i}" for i in range(30))
    out = apply_token_cap(
        text, [(0, len(text))], max_tokens=10, overlap_tokens=3, count_tokens=words
    )
    pieces = [text[s:e].split() for s, e in out]
    assert pieces[0] == [f"w{i}" for i in range(10)]
    for a, b in zip(pieces, pieces[1:], strict=False):
        assert a[-3:] == b[:3]
    assert pieces[-1][-1] == "w29"


def test_overlap_is_clamped_and_progress_is_kept():
    text = " ".join(["w"] * 40)
    out = apply_token_cap(
        text, [(0, len(text))], max_tokens=4, overlap_tokens=50, count_tokens=words
    )
    assert_pieces(text, out, 4, words)
    assert len(out) <= 40


def test_a_single_char_over_the_limit_still_progresses():
    text = "abcdef"
    out = apply_token_cap(
        text, [(0, 6)], max_tokens=2, overlap_tokens=1, count_tokens=lambda s: 5 * len(s)
    )
    assert out == [(i, i + 1) for i in range(6)]


def test_offsets_are_relative_to_the_whole_text_and_overlapping_inputs_are_merged():
    text = "zero " + " ".join(f"w{i}" for i in range(20))
    spans = split_text_with_offsets(text, chunk_size=12, chunk_overlap=6)
    assert len(spans) > 1 and spans[1][0] < spans[0][1]  # overlapping input spans
    out = apply_token_cap(text, spans, max_tokens=5, overlap_tokens=2, count_tokens=words)
    assert_pieces(text, out, 5, words)


def test_counter_calls_stay_logarithmic_per_cut():
    text = " ".join(f"token{i}" for i in range(2000))  # ~17,000 chars
    calls = 0

    def count(s):
        nonlocal calls
        calls += 1
        return words(s)

    out = apply_token_cap(
        text, [(0, len(text))], max_tokens=100, overlap_tokens=10, count_tokens=count
    )
    assert_pieces(text, out, 100, words)
    per_cut = 2 * math.ceil(math.log2(len(text))) + 2
    assert calls <= len(out) * per_cut
