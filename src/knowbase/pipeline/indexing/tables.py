"""Markdown pipe tables in a text: where their rows are, and each table's header.

The splitter and the token cap ask :class:`TableMap` whether a cut or a chunk start would fall
inside a table row, and move it to the row's edge: a row is the unit that says which number
belongs to which label, so a chunk never holds half of one. Chunking asks it for the header of
the table a chunk starts in, so a chunk that continues a table carries that table's header row
and separator line in ``Chunk.table_header`` (keyword/embedding text only; the slice stays
verbatim).

A table is a run of lines that start with ``|`` (after up to three spaces) whose second line is
a separator such as ``|---|:--:|``. Lines starting with ``|`` outside such a run count as rows
too (a table whose header lies in another document), but give no header.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

_ROW = re.compile(r"^ {0,3}\|.*$", re.MULTILINE)
_SEPARATOR = re.compile(r"^ {0,3}\|?(?:\s*:?-{2,}:?\s*\|)+\s*:?-*:?\s*$")


@dataclass(frozen=True)
class _Table:
    start: int  # first char of the header row
    body_start: int  # first char after the separator line's newline
    end: int  # end of the last row (its "\n" excluded)
    header: str  # header row + "\n" + separator line


class TableMap:
    """The table rows and tables of one text; positions are offsets into it."""

    def __init__(self, text: str) -> None:
        self.rows: list[tuple[int, int]] = [(m.start(), m.end()) for m in _ROW.finditer(text)]
        self._starts = [s for s, _ in self.rows]
        self.tables: list[_Table] = []
        i = 0
        while i < len(self.rows):
            j = i
            while j + 1 < len(self.rows) and self.rows[j + 1][0] == self.rows[j][1] + 1:
                j += 1  # the next row starts right after this row's newline
            if j > i and _SEPARATOR.match(text[self.rows[i + 1][0] : self.rows[i + 1][1]]):
                sep_end = self.rows[i + 1][1]
                self.tables.append(
                    _Table(
                        start=self.rows[i][0],
                        body_start=sep_end + 1,
                        end=self.rows[j][1],
                        header=text[self.rows[i][0] : sep_end],
                    )
                )
            i = j + 1
        self._table_starts = [t.start for t in self.tables]

    def __bool__(self) -> bool:
        return bool(self.rows)

    def row_around(self, pos: int) -> tuple[int, int] | None:
        """The row that ``pos`` lies strictly inside (not at its start or its end), if any."""
        i = bisect.bisect_right(self._starts, pos) - 1
        if i >= 0:
            s, e = self.rows[i]
            if s < pos < e:
                return s, e
        return None

    def cut_back(self, pos: int, floor: int) -> int:
        """``pos`` moved back to the start of the row it would cut, when that is after ``floor``.

        A row that began at or before ``floor`` is longer than the room left; it is cut where
        ``pos`` says (the only way to keep the chunk within its size).
        """
        row = self.row_around(pos)
        if row is not None and row[0] > floor:
            return row[0]
        return pos

    def start_at_row(self, pos: int, floor: int, ceiling: int) -> int:
        """A chunk start ``pos`` moved to a row edge: the row's start if after ``floor``, else
        the next row's start (this row's end) if before ``ceiling``, else ``pos``."""
        row = self.row_around(pos)
        if row is None:
            return pos
        if row[0] > floor:
            return row[0]
        if row[1] < ceiling:
            return row[1]
        return pos

    def header_for(self, start: int) -> str:
        """The header of the table whose body ``start`` lies in (``""`` when none).

        A chunk that starts at a table's own header row, or before its body, already shows it.
        """
        i = bisect.bisect_right(self._table_starts, start) - 1
        if i >= 0:
            t = self.tables[i]
            if t.body_start <= start <= t.end:
                return t.header
        return ""

    def separator_lines(self) -> set[int]:
        """Starts of separator lines: no cut may fall right before one (a header alone)."""
        return {t.start + t.header.index("\n") + 1 for t in self.tables}
