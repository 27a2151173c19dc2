"""A tokenizer-free token estimate (DESIGN "Chunk size follows the model").

Used wherever no model tokenizer applies: the splitter's chars-per-token ratio, chunk
``tokenCount`` metadata, remote models. Never tiktoken: it downloads its tables at run time.
"""

from __future__ import annotations

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
