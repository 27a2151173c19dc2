"""What the parent sends the reader child (:mod:`.child`): one call by name, with its caps.

Apart from both sides so that the parent (:mod:`.isolation`) need not import the child's
module, which imports the readers package back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    """One call: ``func`` is a name in :data:`.child.FUNCTIONS`, never an arbitrary callable."""

    func: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    memory_mb: int | None
    test_delay_s: float = 0.0  # test hook: sleep before reading (time-cap tests)
    test_alloc_mb: int = 0  # test hook: allocate before reading (memory-cap tests)
