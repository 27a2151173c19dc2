"""Logs a person can read (issue 37 item 6): the repeat filter on real records and handlers,
rotation, and ``kb serve --log-file`` in a subprocess."""

from __future__ import annotations

import io
import logging
import re
import signal
import sys
from pathlib import Path

import httpx

from knowbase.interfaces.logs import DATE_FORMAT, FORMAT, RepeatFilter, make_handler

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _logger(name: str, window_s: float = 60.0) -> tuple[logging.Logger, io.StringIO, Clock]:
    """A logger writing through the repeat filter into a buffer, on a clock the test moves."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
    clock = Clock()
    RepeatFilter(window_s, clock).attach(handler)
    logger = logging.getLogger(f"test_logs.{name}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, out, clock


def _fail(path: str) -> None:
    raise OSError(5, "disk I/O error", path)


def _poll_status(log: logging.Logger, path: str) -> None:
    """One request that meets the fault, from one place in the code, as a server's would."""
    try:
        _fail(path)
    except OSError:
        log.exception("unhandled error on GET /status")


def _other_fail() -> None:
    raise KeyError("a bug elsewhere")


def test_one_traceback_per_distinct_error_then_a_count_a_minute() -> None:
    log, out, clock = _logger("repeats")
    for i in range(500):  # 874 tracebacks in 7 minutes, before (issue 37)
        _poll_status(log, f"/home/catalog.sqlite-{i % 3}")  # the text varies, the error not
        clock.now += 0.1  # 50 s
    text = out.getvalue()
    assert text.count("Traceback") == 1 and text.count("unhandled error") == 1, text
    clock.now += 15  # a minute after the first: the next repeat says how many there were
    _poll_status(log, "/home/catalog.sqlite")
    lines = out.getvalue().splitlines()
    assert lines[-1].endswith("same error ×500 in the last minute: unhandled error on GET /status")
    assert out.getvalue().count("Traceback") == 1
    # Another error is distinct: its own traceback at once.
    try:
        _other_fail()
    except KeyError:
        log.exception("unhandled error on GET /status")
    assert out.getvalue().count("Traceback") == 2
    assert all(
        STAMP.match(line)
        for line in out.getvalue().splitlines()
        if not line.startswith((" ", "Traceback", "OSError", "KeyError"))
    )


def test_counts_still_held_are_written_when_another_line_comes_or_at_exit() -> None:
    log, out, clock = _logger("flush")
    for _ in range(10):
        log.warning("refused GET /: this server does not answer to Host 'evil.example'")
    assert out.getvalue().count("refused") == 1
    clock.now += 61  # the refusals stopped; the next line of anything brings their count out
    log.warning("something else")
    lines = out.getvalue().splitlines()
    assert "same error ×9 in the last minute: refused GET /" in lines[1], lines
    assert lines[2].endswith("something else")
    log.warning("something else")
    log.warning("something else")
    flt = next(f for f in log.handlers[0].filters if isinstance(f, RepeatFilter))
    flt.flush()  # what configure() registers at exit
    assert out.getvalue().splitlines()[-1].endswith("same error ×2 in the last 0 s: something else")
    # Quiet for a minute: the same line is new again, written whole.
    clock.now += 120
    log.warning("something else")
    assert out.getvalue().splitlines()[-1].endswith(" something else")


def test_the_log_file_rotates_within_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "serve.log"
    handler = make_handler(path, max_bytes=4000, backups=2)
    logger = logging.getLogger("test_logs.rotation")
    logger.handlers[:] = [handler]
    logger.propagate = False
    try:
        for i in range(500):  # distinct lines, none collapsed: ~40 KB in all
            logger.warning("line %d %s", i, "x" * 60)
    finally:
        handler.close()
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["serve.log", "serve.log.1", "serve.log.2"]
    assert all((path.parent / f).stat().st_size <= 4000 for f in files)
    assert "line 499" in path.read_text(encoding="utf-8")
    assert all(STAMP.match(line) for line in path.read_text(encoding="utf-8").splitlines())


def test_kb_serve_writes_timestamped_collapsed_lines_to_its_log_file(tmp_path: Path) -> None:
    from test_http_guard import free_port, running

    port, log_file = free_port(), tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "knowbase.interfaces.cli", "serve", "--home", str(tmp_path / "h")]
    proc = running([*cmd, "--port", str(port), "--no-workers", "--log-file", str(log_file)], port)
    try:
        url = f"http://127.0.0.1:{port}/bases"
        assert httpx.get(url, timeout=10).status_code == 200
        for _ in range(30):  # each one logs "refused GET /bases: …"
            assert httpx.get(url, headers={"Host": "evil.example"}, timeout=10).status_code == 421
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    stderr = proc.stderr.read() if proc.stderr else ""
    assert "refused" not in stderr, stderr  # the log went to the file
    lines = log_file.read_text(encoding="utf-8").splitlines()
    refused = [line for line in lines if "refused GET /bases" in line]
    assert len(refused) == 2, lines  # the first, and at exit the count of the rest
    assert re.search(r"same error ×29 in the last \d+ s: refused GET /bases", refused[1]), lines
    assert lines and all(STAMP.match(line) for line in lines), lines
