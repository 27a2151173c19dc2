"""A tokenizer-free token estimate (DESIGN "Chunk size follows the model").

Used wherever no model tokenizer applies: the splitter's chars-per-token ratio, chunk
``tokenCount`` metadata, remote models. Never tiktoken: it downloads its tables at run time.
"""

from __future__ import annotations

import regex

# Script_Extensions, so marks shared by the CJK scripts (``ー``, ``。``) count with their run.
_CJK = regex.compile(r"[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}]")
_SPACE_RUN = regex.compile(r"\s+")

CHARS_PER_TOKEN = 4
"""Non-CJK characters per estimated token."""


def estimate_tokens(text: str) -> int:
    """Estimate the tokens of ``text``: one per CJK character, one per 4 other characters.

    A whitespace run counts as one character, so padding (aligned tables, indentation) does
    not inflate the estimate. Any non-empty text is at least one token.

        >>> estimate_tokens("hello world"), estimate_tokens("知识库"), estimate_tokens("")
        (3, 3, 0)
    """
    if not text:
        return 0
    cjk = len(_CJK.findall(text))
    rest = len(_SPACE_RUN.sub(" ", _CJK.sub("", text)))
    return max(1, cjk + -(-rest // CHARS_PER_TOKEN))
