"""How ``kb_manage`` asks the user: the form it elicits, the question's text, and the decision
taken when no question is asked (a refusal, or a write the server was allowed to make)."""

# No `from __future__ import annotations`: the SDK reads the Approve model's annotations.
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from knowbase import Base


class Approve(BaseModel):
    """What the user answers (form elicitation)."""

    approve: bool = Field(default=True, description="Allow this change to the knowledge base")


@dataclass(frozen=True)
class _Decision:
    """A resolver outcome that is not an elicitation: a refusal or a pre-granted write."""

    granted: bool
    error: dict[str, Any] | None = None


def _client_elicits(ctx: Any) -> bool:
    try:
        caps = ctx.client_capabilities
    except Exception:  # no request context (a direct call): no client to ask
        return False
    e = caps.elicitation if caps is not None else None
    return e is not None and (e.form is not None or e.url is None)


def _approval_text(
    b: Base,
    action: str,
    type: str | None,
    path: str | None,
    url: str | None,
    title: str | None,
    ids: list[str] | None,
) -> str:
    if action == "add":
        what = {"file": path, "url": url, "note": f"note {title!r}" if title else "a note"}
        return (
            f"Allow the assistant to add {what.get(type or '', '')} to knowledge base {b.name!r}?"
        )
    listed = ", ".join((ids or [])[:10]) + (" …" if len(ids or []) > 10 else "")
    return f"Allow the assistant to {action} {len(ids or [])} document(s) in {b.name!r}: {listed}?"
