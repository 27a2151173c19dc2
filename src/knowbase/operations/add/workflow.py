"""``add_items``: conflict strategies rename / detect / replace, copy-in, rows + jobs (§6)."""

from __future__ import annotations

import logging
import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.guards import assert_base_runnable
from knowbase.catalog.labels import label_fields
from knowbase.catalog.models import Base, Item
from knowbase.conflict_strategy import DEFAULT_STRATEGY, STRATEGIES
from knowbase.conflict_strategy import ConflictStrategy as Strategy
from knowbase.errors import InvalidInput
from knowbase.files import BaseStorage, artifact_path, reserve_free_path, sanitize_filename
from knowbase.files.staging import Staging
from knowbase.operations.add.conflicts import ConflictInfo, find_conflicts
from knowbase.operations.add.inputs import AddInput, validate
from knowbase.operations.purge import cancel_subtree_jobs, purge_rows
from knowbase.operations.scheduling import schedule_item
from knowbase.runtime import Runtime

log = logging.getLogger(__name__)


@dataclass
class AddResult:
    """``status`` is ``added`` or ``conflicts`` (detect found collisions; nothing was added).

    ``updated`` holds the roots an ``update`` re-add refreshes (their jobs are in ``job_ids``).
    """

    status: str
    items: list[Item] = field(default_factory=list)
    updated: list[Item] = field(default_factory=list)
    update_report: dict[str, int] = field(default_factory=dict)  # files changed/new/vanished…
    conflicts: list[ConflictInfo] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)


def add_items(
    rt: Runtime, base: str, inputs: list[AddInput], strategy: Strategy = DEFAULT_STRATEGY
) -> AddResult:
    """Add items to ``base`` (a name or an id). Every input is validated before anything is
    written; the base's row is read here, once, and every step after takes it.

    ``update`` (``operations/add/readd.py``) refreshes the roots whose origin an input re-adds and
    adds the rest as ``rename`` does.
    """
    if strategy not in STRATEGIES:
        raise InvalidInput(f"unknown conflict strategy {strategy!r}: {', '.join(STRATEGIES)}")
    _refuse_home_paths(rt, inputs)  # before validation reads anything of a file
    inputs = [validate(i) for i in inputs]
    with rt.catalog.read() as conn:
        row = base_repo.resolve(conn, base)
    assert_base_runnable(row, "adding items")
    _refuse_forbidden_urls(rt, row, inputs)
    if strategy == "update":
        return _update(rt, row, inputs)
    return _add_resolved(rt, row, inputs, strategy)


def _update(rt: Runtime, base: Base, inputs: list[AddInput]) -> AddResult:
    """``update``: refresh the items the inputs re-add, add the others as ``rename`` does."""
    from knowbase.operations.add.readd import known_items, split_known, update_known

    labelled = {(i.type, i.origin): i for i in inputs if i.origin and (i.tags or i.metadata)}
    known, fresh = split_known(known_items(rt, base.id, inputs), inputs)
    _relabel_known(rt, base, known, labelled)
    result = _add_resolved(rt, base, fresh, "rename")
    result.updated = known
    if known:
        jobs, result.update_report = update_known(rt, base, known)
        result.job_ids.extend(jobs)
    return result


def _add_resolved(rt: Runtime, base: Base, inputs: list[AddInput], strategy: Strategy) -> AddResult:
    """Apply ``rename``, ``detect`` or ``replace`` to inputs already validated for ``base``,
    whose row :func:`add_items` read and checked: copy in, then rows and jobs in one
    transaction."""
    if not inputs:
        return AddResult("added")
    if strategy != "rename":
        with rt.catalog.read() as conn:
            roots = item_repo.list_items(conn, base.id, roots_only=True)
        conflicts, hits, kept = find_conflicts(roots, inputs)
        if strategy == "detect" and conflicts:
            return AddResult("conflicts", conflicts=conflicts)
        if strategy == "replace":
            inputs = kept
            if hits:
                cancel_subtree_jobs(rt, base.id, [h.id for h in hits])

    created_files: list[str] = []
    storage = rt.storage(base.id)
    with Staging(storage) as staging:
        # Copy outside the base lock (DESIGN: it never covers copying): a big add must not stall
        # every other writer of the base. Under the lock the copies are only renamed into place.
        staged = [_stage(staging, inp) for inp in inputs]
        with rt.lock(base.id):
            if strategy == "replace":
                # Re-resolve inside the lock: the roots may have changed since we looked. The
                # purge commits on its own: its vectors and files cannot be rolled back with the
                # catalog, so a later failure must not resurrect a row whose material is gone.
                with rt.catalog.write_tx() as conn:
                    roots = item_repo.list_items(conn, base.id, roots_only=True)
                    _, hits, _ = find_conflicts(roots, inputs)
                    purge_rows(rt, conn, base, item_repo.subtree(conn, [h.id for h in hits]))
            try:
                with rt.catalog.write_tx() as conn:
                    from knowbase.pipeline.processing import processable_extensions

                    processable = processable_extensions(base.file_processor_id)
                    reserved = item_repo.reserved_relative_paths(
                        conn, base.id, processes=bool(processable), processable=processable
                    )
                    result = AddResult("added")
                    for inp, files in zip(inputs, staged, strict=True):
                        data = _materialise(
                            storage, inp, files, reserved, processable, created_files
                        )
                        data.update(label_fields(inp.tags, inp.metadata))
                        data.update(_as_text_fields(inp))
                        item = item_repo.insert_active(
                            conn, base_id=base.id, type=inp.type, data=data, origin=inp.origin
                        )
                        job = schedule_item(rt, conn, base, item)
                        result.items.append(item_repo.get(conn, item.id))
                        if job is not None:
                            result.job_ids.append(job.id)
            except BaseException:
                for problem in storage.delete_paths(created_files):
                    log.warning("add rollback: %s", problem)
                raise
    return result


