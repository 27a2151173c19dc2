"""What an outline costs: it is computed when asked, from the stored Markdown and units.

    PYTHONPATH=src .venv/bin/python bench/outline.py

Builds a home with one BM25 base holding three generated documents — a long Markdown handbook
(``--sections`` sections of ~600 tokens, each with two subsections and a table), a plain text
of the same size (token windows) and a short report — then times, after one warm-up, the
median of ``--runs`` calls of: ``build_outline`` alone (the pure function, text and units in
memory), ``kb.concepts.outline`` (the whole read: resolve, content, units, outline) and
``kb.concepts.read_section`` of the middle section. It also prints the size of the
``kb_outline`` and ``kb_read`` replies an MCP client gets for the report. The machine is
shared: quote figures from one run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

PARAGRAPH = "The pump station logs pressure, flow and temperature every minute of the day. "


def handbook(sections: int) -> str:
    parts = ["# Handbook\n\nHow the plant runs.\n"]
    for n in range(sections):
        parts.append(f"## Chapter {n}\n\n" + PARAGRAPH * 12)
        parts.append(f"### Checks {n}\n\n" + PARAGRAPH * 10)
        parts.append(f"### Limits {n}\n\n| Gauge | Min | Max |\n|---|---|---|\n| p{n} | 1 | 9 |")
    return "\n\n".join(parts) + "\n"


def timed(fn: Any, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sections", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    import anyio
    from mcp import Client

    from knowbase.interfaces.mcp import build_server
    from knowbase.operations.add.inputs import AddInput
    from knowbase.pipeline.outline import build_outline
    from knowbase.service import Knowledge
    from knowbase.settings import Settings

    tmp = Path(tempfile.mkdtemp(prefix="kb-outline-"))
    md = handbook(args.sections)
    (tmp / "handbook.md").write_text(md, encoding="utf-8")
    (tmp / "plain.txt").write_text(md.replace("#", "").replace("|", " "), encoding="utf-8")
    (tmp / "report.md").write_text(handbook(5), encoding="utf-8")
    with Knowledge(Settings(home=tmp / "home")) as kb:
        base = kb.create_base("bench", file_processor_id=None)
        files = [AddInput.file(tmp / n) for n in ("handbook.md", "plain.txt", "report.md")]
        kb.add(base.id, files, wait=True)
        for concept in ("handbook.md", "plain.txt"):
            text = kb.concepts.read_concept("bench", concept)["total_chars"]
            item = kb.concepts.resolve("bench", concept)
            store = kb.concepts.rt.store(base)
            content, units = store.content_text(item.id), store.list_units(item.id)
            out = kb.concepts.outline("bench", concept)
            middle = out["nodes"][len(out["nodes"]) // 2]["id"]
            pure = timed(lambda: build_outline(content, units), args.runs)  # noqa: B023
            whole = timed(lambda: kb.concepts.outline("bench", concept), args.runs)  # noqa: B023
            section = timed(
                lambda: kb.concepts.read_section("bench", concept, middle),  # noqa: B023
                args.runs,
            )
            print(
                f"{concept}: {text:,} chars, {len(units):,} units, {out['kind']}, "
                f"{out['total_nodes']:,} nodes | build_outline {pure:.0f} ms | outline "
                f"{whole:.0f} ms | read_section {section:.0f} ms"
            )

        async def replies() -> None:
            async with Client(build_server(kb, base_ids=None, allow_writes=False)) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                for name in ("kb_outline", "kb_read"):
                    t = tools[name]
                    size = len(str(t.input_schema)) + len(t.description or "")
                    print(f"tools/list: {name} schema + description {size:,} chars")
                call = {"baseId": "bench", "conceptId": "report.md"}
                outline = await c.call_tool("kb_outline", call)
                read = await c.call_tool("kb_read", {**call, "section": "1.3"})
                big = await c.call_tool("kb_outline", {**call, "conceptId": "handbook.md"})
                for label, r in (("report", outline), ("section 1.3", read), ("handbook", big)):
                    print(f"MCP reply {label}: {len(r.content[0].text.encode()):,} bytes")

        anyio.run(replies)


if __name__ == "__main__":
    main()
