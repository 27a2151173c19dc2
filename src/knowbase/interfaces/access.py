"""Scope rules, in one place: what each HTTP route and each MCP tool needs from a key.

A key (``kb keys create``) has an access, ``read`` or ``write``, and the bases it sees;
``KNOWBASE_API_TOKEN`` is the admin (every base, ``admin`` access). A rule says what a route or
tool needs (``read`` < ``write`` < ``admin``; ``public``: no key) and where it names a base,
so the check knows what to look at:

- ``path``: the ``{base}`` path parameter, checked before the route runs;
- ``body``, ``query``, ``job``: the route (or tool) checks the base it is given, or the job's;
- ``list``: the route lists bases or what belongs to them, and keeps only the key's;
- ``own``: Dify's ``/retrieval``, which checks keys itself (Dify's error shape);
- ``none``: names no base.

A base outside a key's scope answers as a base that does not exist (404, 2001, "not
available to this assistant"), and the base is looked at before the access: no answer tells a
key which other bases exist. Enforced by ``interfaces/http/scopes.py`` (HTTP, ``/retrieval``)
and ``interfaces/mcp/keys.py`` (MCP over HTTP); a route or tool without a rule here is refused
to everyone, and ``tests/interfaces/test_http_key_matrix.py`` fails until it has one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Access = Literal["public", "read", "write", "admin"]
Names = Literal["none", "path", "body", "query", "job", "list", "own"]


@dataclass(frozen=True)
class Rule:
    """``access``: what the caller needs. ``names``: where the route names a base (``path``
    is checked here; ``body``, ``query``, ``job`` and ``list`` by the route with
    :func:`visible_base`; ``own``: the route checks keys itself)."""

    access: Access
    names: Names = "path"


R, W, A = Rule("read"), Rule("write"), Rule("admin")
PUBLIC = Rule("public", "none")

#: (method, path template) → rule. HEAD is answered as GET.
ROUTES: dict[tuple[str, str], Rule] = {
    # bases
    ("GET", "/bases"): Rule("read", "list"),
    ("POST", "/bases"): Rule("admin", "none"),
    ("GET", "/bases/{base}"): R,
    ("PATCH", "/bases/{base}"): W,  # settings
    ("DELETE", "/bases/{base}"): A,
    ("POST", "/bases/{base}/restore"): A,  # makes a new base
    ("POST", "/archives/import"): Rule("admin", "none"),  # makes a new base from an upload
    ("POST", "/bases/{base}/enable-embedding"): W,
    ("POST", "/bases/{base}/embedding-model"): W,
    ("GET", "/bases/{base}/model-switch"): R,
    # items
    ("POST", "/bases/{base}/items"): W,
    ("GET", "/bases/{base}/items"): R,
    ("POST", "/bases/{base}/uploads"): W,
    ("POST", "/bases/{base}/uploads/folders"): W,
    ("GET", "/bases/{base}/items/{item_id}"): R,
    ("DELETE", "/bases/{base}/items/{item_id}"): W,
    ("POST", "/bases/{base}/items/{item_id}/reindex"): W,
    ("GET", "/bases/{base}/items/{item_id}/chunks"): R,
    ("PATCH", "/bases/{base}/items/{item}/labels"): W,
    ("POST", "/bases/{base}/sync"): W,
    # search and concepts
    ("GET", "/bases/{base}/search"): R,
    ("POST", "/bases/{base}/search"): R,
    ("POST", "/search"): Rule("read", "body"),
    ("GET", "/bases/{base}/concepts/read"): R,
    ("GET", "/bases/{base}/concepts/grep"): R,
    ("GET", "/bases/{base}/concepts/tree"): R,
    ("GET", "/bases/{base}/concepts/{concept_id}/outline"): R,
    ("POST", "/bases/{base}/concepts/delete"): W,
    ("POST", "/bases/{base}/concepts/refresh"): W,
    # jobs, events, status
    ("GET", "/jobs"): Rule("read", "query"),
    ("GET", "/bases/{base}/jobs"): R,
    ("GET", "/bases/{base}/changes"): R,
    ("POST", "/bases/{base}/jobs/cancel"): W,
    ("GET", "/jobs/{job_id}"): Rule("read", "job"),
    ("GET", "/bases/{base}/events"): R,
    ("GET", "/bases/{base}/summary"): R,
    ("GET", "/bases/{base}/progress"): R,  # the current run in chunks
    ("GET", "/status"): Rule("read", "list"),
    ("GET", "/embedding-models"): Rule("read", "none"),
    # Dify's external knowledge API: its own keys and error shape (interfaces/http/external.py)
    ("POST", "/retrieval"): Rule("read", "own"),
    ("POST", "/dify/retrieval"): Rule("read", "own"),
    ("POST", "//retrieval"): Rule("read", "own"),
    ("POST", "/dify//retrieval"): Rule("read", "own"),
    # the console's pages hold no data (their scripts call the routes above) and the schema
    ("GET", "/"): PUBLIC,
    ("GET", "/console/bases/{base}"): PUBLIC,
    ("GET", "/console/search"): PUBLIC,
    ("GET", "/console/view"): PUBLIC,
    ("GET", "/console/static/{name}"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
}


#: MCP tools (``interfaces/mcp``) → rule; their base comes in their arguments.
TOOLS: dict[str, Rule] = {
    "kb_list": Rule("read", "body"),  # baseId: one base's outline; none: the key's bases
    "kb_tree": Rule("read", "body"),
    "kb_grep": Rule("read", "body"),
    "kb_search": Rule("read", "body"),
    "kb_read": Rule("read", "body"),
    "kb_outline": Rule("read", "body"),
    "kb_manage": Rule("write", "body"),
}


_CONVERTER = re.compile(r"\{(\w+):\w+\}")


def rule_for(method: str, path: str) -> Rule | None:
    """The rule of a route (``HEAD`` as ``GET``; ``{item:path}`` as ``{item}``, the form
    ``/openapi.json`` shows), None when the table has none."""
    return ROUTES.get(("GET" if method == "HEAD" else method, _CONVERTER.sub(r"{\1}", path)))


__all__ = ["ROUTES", "TOOLS", "Access", "Names", "Rule", "rule_for"]
