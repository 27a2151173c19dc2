"""Right-to-left text back in logical order: a PDF line read left to right is visual order.

A PDF places glyphs; it does not say in which order they are read. Words sorted by x come out
in *visual* order, so Arabic ``مرحبا بالعالم`` was stored as ``ملاعلاب ابحرم`` (issue 41) and
neither search nor citations found it. :func:`logical_order` undoes the Unicode
bidirectional algorithm's reordering (UAX #9 rule L2) for one line: it resolves each
character's level from its bidirectional class (``unicodedata.bidirectional``) — paragraph
direction from the first strong letter, right-to-left letters odd, left-to-right letters and
numbers even and above them, neutrals from their neighbours — and reverses runs from the
highest level down, which maps visual order back to logical order.

Simplifications, fine for one line of extracted text: no explicit embeddings or isolates
(PDF text carries none), and mirrored brackets are left as the PDF maps them.

    >>> logical_order("ملاعلاب ابحرم")
    'مرحبا بالعالم'
    >>> logical_order("ريبك 42 ددعلا")
    'العدد 42 كبير'
    >>> logical_order("plain English")
    'plain English'
"""

from __future__ import annotations

import re
import unicodedata

_RTL = frozenset({"R", "AL"})
_NUMBER = frozenset({"EN", "AN"})
_NUMBER_JOINERS = frozenset({"ES", "ET", "CS"})  # "1,000.5", "+3", "50%" stay one number
# The blocks of right-to-left scripts (Hebrew to Arabic Extended, their presentation forms,
# and the historic ones above U+10800): a fast test before any per-character work.
_HAS_RTL = re.compile(
    "[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc\U00010800-\U00010fff\U0001e800-\U0001efff]"
)


def has_rtl(text: str) -> bool:
    """Whether ``text`` holds a right-to-left letter (Hebrew, Arabic, Syriac, Thaana…)."""
    return _HAS_RTL.search(text) is not None


def logical_order(line: str) -> str:
    """One line of visual-order text in logical order; a line without RTL letters as it is."""
    if not has_rtl(line):
        return line
    kinds = _kinds(line)
    rtl_paragraph = next((k for k in kinds if k in ("L", "R")), "L") == "R"
    levels = _levels(kinds, 1 if rtl_paragraph else 0)
    chars = list(line)
    for level in range(max(levels), 0, -1):
        i = 0
        while i < len(chars):
            if levels[i] < level:
                i += 1
                continue
            j = i
            while j < len(chars) and levels[j] >= level:
                j += 1
            chars[i:j] = chars[i:j][::-1]
            levels[i:j] = levels[i:j][::-1]
            i = j
    return "".join(chars)


def logical_lines(text: str) -> str:
    """:func:`logical_order` of every line of ``text``."""
    if not has_rtl(text):
        return text
    return "\n".join(logical_order(line) for line in text.split("\n"))


def _kinds(line: str) -> list[str]:
    """Per character: ``L``, ``R``, ``N`` (a number) or ``-`` (neutral)."""
    classes = [unicodedata.bidirectional(ch) for ch in line]
    kinds = [
        "R" if c in _RTL else "L" if c == "L" else "N" if c in _NUMBER else "-" for c in classes
    ]
    for i, c in enumerate(classes):
        # A separator or sign between digits, or a sign next to one, belongs to the number.
        if c in _NUMBER_JOINERS and (
            (i > 0 and kinds[i - 1] == "N") or (i + 1 < len(kinds) and kinds[i + 1] == "N")
        ):
            kinds[i] = "N"
        elif c == "NSM" and i > 0:  # a combining mark goes with the letter it sits on
            kinds[i] = kinds[i - 1]
    return kinds


def _levels(kinds: list[str], base: int) -> list[int]:
    """Resolved embedding levels (UAX #9 W/N/I rules, simplified for one plain line)."""
    n = len(kinds)
    strong = list(kinds)
    for i, k in enumerate(kinds):
        if k == "N":
            # A number takes the direction of the nearest strong letter on either side
            # (W7: European digits after L are L); alone among RTL letters it stays a number.
            left = next((kinds[j] for j in range(i - 1, -1, -1) if kinds[j] in "LR"), None)
            right = next((kinds[j] for j in range(i + 1, n) if kinds[j] in "LR"), None)
            as_l = (base == 0 and "R" not in (left, right)) or left == right == "L"
            strong[i] = "L" if as_l else "N"
    levels = [0] * n
    for i, k in enumerate(strong):
        if k == "R":
            levels[i] = 1 if base == 0 else base
        elif k == "L":
            levels[i] = base + (base % 2)  # 0 in an LTR line, 2 in an RTL one
        elif k == "N":
            levels[i] = base + 2 if base == 0 else base + 1
    for i, k in enumerate(strong):
        if k != "-":
            continue
        # N1/N2: neutrals between two of the same direction take it (numbers count as R),
        # else the paragraph's.
        left = next((strong[j] for j in range(i - 1, -1, -1) if strong[j] != "-"), None)
        right = next((strong[j] for j in range(i + 1, n) if strong[j] != "-"), None)
        left, right = _AS_R.get(left, left), _AS_R.get(right, right)
        if left == right == "R":
            levels[i] = 1
        elif left == right == "L":
            levels[i] = base + (base % 2)
        else:
            levels[i] = base
    return levels


_AS_R = {"N": "R"}  # for neutrals, numbers act as right-to-left letters (UAX #9 N1)
