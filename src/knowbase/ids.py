"""Identifiers: uuid4 for bases, time-ordered uuid7 for items and jobs."""

from __future__ import annotations

import os
import time
import uuid


def new_base_id() -> str:
    return str(uuid.uuid4())


def new_time_id() -> str:
    """A uuid7 (RFC 9562): 48-bit ms timestamp, version 7, random rest; sorts by creation time."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 68) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))
