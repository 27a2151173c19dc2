"""``kb_manage``'s body (§8): apply a change the user approved, and the checks that run before
anyone is asked (:mod:`knowbase.interfaces.mcp` registers the tool and its approval).

The SDK is imported inside functions only, so that ``kb --help`` never imports it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from knowbase import AddInput, Base
from knowbase.errors import KnowbaseError, NotFound
from knowbase.interfaces.mcp.results import _fail, _from_error, _ok
from knowbase.interfaces.mcp.scope import OutOfScope
from knowbase.interfaces.mcp.tools import _not_found_guidance

if TYPE_CHECKING:
    from knowbase.interfaces.mcp.scope import Scope
    from knowbase.service import Knowledge


# --- kb_manage ---------------------------------------------------------------------------------
def kb_manage(
    scope: Scope,
    *,
    base_id: str,
    action: str,
    type: str | None,
    path: str | None,
    url: str | None,
    content: str | None,
    title: str | None,
    concept_ids: list[str] | None,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Any:
    """Apply an approved change (blocking: run it off the event loop). An add may carry tags
    and metadata (a re-added source gets them added)."""
    kb = scope.kb
    try:
        b = scope.base(base_id)
        if action == "add":
            inp = _add_input(kb, b, type, path, url, content, title)
            if tags or metadata:
                inp = inp.with_labels(tags, metadata)
            # The facade's default conflict (``update``): a URL already in the base is fetched
            # again, not copied (DESIGN turn 3), as on every surface.
            result = kb.add(b.id, [inp])
            return _ok(
                {
                    "action": "add",
                    "added": [i.source for i in result.items],
                    "updated": [i.source for i in result.updated] or None,
                    "items": [{"itemId": i.id, "status": i.status} for i in result.items],
                    "note": "Indexing runs in the background; the conceptId appears in "
                    "kb_list (baseId) once the item is completed.",
                }
            )
        if action == "sync":  # never prunes: an agent cannot delete by surprise
            r = kb.sync(b.id, prune=False)
            counts = {k: len(getattr(r, k)) for k in ("added", "changed", "vanished", "failed")}
            return _ok({"action": "sync", "jobId": r.job_id, **counts})
        ids = list(concept_ids or [])
        if action == "delete":
            done = kb.concepts.delete_concepts(b.id, ids)
            key = "deleted"
        else:
            done = kb.concepts.refresh_concepts(b.id, ids)
            key = "refreshed"
        return _ok({"action": action, key: done["applied"], "notFound": done["not_found"]})
    except OutOfScope as exc:
        return _fail(str(exc))
    except NotFound as exc:
        return _from_error(exc, _not_found_guidance(exc))
    except KnowbaseError as exc:
        return _from_error(exc)


def existing_concepts(kb: Knowledge, b: Base, concept_ids: list[str]) -> list[str]:
    """The ids that name a readable document of ``b`` (what an approval may list)."""
    found = []
    for concept_id in concept_ids:
        try:
            kb.concepts.resolve(b.id, concept_id)
        except KnowbaseError:
            continue
        found.append(concept_id)
    return found


def none_of_these(concept_ids: list[str]) -> dict[str, str]:
    return {
        "error": "None of these conceptIds is a document of this base: "
        + ", ".join(concept_ids[:10])
        + ". Nothing was changed; check them with kb_list (baseId) or kb_search.",
        "code": "not_found",
    }


def _manage_problem(
    action: str, type: str | None, path: str | None, url: str | None, ids: list[str] | None
) -> str | None:
    if action == "add":
        if type is None:
            return "action add needs type: file, url or note"
        if type == "file" and not (path and os.path.isabs(path)):
            return "type file needs an absolute path"
        if type == "url" and not url:
            return "type url needs a url"
        return None
    if action == "sync":
        return None
    if not ids:
        return f"action {action} needs a non-empty conceptIds list"
    return None


def _add_input(
    kb: Knowledge,
    b: Base,
    type: str | None,
    path: str | None,
    url: str | None,
    content: str | None,
    title: str | None,
) -> AddInput:
    """§8's source derivation; agent file adds keep no origin; URLs pass the SSRF guard."""
    if type == "file":
        assert path is not None
        return AddInput.file(path, source=os.path.basename(path), keep_origin=False)
    if type == "url":
        from knowbase import check_url

        checked = check_url(
            url or "", allow_local=b.allow_local_urls or kb.settings.allow_local_urls
        )
        return AddInput("url", checked, url=checked, origin=checked)
    return AddInput.note(content or "", title=title)
