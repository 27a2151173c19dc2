"""A tokenizer-free token estimate (DESIGN "Chunk size follows the model").

Used wherever no model tokenizer applies: the splitter's chars-per-token ratio, chunk
``tokenCount`` metadata, remote models. Never tiktoken: it downloads its tables at run time.
"""

from __future__ import annotations

import bisect

import regex

# Script_Extensions, so marks shared by the CJK scripts (``ー``, ``。``) count with their run.
_CJK_RUN = regex.compile(r"[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}]+")

CHARS_PER_TOKEN = 4
"""Non-CJK characters per estimated token."""


def estimate_tokens(text: str) -> int:
    """Estimate the tokens of ``text``: one per CJK character, one per 4 other characters.

    Whitespace counts like any other character: the splitter turns this estimate into one
    chars-per-token ratio for a whole document, and discounting a long whitespace run there
    would stretch the character budget of every other chunk of that document. Any non-empty
    text is at least one token.

        >>> estimate_tokens("hello world"), estimate_tokens("知识库"), estimate_tokens("")
        (3, 3, 0)
    """
    if not text:
        return 0
    cjk = sum(len(run) for run in _CJK_RUN.findall(text))
    rest = len(text) - cjk
    return max(1, cjk + -(-rest // CHARS_PER_TOKEN))


class RangeTokens:
    """:func:`estimate_tokens` of many ranges of one text, each in log time: the CJK runs are
    found once (an outline asks for every section's count, and sections nest).

        >>> RangeTokens("ab 知识库 cdef").count(0, 10) == estimate_tokens("ab 知识库 cdef")
        True
    """

    def __init__(self, text: str) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.before: list[int] = [0]  # CJK characters in the runs before run i
        for match in _CJK_RUN.finditer(text):
            self.starts.append(match.start())
            self.ends.append(match.end())
            self.before.append(self.before[-1] + match.end() - match.start())

    def _cjk_before(self, offset: int) -> int:
        i = bisect.bisect_right(self.starts, offset)  # runs starting at or before offset
        if i and self.ends[i - 1] > offset:  # offset falls inside run i-1
            return self.before[i - 1] + offset - self.starts[i - 1]
        return self.before[i]

    def count(self, start: int, end: int) -> int:
        """``estimate_tokens(text[start:end])``."""
        if end <= start:
            return 0
        cjk = self._cjk_before(end) - self._cjk_before(start)
        return max(1, cjk + -(-(end - start - cjk) // CHARS_PER_TOKEN))
