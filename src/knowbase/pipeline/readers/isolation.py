"""Run readers of untrusted files in a child process with time and memory caps.

Threads cannot be killed, and a hostile PDF or workbook can loop or allocate without end
(DESIGN.md, "Handlers that do not return"). Each call goes to a child process
(:mod:`.child`) from a small pool of warm ones; the child caps its address space
(``RLIMIT_AS``, so ``memory_mb`` bounds virtual memory, not RSS) and the parent waits at most
``timeout_s``. A breach kills the child and raises UnreadableFile; the pool starts a fresh one
next time. Errors the reader raises come back as the same class, message, hint and details.

Test hooks, read in the parent at call time: ``KNOWBASE_TEST_READER_DELAY_S`` makes the child
sleep before reading, ``KNOWBASE_TEST_READER_ALLOC_MB`` makes it allocate that much first.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from knowbase.errors import KnowbaseError, UnreadableFile, all_error_classes
from knowbase.pipeline.documents import Document
from knowbase.pipeline.readers.request import Request

_START_TIMEOUT_S = 60.0  # interpreter start + imports; not charged to the read's own cap
_POOL_SIZE = 2
_MAX_USES = 100  # recycle a child after this many reads to shed leaked memory
# Children are started from this one long-lived thread: the child's PR_SET_PDEATHSIG fires when
# the *thread* that forked it exits, and job handlers run in short-lived threads, so a pooled
# child started by one job was SIGKILLed mid-read of the next job when the first thread ended.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kb-reader-spawn")


class _Child:
    def __init__(self) -> None:
        env = dict(os.environ)
        # the folder that holds the package (src/ in a checkout): knowbase/pipeline/readers/here
        src = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "knowbase.pipeline.readers.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a Ctrl-C to the parent's group is the parent's to handle
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.outbox = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.inbox = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.uses = 0
        if not self.inbox.poll(_START_TIMEOUT_S):
            self.kill()
            raise UnreadableFile("the reader process did not start", reason="child_start")
        try:
            self.inbox.recv()
        except (EOFError, OSError) as exc:
            self.kill()
            raise UnreadableFile(
                f"the reader process failed to start (exit {self.proc.poll()})",
                reason="child_start",
            ) from exc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for conn in (self.inbox, self.outbox):
            conn.close()

    def close(self) -> None:
        try:
            self.outbox.send(None)
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        self.kill()


class ReaderPool:
    """Warm reader children, at most ``size`` kept idle; a busy pool starts extra ones."""

    def __init__(self, size: int = _POOL_SIZE) -> None:
        self.size = size
        self._idle: list[_Child] = []
        self._lock = threading.Lock()

    def call(
        self, func: str, *args: Any, timeout_s: float, memory_mb: int | None, **kwargs: Any
    ) -> Any:
        """Run ``child.FUNCTIONS[func](*args, **kwargs)`` in a child and return its result."""
        req = Request(
            func,
            args,
            kwargs,
            memory_mb,
            test_delay_s=float(os.environ.get("KNOWBASE_TEST_READER_DELAY_S") or 0),
            test_alloc_mb=int(os.environ.get("KNOWBASE_TEST_READER_ALLOC_MB") or 0),
        )
        child = self._take()
        try:
            child.outbox.send(req)
            if not child.inbox.poll(timeout_s):
                child.kill()
                raise UnreadableFile(
                    f"reading took longer than {timeout_s:g} s; the reader was stopped",
                    reason="timeout",
                    timeout_s=timeout_s,
                )
            fatal, reply = child.inbox.recv()
        except (EOFError, OSError) as exc:
            child.kill()
            raise UnreadableFile(
                f"the reader process died (exit {child.proc.returncode}); "
                "the file may be hostile or need more memory",
                reason="child_died",
                exit_code=child.proc.returncode,
            ) from exc
        except BaseException:
            child.kill()
            raise
        child.uses += len(args[0]) if func == "read_files" else 1  # recycle by files read
        if fatal:  # the child exits after a MemoryError; never hand it out again
            child.kill()
        else:
            self._give_back(child)
        if reply[0] == "ok":
            return reply[1]
        raise _rebuild(*reply[1:])

    def _take(self) -> _Child:
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.proc.poll() is None:
                    return child
                child.kill()
        return _SPAWNER.submit(_Child).result()

    def _give_back(self, child: _Child) -> None:
        if child.proc.poll() is not None or child.uses >= _MAX_USES:
            child.kill()
            return
        with self._lock:
            if len(self._idle) < self.size:
                self._idle.append(child)
                return
        child.close()

    def close(self) -> None:
        """Stop every idle child (busy ones stop when their call returns)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.close()


