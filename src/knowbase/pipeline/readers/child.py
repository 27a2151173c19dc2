"""The reader child process: ``python -m knowbase.pipeline.readers.child``.

Speaks length-prefixed pickles (``multiprocessing.connection`` framing) on its stdin/stdout:
one ``Request`` in, one reply out, until EOF. Each request sets its own address-space cap
(``RLIMIT_AS``) before reading. A reply is ``(fatal, ("ok", result))`` or
``(fatal, ("error", class_name, message, hint, details))``; the parent rebuilds the same error
class.
A ``MemoryError`` ends the child after it replies (its heap may be fragmented or half-built).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from knowbase.pipeline.readers.request import Request

_MIB = 1024 * 1024


def _read_file(path: str, max_bytes: int | None, as_text: bool = False) -> Any:
    from knowbase.pipeline.readers import read_file

    return read_file(Path(path), max_bytes=max_bytes, as_text=as_text)


def _read_files(
    paths: list[str], max_bytes: int | None, as_text: list[bool] | None = None
) -> list[tuple[Any, ...]]:
    """Many files in one round trip (an index batch): each file's own reply, so one bad file
    fails alone. A ``MemoryError`` is not caught here: it ends the whole request (fatal), and
    the parent reads the files again one by one to find the culprit."""

    replies: list[tuple[Any, ...]] = []
    for path, forced in zip(paths, as_text or [False] * len(paths), strict=True):
        try:
            replies.append(("ok", _read_file(path, max_bytes, forced)))
        except MemoryError:
            raise
        except Exception as exc:  # as in _handle: this file's error, or an unreadable file
            replies.append(_error_reply(exc))
    return replies


def _error_reply(exc: BaseException) -> tuple[Any, ...]:
    """The reply for an error a reader raised (the parent rebuilds the same class)."""
    from knowbase.errors import KnowbaseError

    if isinstance(exc, KnowbaseError):
        hint = exc.__dict__.get("hint")  # only an instance-level hint; the class has its own
        return ("error", type(exc).__name__, exc.message, hint, _plain(exc.details))
    if isinstance(exc, RecursionError):
        return ("error", "UnreadableFile", f"file structure too deep: {exc}", None, {})
    # a library bug on a hostile file is still an unreadable file
    message = f"the reader failed: {type(exc).__name__}: {exc}"
    return ("error", "UnreadableFile", message, None, {"reason": "reader_error"})


def _pdf_page_texts(path: str) -> Any:
    from knowbase.pipeline.readers.pdf import pdf_page_texts

    return pdf_page_texts(Path(path))


def _read_with_figures(path: str) -> Any:
    from knowbase.pipeline.readers.figures import read_with_figures

    return read_with_figures(Path(path))


FUNCTIONS = {
    "read_file": _read_file,
    "read_files": _read_files,
    "pdf_page_texts": _pdf_page_texts,
    "read_with_figures": _read_with_figures,
}


def _set_memory_cap(memory_mb: int | None) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = resource.RLIM_INFINITY if memory_mb is None else memory_mb * _MIB
    if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft > hard):
        soft = hard
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _die_with_parent() -> None:
    # A reader blocked in C code never sees the pipe close; have the kernel kill us instead.
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _handle(req: Request) -> tuple[tuple[Any, ...], bool]:

    ballast = None
    try:
        _set_memory_cap(req.memory_mb)
        if req.test_delay_s:
            time.sleep(req.test_delay_s)
        if req.test_alloc_mb:
            ballast = bytearray(req.test_alloc_mb * _MIB)
        return ("ok", FUNCTIONS[req.func](*req.args, **req.kwargs)), False
    except MemoryError:
        del ballast
        return (
            "error",
            "FileTooLarge",  # code too_large: the file is past a limit, which the message names
            f"reading the file needed more than the {req.memory_mb} MiB memory cap of the "
            "reader process",
            None,
            {"reason": "memory_cap", "memory_mb": req.memory_mb},
        ), True
    except Exception as exc:  # the reader's error, or a library bug on a hostile file
        return _error_reply(exc), False
    finally:
        _set_memory_cap(None)


def _plain(details: dict[str, Any]) -> dict[str, Any]:
    scalar = str | int | float | bool | None
    return {k: v if isinstance(v, scalar) else str(v) for k, v in details.items()}


def main() -> None:
    """Serve requests until the parent closes stdin."""
    _die_with_parent()
    # The channel takes the real stdout; anything a library prints goes to stderr instead.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    inbox = Connection(os.dup(0), writable=False)
    outbox = Connection(out_fd, readable=False)
    import knowbase.pipeline.readers  # noqa: F401  warm the imports before saying ready

    outbox.send(("ready", os.getpid()))
    while True:
        try:
            req = inbox.recv()
        except (EOFError, OSError):
            return
        if req is None:
            return
        reply, fatal = _handle(req)
        try:
            outbox.send((fatal, reply))
        except Exception as exc:  # an unpicklable result: report it rather than hang
            message = f"reader result not transferable: {exc}"
            outbox.send((fatal, ("error", "UnreadableFile", message, None, {})))
        if fatal:
            return


if __name__ == "__main__":
    sys.exit(main())
