"""``kb_search``'s reply within a character budget (``maxChars``, default 8,000).

A passage comes with up to 512 tokens of surroundings and a document's hits merge into one
passage, so ten of them made 18–37 KB replies: more than an agent's context wants for one call.
The budget is spent in rank order, in two rounds: first each passage's own hit (the chunk that
matched, cut at the budget if need be), so the best answers all get in before any context;
then the context around each hit, best passage first, the text after the hit before the text
before it (the answer often follows the heading that matched). A passage cut short says
``truncated: true`` and its ``charStart``/``charEnd`` are those of the text returned, so
``kb_read`` continues from there. What does not fit at all is counted, not silently lost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_CHARS = 8_000
MIN_MAX_CHARS = 1_000
MAX_MAX_CHARS = 100_000
#: A hit shorter than this is not worth sending cut: the passage is left out instead.
MIN_HIT_CHARS = 80
#: The reply's frame around the items (notices, failed bases) is budgeted at this much.
FRAME_CHARS = 400


@dataclass
class Passage:
    """One ``kb_search`` item and where its hit lies in its ``content`` (absolute offsets)."""

    item: dict[str, Any]
    hit_start: int
    hit_end: int


def _json_len(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _size(text: str) -> int:
    """Characters ``text`` takes in the reply's JSON (escapes counted, quotes not)."""
    return _json_len(text) - 2


def _end_within(text: str, start: int, end: int, room: int) -> int:
    """The largest end ≤ ``end`` whose slice from ``start`` takes at most ``room``."""
    end = min(end, start + max(room, 0))
    while end > start and _size(text[start:end]) > room:
        end -= max(1, _size(text[start:end]) - room)
    return end


def _start_within(text: str, start: int, end: int, room: int) -> int:
    """The smallest start ≥ ``start`` whose slice to ``end`` takes at most ``room``."""
    start = max(start, end - max(room, 0))
    while start < end and _size(text[start:end]) > room:
        start += max(1, _size(text[start:end]) - room)
    return start


def fit(passages: list[Passage], max_chars: int) -> tuple[list[dict[str, Any]], int]:
    """The items that fit ``max_chars`` (content trimmed as the module says) and how many were
    left out."""
    left = max_chars - FRAME_CHARS
    kept: list[tuple[Passage, int, int]] = []  # passage, slice start, end (in its content)
    dropped = 0
    for p in passages:  # round 1: the hits
        text = p.item["content"]
        offset = p.item["charStart"]
        hs = min(max(p.hit_start - offset, 0), len(text))
        he = min(max(p.hit_end - offset, hs), len(text))
        room = left - _json_len({**p.item, "content": "", "truncated": True}) - 1
        if room < min(MIN_HIT_CHARS, he - hs):
            dropped += 1
            continue
        he = _end_within(text, hs, he, room)
        left = room - _size(text[hs:he])  # the item's frame and its hit are spent
        kept.append((p, hs, he))
    out = []
    for p, start, end in kept:  # round 2: the surroundings, best passage first
        text = p.item["content"]
        grown = _end_within(text, end, len(text), left)
        left -= _size(text[end:grown])
        end = grown
        grown = _start_within(text, 0, start, left)
        left -= _size(text[grown:start])
        start = grown
        item = dict(p.item)
        if (start, end) != (0, len(text)):
            item.update(
                content=text[start:end],
                charStart=p.item["charStart"] + start,
                charEnd=p.item["charStart"] + end,
                truncated=True,
            )
        out.append(item)
    return out, dropped
