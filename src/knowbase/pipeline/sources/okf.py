"""OKF frontmatter on app-written snapshots (§4.1 "OKF frontmatter").

A url or note snapshot is stored as::

    ---
    type: "URL"
    title: "Getting Started"
    resource: "https://example.com/guide"
    timestamp: "2026-06-11T10:00:00.000Z"
    ---

    <body>

Values are JSON strings (as JavaScript's ``JSON.stringify`` writes them), so a newline, ``---``
or ``#`` inside a value never forms a delimiter line. :func:`strip_okf_frontmatter` is the exact
inverse of :func:`serialize_okf`, which keeps a snapshot's content hash stable across reindexes.
"""

from __future__ import annotations

import json
import re

_OPEN = "---\n"
_CLOSE = "\n---\n"
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _json_string(value: str) -> str:
    """``JSON.stringify(value)`` for a string.

    ``json.dumps(ensure_ascii=False)`` matches it byte for byte except for lone surrogates,
    which JavaScript escapes (``\\udXXX``) and Python would emit raw (unencodable as UTF-8).
    """
    text = json.dumps(value, ensure_ascii=False)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def serialize_okf(
    body: str,
    *,
    type_: str,
    title: str | None = None,
    resource: str | None = None,
    timestamp: str | None = None,
) -> str:
    """Prepend an OKF block to ``body``; keys in the order type, title, resource, timestamp.

    >>> serialize_okf("# Hi\\n", type_="Note", title="Hi", timestamp="2026-01-01T00:00:00.000Z")
    '---\\ntype: "Note"\\ntitle: "Hi"\\ntimestamp: "2026-01-01T00:00:00.000Z"\\n---\\n\\n# Hi\\n'
    """
    fields = (("type", type_), ("title", title), ("resource", resource), ("timestamp", timestamp))
    lines = [f"{key}: {_json_string(value)}" for key, value in fields if value is not None]
    return _OPEN + "\n".join(lines) + _CLOSE + "\n" + body


def strip_okf_frontmatter(text: str) -> str:
    """Remove a leading ``---`` … ``---`` block and the empty line after it.

    Text that does not start with ``---\\n``, or whose block is never closed, comes back
    unchanged. Only the first block is removed, so a body that itself starts with frontmatter
    (or holds ``---`` rules) survives a round trip.

    >>> strip_okf_frontmatter(serialize_okf("---\\nx\\n", type_="URL"))
    '---\\nx\\n'
    """
    if not text.startswith(_OPEN):
        return text
    # Searching from index 3 lets an empty block ("---\n---\n") close at once, as in the origin.
    end = text.find(_CLOSE, len(_OPEN) - 1)
    if end == -1:
        return text
    rest = text[end + len(_CLOSE) :]
    return rest[1:] if rest.startswith("\n") else rest
