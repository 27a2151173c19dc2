"""Grep one document's text: whole lines, bounded snippets, bounded by input length and time.

The pure core of ``kb.concepts.grep_concept`` (§8): lines are split on ``\\n`` and searched
whole, so a match never spans lines and ``^``/``$`` are per line; zero-width matches advance by
one; a scan stopped by a bound returns what it found with ``partial``, ``stopped`` and
``reason``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import regex

from knowbase.errors import InvalidPattern

GREP_DEFAULT_MATCHES = 50
GREP_MAX_MATCHES = 200
GREP_SNIPPET_CONTEXT = 60
GREP_SNIPPET_MATCH_MAX_CHARS = 200
GREP_MAX_PATTERN_CHARS = 200
# Each `regex` call gets the rest of the budget as its timeout, the budget is checked between
# searches too (many short lines each finish fast), the caller waits no longer than the budget
# (regex's timeout is process CPU time; see grep_text), and the scanned input is
# bounded by length (DESIGN "bound grep by input length and time"). Lines are searched whole:
# cutting them made `$` match mid-line and hid text past the cut.
GREP_TIME_BUDGET_S = 1.0
GREP_JOIN_GRACE_S = 0.1  # the scan's own deadline normally ends it first, with a precise reason
GREP_MAX_SCAN_CHARS = 5_000_000


def compile_pattern(pattern: str, *, ignore_case: bool = True) -> regex.Pattern[str]:
    """Compile a grep pattern (flags: ``i`` unless ``ignore_case`` is False)."""
    if not isinstance(pattern, str) or not pattern:
        raise InvalidPattern("the grep pattern is empty", pattern=pattern)
    if len(pattern) > GREP_MAX_PATTERN_CHARS:
        raise InvalidPattern(
            f"the grep pattern is longer than {GREP_MAX_PATTERN_CHARS} characters",
            length=len(pattern),
        )
    try:
        return regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
    except (regex.error, ValueError, OverflowError) as exc:
        raise InvalidPattern(f"invalid regular expression: {exc}", pattern=pattern) from exc


def grep_text(
    text: str,
    compiled: regex.Pattern[str],
    *,
    max_matches: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    budget_s: float = GREP_TIME_BUDGET_S,
    max_scan_chars: int = GREP_MAX_SCAN_CHARS,
) -> dict[str, Any]:
    """Match ``compiled`` line by line over ``text`` (the pure core of ``grep_concept``).

    Each whole line is searched, so ``$`` matches only where a line ends. Returns
    ``{total_matches, matches, limit, partial}``; when the time budget or the input-length
    bound stops the scan, ``partial`` is true, ``stopped`` names the bound and ``reason`` says
    from where on nothing was searched. ``total_matches`` counts every match scanned, the
    ``matches`` list stops at ``limit``.

    The budget is wall-clock for the caller. `regex`'s own timeout counts the *process's* CPU
    time (measured: with another busy thread a 1 s timeout took 3.4-4 s of wall time), so the
    scan runs in a thread with the GIL released (``concurrent=True``) and the caller stops
    waiting at the budget; the thread then ends at its next check or regex timeout.
    """
    wanted = max_matches if max_matches is not None else GREP_DEFAULT_MATCHES
    scan = _Scan(min(max(wanted, 1), GREP_MAX_MATCHES), budget_s)
    worker = threading.Thread(
        target=scan.run,
        args=(text, compiled, clock, clock() + budget_s, max_scan_chars),
        name="kb-grep",
        daemon=True,
    )
    worker.start()
    worker.join(budget_s + GREP_JOIN_GRACE_S)
    finished = not worker.is_alive()
    if finished and scan.error is not None:
        raise scan.error  # a failed scan must not pass for a complete one
    return scan.result(finished=finished)


class _Scan:
    """The state of one grep scan, shared by its worker thread and the waiting caller."""

    def __init__(self, limit: int, budget_s: float) -> None:
        self.limit = limit
        self.budget_s = budget_s
        self.matches: list[dict[str, Any]] = []
        self.total = 0
        self.stopped: str | None = None
        self.reason = ""
        self.where = (1, 0)  # (line, document offset) being searched
        self.cancelled = False
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def run(self, *args: Any) -> None:
        """The thread's target: :meth:`scan` with any exception kept for the caller."""
        try:
            self.scan(*args)
        except BaseException as exc:  # handed to the caller, re-raised there
            self.error = exc

    def scan(
        self,
        text: str,
        compiled: regex.Pattern[str],
        clock: Callable[[], float],
        deadline: float,
        max_scan_chars: int,
    ) -> None:
        scanned = 0
        offset = 0
        for line_no, line in enumerate(text.split("\n"), start=1):
            line_start = offset
            offset += len(line) + 1
            scanned += len(line)
            if scanned > max_scan_chars:
                self._stop(
                    "input_length",
                    f"the search stops at {max_scan_chars:,} characters of text; "
                    f"line {line_no} and later were not searched",
                )
                return
            pos = 0
            while pos <= len(line):
                self.where = (line_no, line_start + pos)
                remaining = deadline - clock()
                if self.cancelled or remaining <= 0:
                    self._stop("time_budget", self._budget_reason())
                    return
                try:
                    m = compiled.search(line, pos, timeout=remaining, concurrent=True)
                except TimeoutError:
                    self._stop("time_budget", self._budget_reason())
                    return
                if m is None:
                    break
                s, e = m.span()
                with self.lock:
                    if self.cancelled:
                        return
                    self.total += 1
                    if len(self.matches) < self.limit:
                        self.matches.append(
                            {
                                "line": line_no,
                                "char_start": line_start + s,
                                "char_end": line_start + e,
                                "snippet": snippet(line, s, e),
                            }
                        )
                # Zero-width matches advance by one, as JavaScript's lastIndex++ does.
                pos = e + 1 if e == s else e

    def _budget_reason(self) -> str:
        line_no, at = self.where
        return (
            f"the pattern ran out of its {self.budget_s:g} s time budget in line {line_no} "
            f"(from char {at}); the rest was not searched"
        )

    def _stop(self, stopped: str, reason: str) -> None:
        with self.lock:
            if self.stopped is None and not self.cancelled:
                self.stopped, self.reason = stopped, reason

    def result(self, *, finished: bool) -> dict[str, Any]:
        with self.lock:
            if not finished:  # the caller's wall-clock budget ran out first
                self.cancelled = True
                if self.stopped is None:
                    self.stopped, self.reason = "time_budget", self._budget_reason()
            out: dict[str, Any] = {
                "total_matches": self.total,
                "matches": list(self.matches),
                "limit": self.limit,
                "partial": self.stopped is not None,
            }
            if self.stopped is not None:
                out["stopped"] = self.stopped
                out["reason"] = self.reason
        return out


def snippet(line: str, start: int, end: int) -> str:
    """The match with ±60 chars of its line; a match longer than 200 chars shows its start.

    Bounded whatever the line's length, so a 50,000-char line never comes back whole.
    """
    shown_end = min(end, start + GREP_SNIPPET_MATCH_MAX_CHARS)
    return line[max(0, start - GREP_SNIPPET_CONTEXT) : shown_end + GREP_SNIPPET_CONTEXT]