def _rebuild(name: str, message: str, hint: str | None, details: dict[str, Any]) -> KnowbaseError:
    classes = {cls.__name__: cls for cls in all_error_classes()}
    cls = classes.get(name, UnreadableFile)
    return cls(message, hint=hint, **details)


_POOL = ReaderPool()
atexit.register(_POOL.close)


def read_file_isolated(
    path: Path,
    *,
    timeout_s: float = 120,
    memory_mb: int = 1024,
    max_bytes: int | None = None,
    as_text: bool = False,
) -> list[Document]:
    """:func:`read_file` in a child process capped at ``timeout_s`` and ``memory_mb``.

    Raises the same errors as ``read_file``; a breach of either cap, or a crash of the
    child, raises UnreadableFile (``details["reason"]``: ``timeout``, ``memory_cap``,
    ``child_died``).
    """
    return _POOL.call(
        "read_file",
        str(Path(path).resolve()),
        max_bytes,
        as_text,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
    )


def read_files_isolated(
    paths: list[Path],
    *,
    timeout_s: float = 120,
    memory_mb: int = 1024,
    max_bytes: int | None = None,
    as_text: list[bool] | None = None,
) -> list[list[Document] | KnowbaseError]:
    """:func:`read_file_isolated` of many files in one child round trip (an index batch):
    each file's documents, or the error reading it raised. When the batch breaches a cap or
    kills its child, the files are read again one by one, so only the culprit fails.
    ``as_text``: per file, read it as text whatever it holds (``kb add --as-text``)."""
    forced = as_text or [False] * len(paths)
    if len(paths) == 1:
        try:
            return [
                read_file_isolated(
                    paths[0],
                    timeout_s=timeout_s,
                    memory_mb=memory_mb,
                    max_bytes=max_bytes,
                    as_text=forced[0],
                )
            ]
        except KnowbaseError as exc:
            return [exc]
    try:
        replies = _POOL.call(
            "read_files",
            [os.path.abspath(p) for p in paths],  # no resolve(): a syscall per part, per file
            max_bytes,
            forced,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
        )
    except UnreadableFile:
        out: list[list[Document] | KnowbaseError] = []
        for path, text in zip(paths, forced, strict=True):
            try:
                out.append(
                    read_file_isolated(
                        path,
                        timeout_s=timeout_s,
                        memory_mb=memory_mb,
                        max_bytes=max_bytes,
                        as_text=text,
                    )
                )
            except KnowbaseError as exc:
                out.append(exc)
        return out
    return [reply[1] if reply[0] == "ok" else _rebuild(*reply[1:]) for reply in replies]


def pdf_page_texts_isolated(
    path: Path, *, timeout_s: float = 120, memory_mb: int = 1024
) -> list[str]:
    """:func:`~knowbase.pipeline.readers.pdf.pdf_page_texts` in a capped child process."""
    return _POOL.call(
        "pdf_page_texts", str(Path(path).resolve()), timeout_s=timeout_s, memory_mb=memory_mb
    )


def read_with_figures_isolated(
    path: Path, *, timeout_s: float = 300, memory_mb: int = 2048
) -> list[Any]:
    """:func:`~knowbase.pipeline.readers.figures.read_with_figures` in a capped child process."""
    return _POOL.call(
        "read_with_figures", str(Path(path).resolve()), timeout_s=timeout_s, memory_mb=memory_mb
    )
