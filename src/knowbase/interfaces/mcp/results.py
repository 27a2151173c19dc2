"""The shape of the MCP tools' results: camelCase keys, compact JSON text without empty fields,
and errors as ``{"error", "code", "hint", "guidance"}`` with ``isError`` set.

The SDK is imported inside functions only, so that ``kb --help`` never imports it.
"""

from __future__ import annotations

import json
from typing import Any

from knowbase.errors import KnowbaseError


def _camel(value: Any) -> Any:
    """snake_case keys → camelCase, except inside ``locator`` (reader-defined keys)."""
    if isinstance(value, dict):
        out = {}
        for key, inner in value.items():
            head, *rest = str(key).split("_")
            name = head + "".join(p[:1].upper() + p[1:] for p in rest)
            out[name] = inner if key == "locator" else _camel(inner)
        return out
    if isinstance(value, list):
        return [_camel(v) for v in value]
    return value


def _compact(value: Any) -> Any:
    """Drop the keys that say nothing (None, an empty dict): an empty ``locator`` on every
    unit of a read cost ~3 KB per 20 K characters. Lists are kept, even empty (a result)."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v is not None and v != {}}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def _ok(data: dict[str, Any], text: str | None = None) -> Any:
    """A tool result: compact JSON text (no indentation, no empty fields) and the same data."""
    from mcp.types import CallToolResult, TextContent

    data = _compact(data)
    body = text if text is not None else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=body)], structured_content=data)


def _fail(message: str, **extra: Any) -> Any:
    from mcp.types import CallToolResult, TextContent

    data = {"error": message, **{k: v for k, v in extra.items() if v is not None}}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
        structured_content=data,
        is_error=True,
    )


def _from_error(exc: KnowbaseError, guidance: str | None = None) -> Any:
    return _fail(exc.message, code=exc.code, hint=exc.hint, guidance=guidance)
