"""``kb eval … --model shadow``: score the shadow vectors of a model switch in progress, so a
user can check the new model before it serves (issue 15 item 6).

The context is the base's, with the vector lane swapped for the shadow set: a second store
handle on the same index whose lane serves the new model (``for_model``) and the new model's
embedder for the queries. The keyword lane is the base's own. A switch that re-chunks has
vectors for chunks the index does not hold yet, so its shadow cannot be scored in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from knowbase.errors import InvalidInput
from knowbase.eval.context import EvalContext, QueryMemo, serving_context


def shadow_context(
    rt: Any,
    visible: Callable[[set[str]], Mapping[str, Any]],
    b: Any,
    qrels: Mapping[str, Mapping[str, int]],
) -> EvalContext:
    """The eval context of base ``b``'s switch in progress; InvalidInput when there is none."""
    from knowbase.operations.model_switch.workflow import current_switch
    from knowbase.providers.registry import get_embedding_provider

    job = current_switch(rt, b.id)
    if job is None or job.is_terminal:
        raise InvalidInput(
            f"base {b.name!r} has no model switch in progress to score",
            base_id=b.id,
            hint="start one with kb base set-embedding BASE MODEL --no-wait",
        )
    plan = job.payload
    if plan.get("rechunk"):
        raise InvalidInput(
            "this switch re-chunks the base; its shadow vectors cover chunks the index does not"
            " hold until the swap, so they cannot be scored in place",
            base_id=b.id,
            to_model=plan["to_model"],
        )
    base_ctx = serving_context(rt, visible, b, qrels)
    shadow = base_ctx.store.for_model(plan["to_model"], plan["dims"])
    total = base_ctx.store.models.body_count()
    covered = total - len(base_ctx.store.models.bodies_without_vectors(plan["to_model"]))
    return EvalContext(
        store=shadow,
        dims=plan["dims"],
        embedder=QueryMemo(get_embedding_provider(plan["to_model"], rt.settings)),
        reranker=base_ctx.reranker,
        fusion=base_ctx.fusion,
        visible=visible,
        judged=base_ctx.judged,
        model={"model": plan["to_model"], "shadow": True, "covered": covered, "bodies": total},
        close=shadow.close,
    )
