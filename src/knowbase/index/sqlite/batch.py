"""Many materials in one SQLite index transaction (an index batch, issue 30).

One ``BEGIN IMMEDIATE`` … ``COMMIT`` for the whole batch instead of one per document, one GC and
one version bump at the end. Each material is written inside its own SAVEPOINT (apsw's
``with conn``), so one material's error — a slice that is not its text, a missing vector —
rolls back only that material and is returned as its outcome.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import apsw
import numpy as np

from knowbase.index.base import MaterialInput
from knowbase.index.plan import check_vectors, plan_units
from knowbase.index.sqlite import writes as sqlite_writes
from knowbase.index.sqlite.schema import write_tx


def rebuild_materials(
    conn: apsw.Connection,
    materials: Sequence[MaterialInput],
    embeddings: Mapping[str, np.ndarray | Sequence[float]],
    *,
    dims: int | None,
    model_id: str,
) -> list[Exception | None]:
    """:meth:`~.store.SqliteIndexStore.rebuild_material` of each material, in one transaction
    on the store's write connection ``conn`` (the store holds its error edge around the call);
    each one's error (None: written). An error of the transaction itself is raised."""
    outcomes: list[Exception | None] = []
    changed = False
    with write_tx(conn):
        for material in materials:
            try:
                content_hash, planned = plan_units(material, dims, bool(embeddings))
                units = [(u.unit_id, u.chunk, u.body, u.body_hash, u.text) for u in planned]
                blobs: dict[str, bytes] = {}
                if dims is not None:
                    needed = sorted({u[3] for u in units})
                    checked = check_vectors(embeddings, needed, dims)
                    blobs = {h: v.tobytes() for h, v in checked.items()}
                with conn:  # a SAVEPOINT: this material's rows, or none of them
                    changed |= sqlite_writes.write_material(
                        conn,
                        material,
                        content_hash,
                        units,
                        blobs,
                        model_id=model_id,
                        vectors=dims is not None,
                    )
                outcomes.append(None)
            except apsw.FullError:
                # A full disk is the batch's fault, not this material's; SQLite may also have
                # rolled the whole transaction back, and the next material would then be
                # written outside it (issue 37: "cannot commit - no transaction is active").
                raise
            except Exception as exc:  # noqa: BLE001 - this material's own outcome
                if not conn.in_transaction:
                    # Rolled back under us (a full disk, an I/O error): nothing of the batch is
                    # written. The savepoint's own complaint ("no such savepoint") hides the
                    # cause; the batch fails with the cause.
                    raise _first_sqlite_error(exc) from None
                outcomes.append(exc)
        if changed:
            sqlite_writes.gc(conn, model_id)
        if any(o is None for o in outcomes):
            sqlite_writes.bump(conn)
    return outcomes


def _first_sqlite_error(exc: BaseException) -> BaseException:
    """The earliest SQLite error in ``exc``'s chain of "during handling of" contexts."""
    first = exc
    seen = {id(exc)}
    cause = exc.__context__
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, apsw.Error):
            first = cause
        cause = cause.__context__
    return first


__all__ = ["rebuild_materials"]
