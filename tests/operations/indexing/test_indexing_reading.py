"""index-documents reads files in pooled child processes from short-lived job threads."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from knowbase.pipeline.readers import read_file_isolated

pytestmark = pytest.mark.timeout(60)


def test_a_pooled_reader_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    """Each job attempt runs in its own thread; a reader child started by one attempt is
    reused by the next after the first thread has ended. (PR_SET_PDEATHSIG follows the
    forking *thread*: children forked from job threads were SIGKILLed on reuse.)"""
    path = tmp_path / "a.md"
    path.write_text("hello reader", encoding="utf-8")
    results: list[object] = []

    def job() -> None:
        try:
            results.append(read_file_isolated(path)[0].text)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            results.append(exc)

    for _ in range(4):
        t = threading.Thread(target=job)
        t.start()
        t.join()
    assert results == ["hello reader"] * 4
