"""Job handlers (§5). ``register_all`` wires each kind to its handler and on_settled."""

from __future__ import annotations

from functools import partial

from knowbase.operations import kinds
from knowbase.runtime import Runtime


def register_all(rt: Runtime) -> None:
    from knowbase.operations.add.prepare_root import prepare_root
    from knowbase.operations.common import make_item_on_settled
    from knowbase.operations.delete.handler import delete_subtree
    from knowbase.operations.indexing.index_batch import BATCH_MAX, index_batch
    from knowbase.operations.indexing.process_file import process_file
    from knowbase.operations.model_switch.handler import make_switch_on_settled, switch_model
    from knowbase.operations.reindex.handler import make_reindex_on_settled, reindex_subtree
    from knowbase.operations.sync.handler import sync_apply

    item_settled = make_item_on_settled(rt)
    rt.jobs.register(kinds.PREPARE_ROOT, partial(prepare_root, rt), on_settled=item_settled)
    rt.jobs.register(  # one claim carries a batch of documents (index_batch.py): no other path
        kinds.INDEX_DOCUMENTS,
        None,
        on_settled=item_settled,
        batch_handler=partial(index_batch, rt),
        batch_max=BATCH_MAX,
    )
    rt.jobs.register(kinds.PROCESS_FILE, partial(process_file, rt), on_settled=item_settled)
    rt.jobs.register(kinds.DELETE_SUBTREE, partial(delete_subtree, rt))
    rt.jobs.register(
        kinds.REINDEX_SUBTREE, partial(reindex_subtree, rt), on_settled=make_reindex_on_settled(rt)
    )
    rt.jobs.register(kinds.SYNC_BASE, partial(sync_apply, rt))
    rt.jobs.register(
        kinds.SWITCH_MODEL, partial(switch_model, rt), on_settled=make_switch_on_settled(rt)
    )
