"""Content-addressed ids of the index (§3 "Hashes"); all sha256 hex."""

from __future__ import annotations

import hashlib


def text_hash(text: str) -> str:
    """``content_hash`` and ``embedding_text_hash``: sha256 of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def unit_id(
    material_id: str,
    content_hash: str,
    unit_type: str,
    unit_index: int,
    char_start: int,
    char_end: int,
) -> str:
    """The search unit id; the chunker config is deliberately not part of it."""
    parts = [material_id, content_hash, unit_type, str(unit_index), str(char_start), str(char_end)]
    return text_hash(" ".join(parts))


def search_text_id(unit: str) -> str:
    return text_hash(f"search_unit {unit} body")
