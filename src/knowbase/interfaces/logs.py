"""Logs a person can read (issue 37): timestamped lines, one traceback per distinct error, a
size-bounded file.

A server that meets the same fault on every request used to write its full traceback every
time (874 tracebacks, 4.7 MB, in 7 minutes, the error that mattered scrolled away). Here:

- every line starts with its local time to the millisecond, its level and its logger;
- :class:`RepeatFilter` lets the first record of a distinct error through whole (traceback
  included), counts its repeats for a minute, then writes one line
  ``same error ×N in the last minute: <message>`` and counts again; an error that has not
  come back for a minute is new again. "Distinct": the same logger, level and exception type
  raised from the same code path (the frames of its traceback), or, without an exception,
  the same message text;
- with a file (``kb serve --log-file``) a :class:`~logging.handlers.RotatingFileHandler`
  keeps it under :data:`MAX_BYTES` with :data:`BACKUPS` older files beside it.

    handler = configure("warning", Path("serve.log"))  # the root logger writes there now
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

__all__ = [
    "BACKUPS",
    "FORMAT",
    "MAX_BYTES",
    "WINDOW_S",
    "RepeatFilter",
    "configure",
    "make_handler",
]

#: A log file is rotated when it would pass this size (10 MiB) ...
MAX_BYTES = 10 * 1024 * 1024
#: ... and this many older files are kept (``serve.log.1`` … ``serve.log.3``): 40 MiB at most.
BACKUPS = 3
#: Repeats of one error are summed over this many seconds.
WINDOW_S = 60.0
FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
#: Distinct errors remembered at once; past that the oldest are forgotten (and summed up).
_MAX_KEYS = 1000
_SUMMARY = "kb_repeat_summary"  # attribute marking a summary record: the filter lets it pass


@dataclass
class _Run:
    """One distinct error in its current window."""

    started: float  # the clock when this window began
    last: logging.LogRecord  # the latest record (its message goes into the summary)
    repeats: int = 0  # records held back in this window


def repeat_key(record: logging.LogRecord) -> tuple[Any, ...]:
    """What makes two records "the same error": logger, level, and the exception's type and
    the (file, line) of every frame it went through, else the message text."""
    exc = record.exc_info[1] if record.exc_info else None
    if exc is not None:
        frames = tuple((f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__))
        return (record.name, record.levelno, type(exc).__qualname__, frames)
    return (record.name, record.levelno, record.getMessage())


class RepeatFilter(logging.Filter):
    """Collapses repeats of one error (see the module docstring) for the handler it is added
    to with :meth:`attach`; ``clock`` is in seconds (monotonic by default)."""

    def __init__(
        self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.window_s, self.clock = window_s, clock
        self._runs: dict[tuple[Any, ...], _Run] = {}
        self._lock = threading.Lock()
        self._sink: logging.Handler | None = None

    def attach(self, handler: logging.Handler) -> None:
        """Filter ``handler``'s records; the summaries of ended windows are written to it."""
        self._sink = handler
        handler.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _SUMMARY, False):
            return True
        key, now = repeat_key(record), self.clock()
        with self._lock:
            due = self._take_due(now, keep=key)
            run = self._runs.get(key)
            if run is None or (now - run.started >= self.window_s and not run.repeats):
                self._runs[key] = _Run(now, record)  # new, or quiet for a window: whole
                passes = True
            elif now - run.started < self.window_s:
                run.repeats += 1
                run.last = record
                passes = False
            else:  # the window ended with repeats: this record says how many, no traceback
                _summarise_into(record, run.repeats + 1, now - run.started)
                self._runs[key] = _Run(now, record)
                passes = True
        for summary in due:
            self._emit(summary)
        return passes

    def flush(self) -> None:
        """Write the summary of every window that held records back (at exit: nothing
        counted is lost)."""
        now = self.clock()
        with self._lock:
            due = [self._summary(run, now) for run in self._runs.values() if run.repeats]
            self._runs.clear()
        for summary in due:
            self._emit(summary)

    def _take_due(self, now: float, keep: tuple[Any, ...]) -> list[logging.LogRecord]:
        """Summaries of other errors whose window ended (held under the lock); forgets the
        ones that stayed quiet, and the oldest past :data:`_MAX_KEYS`."""
        due: list[logging.LogRecord] = []
        for key, run in list(self._runs.items()):
            if key == keep or now - run.started < self.window_s:
                continue
            if run.repeats:
                due.append(self._summary(run, now))
                self._runs[key] = _Run(now, run.last)  # its next repeat is counted, not shown
            else:
                del self._runs[key]
        while len(self._runs) > _MAX_KEYS:
            key = next(iter(self._runs))
            run = self._runs.pop(key)
            if run.repeats:
                due.append(self._summary(run, now))
        return due

    @staticmethod
    def _summary(run: _Run, now: float) -> logging.LogRecord:
        record = logging.makeLogRecord(run.last.__dict__)
        record.created = time.time()
        record.msecs = (record.created - int(record.created)) * 1000
        _summarise_into(record, run.repeats, now - run.started)
        return record

    def _emit(self, record: logging.LogRecord) -> None:
        if self._sink is not None:
            self._sink.handle(record)


def _summarise_into(record: logging.LogRecord, count: int, span_s: float) -> None:
    """Turn ``record`` into the line that stands for ``count`` records over ``span_s``."""
    span = "the last minute" if 55 <= span_s <= 65 else f"the last {span_s:.0f} s"
    record.msg = f"same error ×{count} in {span}: {record.getMessage()}"
    record.args = None
    record.exc_info = record.exc_text = record.stack_info = None
    setattr(record, _SUMMARY, True)


def make_handler(
    log_file: Path | None = None,
    *,
    max_bytes: int = MAX_BYTES,
    backups: int = BACKUPS,
    window_s: float = WINDOW_S,
) -> logging.Handler:
    """A handler writing timestamped lines with repeats collapsed: to ``log_file`` (rotated
    at ``max_bytes``, ``backups`` older files kept), else to stderr."""
    handler: logging.Handler
    if log_file is None:
        handler = logging.StreamHandler(sys.stderr)
    else:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = RotatingFileHandler(
            log_file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    RepeatFilter(window_s).attach(handler)
    return handler


def configure(level: str = "warning", log_file: Path | None = None) -> logging.Handler:
    """Send every log record of this process (knowbase's, uvicorn's) at ``level`` and above
    through :func:`make_handler`; replaces what an earlier call installed. Returns the
    handler. Repeats still held back are written at exit."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "kb_logs", False)]:
        for flt in old.filters:
            if isinstance(flt, RepeatFilter):
                flt.flush()
                atexit.unregister(flt.flush)
        root.removeHandler(old)
        old.close()
    handler = make_handler(log_file)
    handler.kb_logs = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    for flt in handler.filters:
        if isinstance(flt, RepeatFilter):
            atexit.register(flt.flush)
    return handler