#: The files of a home that are live databases (catalog, indexes) and their journals.
_DATABASE_FILE = re.compile(r"\.sqlite(-wal|-shm|-journal)?$")


def _refuse_home_paths(rt: Runtime, inputs: list[AddInput]) -> None:
    """Refuse, before anything is read, a source that is knowbase's own home, its bases' folder,
    one base's folder or ``.kb``, or a database file of the home: its databases are live, and
    copying one would open it with the OS in a process that holds a connection to it
    (docs/operations.md). A folder that *contains* the home is fine (its walk skips the home:
    ``IgnoreRules.keep_out``), and so are the home's spools (console uploads)."""
    home, bases = (os.path.realpath(p) for p in (rt.settings.home, rt.settings.bases_dir))
    for inp in inputs:
        if inp.type not in ("file", "directory") or not inp.origin:
            continue
        real = os.path.realpath(inp.origin)
        under_bases = os.path.relpath(real, bases).split(os.sep)
        refused = (
            real in (home, bases)
            or (real.startswith(home + os.sep) and bool(_DATABASE_FILE.search(real)))
            or (
                real.startswith(bases + os.sep)
                and (len(under_bases) == 1 or under_bases[1] == ".kb" and len(under_bases) == 2)
            )
        )
        if refused:
            raise InvalidInput(
                f"{inp.origin} is part of knowbase's own home ({home}): its databases are live",
                hint="add the folders you keep your documents in, not the home",
                path=inp.origin,
            )


def _as_text_fields(inp: AddInput) -> dict[str, Any]:
    """``kb add --as-text``: a file it names is read as text; a folder keeps the globs for
    its expansion (and the syncs after it)."""
    if not inp.as_text:
        return {}
    if inp.type == "directory":
        return {"as_text_globs": list(inp.as_text)}
    return {"as_text": True} if inp.type == "file" and inp.forces_text() else {}


def _refuse_forbidden_urls(rt: Runtime, base: Base, inputs: list[AddInput]) -> None:
    """Refuse a page whose host is a local/private address before anything is written, so a
    caller hears it now instead of seeing the item accepted and then failed.

    Only the refusal is decided here; a host that cannot be resolved right now is left to the
    fetch job (retried, then reported on the item).
    """
    pages = [inp for inp in inputs if inp.type in ("url", "sitemap")]
    if not pages:
        return  # the check's module imports httpx (~0.2 s): a file or folder add skips it
    from knowbase.errors import Unavailable
    from knowbase.pipeline.sources.ssrf import check_url

    allow = base.allow_local_urls or rt.settings.allow_local_urls
    for inp in pages:
        try:
            check_url(inp.url or "", allow_local=allow)
        except Unavailable:
            continue


def _stage(staging: Staging, inp: AddInput) -> dict[str, Path]:
    """Copy the input's files into the staging folder: ``path``, ``indexed``, ``snapshot``."""
    files: dict[str, Path] = {}
    if inp.type == "file":
        assert inp.path is not None
        files["path"] = staging.copy(Path(inp.path))
        if inp.indexed_path:
            files["indexed"] = staging.copy(Path(inp.indexed_path))
    elif inp.type == "url" and inp.snapshot_path:
        files["snapshot"] = staging.copy(Path(inp.snapshot_path))
    return files


def _relabel_known(
    rt: Runtime, base: Base, known: list[Item], labelled: dict[tuple[str, str | None], AddInput]
) -> None:
    """A re-add that names tags or metadata adds them to the item it updates."""
    from knowbase.operations.labels import set_labels

    for root in known:
        inp = labelled.get((root.type, root.origin))
        if inp is not None:
            set_labels(rt, base, root.id, add_tags=inp.tags, merge_metadata=dict(inp.metadata))


def _materialise(
    storage: BaseStorage,
    inp: AddInput,
    staged: dict[str, Path],
    reserved: set[str],
    processable: frozenset[str],
    created: list[str],
) -> dict:  # type: ignore[type-arg]
    """Move the input's staged copies into raw/ under fresh names, and return the row's data;
    a file the base's processor converts (``processable``) reserves its ``<stem>.md`` too."""
    if inp.type == "file":
        assert inp.path is not None
        name = sanitize_filename(Path(inp.source).name or Path(inp.path).name)
        ext = posixpath.splitext(name)[1].lower()
        wants_md = bool(inp.indexed_path) or ext in processable
        rel = reserve_free_path(storage, name, reserved, reserve_artifact=wants_md)
        storage.move_in(staged["path"], rel)
        created.append(rel)
        data = {"source": inp.source, "relative_path": rel}
        if inp.indexed_path:
            md = artifact_path(rel)
            storage.move_in(staged["indexed"], md)
            created.append(md)
            data["indexed_relative_path"] = md
        return data
    if inp.type == "url":
        data = {"source": inp.source, "url": inp.url}
        if inp.snapshot_path:
            rel = reserve_free_path(storage, Path(inp.snapshot_path).name, reserved)
            storage.move_in(staged["snapshot"], rel)
            created.append(rel)
            data["relative_path"] = rel
        return data
    if inp.type == "note":
        return {"source": inp.source, "content": inp.content}
    if inp.type == "sitemap":
        return {"source": inp.source, "url": inp.url}
    return {"source": inp.source}
