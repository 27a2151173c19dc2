"""Run an external tool (tesseract, pdftoppm) so that cancel and timeout really stop it.

The tool runs in its own session (process group); on cancel or deadline the whole group gets
SIGKILL, so helpers it spawned die too. Output goes to files, not pipes: a pipe nobody reads
while we poll would fill and stall the tool.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from knowbase.errors import IndexingInterrupted, UnreadableFile

_POLL_S = 0.05
_TOOL_ENV = {"OMP_THREAD_LIMIT": "1"}  # tesseract is ~2x faster on 2 cores (DESIGN.md)


def run_tool(
    cmd: Sequence[str],
    *,
    cancel: threading.Event | None,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    cwd: Path | None = None,
) -> None:
    """Run ``cmd`` to completion, or kill its process group on cancel/deadline.

    ``deadline`` is a ``clock()`` value. Raises IndexingInterrupted on cancel, UnreadableFile
    on timeout or a non-zero exit (with the tool's last stderr lines).
    """
    env = dict(os.environ, **_TOOL_ENV)
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            while True:
                if cancel is not None and cancel.is_set():
                    _kill(proc)
                    raise IndexingInterrupted(
                        f"{Path(cmd[0]).name} was cancelled", reason="cancelled"
                    )
                if clock() >= deadline:
                    _kill(proc)
                    raise UnreadableFile(
                        f"{Path(cmd[0]).name} ran past the processing time limit",
                        reason="timeout",
                    )
                try:
                    proc.wait(timeout=_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
        except BaseException:
            _kill(proc)
            raise
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read()[-2000:].decode("utf-8", errors="replace").strip()
            raise UnreadableFile(
                f"{Path(cmd[0]).name} failed (exit {proc.returncode}): {tail or 'no message'}",
                reason="tool_failed",
                exit_code=proc.returncode,
            )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
