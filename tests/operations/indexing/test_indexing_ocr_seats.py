"""OCR runs in at most ``OCR_SEATS`` children at once; a job waiting for a seat obeys cancels."""

from __future__ import annotations

import threading

import pytest

from knowbase.jobs.model import Cancelled
from knowbase.operations.indexing import process_file


class _Ctx:
    def __init__(self) -> None:
        self.cancel_event = threading.Event()

    def check_cancelled(self) -> None:
        if self.cancel_event.is_set():
            raise Cancelled("cancelled")


def test_a_job_waits_for_a_seat_and_a_cancel_ends_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_file, "OCR_SEATS", threading.BoundedSemaphore(1))
    holder, waiter = _Ctx(), _Ctx()
    outcome: list[str] = []

    def wait_for_seat() -> None:
        try:
            with process_file._ocr_seat(waiter):  # type: ignore[arg-type]
                outcome.append("seated")
        except Cancelled:
            outcome.append("cancelled")

    with process_file._ocr_seat(holder):  # type: ignore[arg-type]
        thread = threading.Thread(target=wait_for_seat)
        thread.start()
        thread.join(0.5)
        assert outcome == []  # the only seat is taken
        waiter.cancel_event.set()
        thread.join(5)
    assert outcome == ["cancelled"]
    with process_file._ocr_seat(holder):  # type: ignore[arg-type]
        pass  # the seat came back
