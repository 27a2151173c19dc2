"""``copy_home``: move an embedded home into a PostgreSQL deployment (``kb copy-home --to``).

Per base it reuses :mod:`.portable`: an archive in the target home's ``tmp/`` (removed after),
imported with the ids kept, because the jobs at rest that come along name bases and items by
id. Jobs at rest are every job that is not ``running`` (pending work and terminal history);
a running job means a live worker, and the copy is refused until the workers stop. A target
that already holds a base of the same name (or id) is refused before anything is written, and
a copy that fails part way (or fails its verification) removes what it wrote.

Each base is then verified: item counts by status, materials, units and vectors equal, and a
sample of searches agree — for a few units picked by id, a keyword query made of the unit's
first words and a vector query with the unit's stored vector (no embedding call) must find the
same best hit in the source and in the target (each side's best hit within the other's top 5:
HNSW is approximate and PostgreSQL recomputes BM25, so exact order is not promised).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from knowbase.catalog import bases as base_repo
from knowbase.catalog import items as item_repo
from knowbase.catalog.schema import job as job_t
from knowbase.errors import BaseExists, Conflict, CopyVerificationFailed
from knowbase.index.base import IndexStore, SearchHit
from knowbase.operations.bases import remove_base
from knowbase.portable.transfer import export_base, import_base
from knowbase.runtime import Runtime, queue_of
from knowbase.units.hashing import text_hash

log = logging.getLogger(__name__)

SAMPLE_UNITS = 8
TOP = 5


@dataclass
class CopyReport:
    """Per base: the counts compared and the sample searches run."""

    bases: list[dict[str, Any]] = field(default_factory=list)
    jobs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"bases": self.bases, "jobs": self.jobs}


def _check_target(src: Runtime, dst: Runtime) -> list[Any]:
    with src.catalog.read() as conn:
        bases = base_repo.list_all(conn)
        running = conn.execute(
            sa.select(sa.func.count()).select_from(job_t).where(job_t.c.status == "running")
        ).scalar_one()
    if running:
        raise Conflict(
            f"{running} job(s) are running in this home; stop its workers before copying",
            running=running,
        )
    with dst.catalog.read() as conn:
        clash = [b.name for b in bases if base_repo.find_by_name(conn, b.name) is not None]
        clash += [b.name for b in bases if base_repo.find(conn, b.id) is not None]
    if clash:
        raise BaseExists(
            f"the target already holds base(s) {sorted(set(clash))}", names=sorted(set(clash))
        )
    return bases


def _copy_jobs(src: Runtime, dst: Runtime, base_id: str) -> int:
    with src.catalog.read() as conn:
        rows = [
            dict(r._mapping)
            for r in conn.execute(
                sa.select(job_t).where(
                    job_t.c.queue == queue_of(base_id), job_t.c.status != "running"
                )
            )
        ]
    if rows:
        with dst.catalog.write_tx() as conn:
            for start in range(0, len(rows), 500):
                conn.execute(job_t.insert(), rows[start : start + 500])
    return len(rows)


def _drop_jobs(dst: Runtime, base_id: str) -> None:
    with dst.catalog.write_tx() as conn:
        conn.execute(job_t.delete().where(job_t.c.queue == queue_of(base_id)))


def copy_home(src: Runtime, dst: Runtime) -> CopyReport:
    """Copy every base of ``src`` (with its jobs at rest) into ``dst``, verifying each.

    All or nothing: when a base fails to copy or to verify, the bases already copied are
    removed from the target again (rows, index, raw/ files, jobs) and the error is raised."""
    bases = _check_target(src, dst)
    report = CopyReport()
    tmp = dst.settings.home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    copied: list[str] = []
    try:
        for base in bases:
            archive = tmp / f"copy-{base.id}.kbz"
            try:
                export_base(src, base.id, archive, allow_active=True)
                # Jobs first: a sweep on the target never sees an active item without its job.
                copied.append(base.id)
                report.jobs += _copy_jobs(src, dst, base.id)
                imported = import_base(dst, archive, base.name, keep_ids=True)
            finally:
                archive.unlink(missing_ok=True)
            summary = verify_copy(src, dst, base.id)
            report.bases.append(summary | {"raw_files": imported.raw_files})
    except BaseException:
        for base_id in copied:
            _undo(dst, base_id)
        raise
    return report


def _undo(dst: Runtime, base_id: str) -> None:
    try:
        _drop_jobs(dst, base_id)
        with dst.catalog.read() as conn:
            present = base_repo.find(conn, base_id) is not None
        if present:
            remove_base(dst, base_id)
    except Exception:  # the copy's own error is the one to report
        log.exception("could not remove the copied base %s from the target", base_id)


# --- verification ---------------------------------------------------------------------------
def _store_counts(store: IndexStore) -> tuple[dict[str, list[Any]], int]:
    units = {mid: store.list_units(mid) for mid in sorted(store.material_ids())}
    hashes = {text_hash(u.text) for us in units.values() for u in us}
    vectors = len(store.stored_vectors(hashes)) if store.dims else 0
    return units, vectors


def _key(hit: SearchHit) -> tuple[str, int, int]:
    return (hit.relative_path, hit.char_start, hit.char_end)


def _agree(a: list[SearchHit], b: list[SearchHit], visible: set[str]) -> bool:
    a = [h for h in a if h.material_id in visible]
    b = [h for h in b if h.material_id in visible]
    if not a or not b:
        return not a and not b
    keys_a, keys_b = [_key(h) for h in a], [_key(h) for h in b]
    return keys_a[0] in keys_b and keys_b[0] in keys_a


def verify_copy(src: Runtime, dst: Runtime, base_id: str) -> dict[str, Any]:
    """Counts and sample searches of one copied base; CopyVerificationFailed on a difference."""
    with src.catalog.read() as conn:
        base = base_repo.get(conn, base_id)
        counts = item_repo.count_by_status(conn, base_id)
        visible = {i.id for i in item_repo.list_items(conn, base_id, statuses=["completed"])}
    with dst.catalog.read() as conn:
        target = base_repo.get(conn, base_id)
        target_counts = item_repo.count_by_status(conn, base_id)
    with src.lease(base) as a, dst.lease(target) as b:
        units_a, vectors_a = _store_counts(a)
        units_b, vectors_b = _store_counts(b)
        summary = {
            "base": base.name,
            "items": counts,
            "materials": len(units_a),
            "units": sum(len(u) for u in units_a.values()),
            "vectors": vectors_a,
        }
        same = (
            counts == target_counts
            and {
                m: [(u.unit_index, u.char_start, u.char_end) for u in us]
                for m, us in units_a.items()
            }
            == {
                m: [(u.unit_index, u.char_start, u.char_end) for u in us]
                for m, us in units_b.items()
            }
            and vectors_a == vectors_b
        )
        if not same:
            raise CopyVerificationFailed(
                f"base {base.name!r} differs after the copy",
                expected=summary,
                items=target_counts,
                materials=len(units_b),
                vectors=vectors_b,
            )
        sample = sorted(
            (u for mid, us in units_a.items() if mid in visible for u in us),
            key=lambda u: u.unit_id,
        )[:SAMPLE_UNITS]
        stored = a.stored_vectors({text_hash(u.text) for u in sample}) if a.dims else {}
        failed = []
        for unit in sample:
            words = " ".join(unit.text.split()[:6])
            pairs = [(a.keyword_search(words, TOP), b.keyword_search(words, TOP))]
            vec = stored.get(text_hash(unit.text))
            if vec is not None:
                pairs.append((a.vector_search(vec, TOP), b.vector_search(vec, TOP)))
            if not all(_agree(x, y, visible) for x, y in pairs):
                failed.append(unit.unit_id)
    summary["searches"] = len(sample)
    if failed:
        raise CopyVerificationFailed(
            f"{len(failed)} sample search(es) of base {base.name!r} differ after the copy",
            units=failed,
        )
    return summary
