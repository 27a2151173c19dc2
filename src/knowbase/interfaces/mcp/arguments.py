"""Tool arguments an agent got wrong, answered as ``invalid_input`` guidance (docs/mcp.md).

The SDK validates a call's arguments against the tool's signature and, on failure, sends the
agent pydantic's own text ("1 validation error for kb_searchArguments … errors.pydantic.dev"),
and it drops arguments the tool does not have without a word. An agent reads neither well: it
gets, instead, which argument is wrong and the rule it broke, and an argument the tool does not
take (``topK`` on ``kb_read``) is an error naming the ones it does.

The SDK is imported inside :func:`server_class` only, so that ``kb --help`` never imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from knowbase.interfaces.access import TOOLS
from knowbase.interfaces.mcp.results import _fail

GUIDANCE = "Fix these arguments and call the tool again; the tool's input schema lists them."


def unknown_arguments(tool: str, given: Iterable[str], schema: Mapping[str, Any]) -> Any:
    """A tool error for the arguments ``tool`` does not take, or None when there are none."""
    known = list(schema.get("properties", {}))
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return None
    return _fail(
        f"{tool} has no argument {', '.join(map(repr, unknown))}; its arguments are "
        f"{', '.join(known)}.",
        code="invalid_input",
        guidance=GUIDANCE,
    )


def invalid_arguments(tool: str, errors: list[Mapping[str, Any]]) -> Any:
    """A tool error from pydantic's ``errors()``: each argument and the rule it broke."""
    problems = []
    for err in errors:
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        rule = "is required" if err.get("type") == "missing" else str(err.get("msg", "is invalid"))
        problems.append(f"{where}: {rule}")
    return _fail(
        f"Invalid arguments for {tool}: " + "; ".join(problems) + ".",
        code="invalid_input",
        guidance=GUIDANCE,
        arguments=sorted({p.split(":")[0] for p in problems}),
    )


def _refuse_unruled(name: str) -> Any:
    """A tool registered without a rule in ``interfaces/access.py`` is refused to everyone."""
    return _fail(f"{name} has no scope rule; nobody may call it.", code="route_without_scope")


def server_class() -> type:
    """``MCPServer`` answering bad arguments as above (the SDK is imported here)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
    from pydantic import ValidationError

    class CheckedServer(MCPServer):  # type: ignore[misc]
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            # the public listing (six tools), not the SDK's private lookup
            schemas = {t.name: t.input_schema for t in await self.list_tools()}
            if name in schemas and name not in TOOLS:  # fail closed: no rule, no calls
                return _refuse_unruled(name)
            schema = schemas.get(name)
            if schema is not None:
                refused = unknown_arguments(name, arguments, schema)
                if refused is not None:
                    return refused
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                mistake = not isinstance(exc, UnexpectedToolError)
                if mistake and isinstance(exc.__cause__, ValidationError):
                    return invalid_arguments(name, exc.__cause__.errors())
                raise

    return CheckedServer
