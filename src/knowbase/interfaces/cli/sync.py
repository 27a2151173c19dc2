"""``kb sync BASE``: bring a base up to date with its origins (issue 15)."""

from typing import Annotated

import typer

from knowbase.interfaces.cli.options import HomeOpt, JsonOpt

# Defined here, not imported from cli.py: run as ``python -m``, cli.py is ``__main__`` and a
# module-level import of it would re-import it half-built (typer reads these at run time).


def register(app: typer.Typer) -> None:
    @app.command("sync")
    def sync(
        base: str,
        prune: Annotated[
            bool | None,
            typer.Option(
                "--prune/--no-prune",
                help="Delete items whose files vanished (default: the base's sync_deletes).",
            ),
        ] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Report only.")] = False,
        watch: Annotated[bool, typer.Option("--watch", help="Keep syncing on changes.")] = False,
        home: HomeOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Add new files, reindex changed ones in place, report (or prune) vanished ones."""
        from knowbase.interfaces.cli.options import console, emit, err_console, follow, open_kb

        with open_kb(home) as kb:
            b = kb.get_base(base)
            if watch:
                from knowbase.interfaces.watch import watch_base

                def show(report) -> None:  # type: ignore[no-untyped-def]
                    emit(report, as_json, lambda: _render(console, report))

                watch_base(kb, b.id, prune=prune, on_report=show)
                return
            if not dry_run:
                # A killed sync or import left items active: finish that work first (or
                # refuse, non-zero, when another live process is doing it).
                unfinished = kb.unfinished_before_sync(b.id)
                if unfinished:
                    err_console.print(
                        f"finishing {len(unfinished)} unfinished job(s) of an interrupted "
                        "sync or import first"
                    )
                    kb.wait(unfinished)
            report = kb.sync(b.id, prune=prune, dry_run=dry_run)
            job = None
            if report.job_id:
                follow(kb, b.id, [report.job_id], quiet=as_json)
                job = kb.activity.get_job(report.job_id)
                report.urls = dict(job.progress_details.get("pages") or {})
        emit(report, as_json, lambda: _render(console, report))
        if job is not None and job.status in ("cancelled", "failed"):
            # The plan above was not applied (found by the soak: a worker killed under the
            # sync's job ended it cancelled, and kb sync still exited 0).
            from knowbase.errors import IndexingInterrupted

            raise IndexingInterrupted(
                f"the sync's job ended {job.status} ({job.error_code}: {job.error_message}); "
                "nothing or only part of the plan was applied",
                hint=f"run kb sync {base!r} again",
                job_id=job.id,
            )
        busy = [f["path"] for f in report.failed if f.get("reason") == "busy"]
        if busy and not dry_run:
            from knowbase.errors import BaseBusy

            raise BaseBusy(
                f"{len(busy)} folder(s) or file(s) were busy and not synced: {busy[0]}",
                base_id=b.id,
                busy=busy,
            )


def _render(console, report) -> None:  # type: ignore[no-untyped-def]
    verb = "would" if report.dry_run else "did"
    console.print(
        f"sync ({verb}): {len(report.added)} added, {len(report.changed)} changed, "
        f"{len(report.unchanged)} unchanged, {len(report.vanished)} vanished, "
        f"{len(report.failed)} failed, {len(report.refresh)} pages due"
        + (f", {len(report.excluded)} excluded (deleted from the base)" if report.excluded else "")
    )
    for a in report.added:
        console.print(f"  + {a['path']}")
    for c in report.changed:
        console.print(f"  ~ {c['path']} ({c['reason']})")
    for v in report.vanished:
        console.print(f"  - {v['path']}" + (" (deleted)" if v["deleted"] else " (kept; --prune)"))
    for f in report.failed:
        console.print(f"  ! {f['path']}: {f['reason']}")
