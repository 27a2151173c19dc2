"""What an add does with a source the base already holds: the conflict strategies, and the one
default every surface uses (issue 38 item 5).

``update`` is the default everywhere (the facade, the CLI, HTTP's JSON body and upload form, the
console, MCP): re-adding the same file, folder or page refreshes the item that holds it (a sync:
only changed files are reindexed) instead of copying it a second time, whose passages would then
rank twice. The origin (§6) defaulted to ``rename``; DESIGN turn 3 and issue 42 made a re-add an
update, and a default that differed by surface made the same request mean two things.
``rename`` adds a copy (``DIR_1``), ``detect`` adds nothing and lists the clashes, ``replace``
deletes the old item first (``operations/add/workflow.py`` applies them).

A leaf of its own so that ``kb --help`` and a cold ``kb search`` can name the default without
loading the ingestion room.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

ConflictStrategy = Literal["update", "rename", "detect", "replace"]
#: Every strategy, in the order the help lists them.
STRATEGIES: Final[tuple[ConflictStrategy, ...]] = get_args(ConflictStrategy)
#: What an add does when the caller names no strategy, on every surface.
DEFAULT_STRATEGY: Final[ConflictStrategy] = "update"
