"""The house's layering, checked over every module (AST; imports inside functions count; those
under ``if TYPE_CHECKING:`` count for cycles, not for the room table).

``MAY_IMPORT`` is the architecture as a table: a room (a subpackage or a top-level module of
``knowbase``) may import only the rooms it lists, and every room it lists is imported by one of
its modules (an allowance nothing uses is deleted). ``KNOWN_DEBT`` names, module by module, the
imports that break the table (empty since the one-house restructure, issue 24). The test
fails on any import outside table and debt, on a debt entry that no longer exists (delete it),
and on a cycle between rooms once the debt is set aside.

One level down (issue 38), no cycle either: between the rooms inside a room (``operations/add``
and ``operations/sync``, ``jobs/attempts`` and ``jobs/registry``), nor between any two modules
at any depth. A module imports another when it names it (``import a.b``, ``from a import b``
where ``a.b`` is a module) or a name defined in it (``from a.b import f``); the packages above
it, which Python runs first, are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import knowbase

PACKAGE = Path(knowbase.__file__).parent

# bottom to top: a room imports only rooms listed before it (its row says which, and no more)
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "ids": set(),
    "clock": set(),
    "diskspace": {"errors"},
    "sqlite_files": set(),
    "sqlite_faults": {"errors"},
    "settings": set(),
    "locks": {"errors"},
    "providers": {"errors", "settings"},
    "catalog": {"errors", "ids", "diskspace", "sqlite_files", "sqlite_faults"},
    "jobs": {"errors", "ids", "diskspace", "catalog"},
    "files": {"errors", "jobs"},
    "pipeline": {"errors", "settings", "providers"},
    "index": {"errors", "sqlite_files", "sqlite_faults", "catalog", "pipeline"},
    "runtime": {
        "errors", "diskspace", "settings", "locks", "providers", "catalog", "jobs", "files",
        "index",
    },
    "search": {"errors", "providers", "catalog", "pipeline", "index", "runtime"},
    "operations": {
        "errors", "diskspace", "providers", "catalog", "jobs", "files", "pipeline", "index",
        "runtime",
    },
    "eval": {"errors", "providers", "catalog", "search", "operations"},
    "portable": {
        "errors", "ids", "providers", "catalog", "files", "pipeline", "index", "runtime",
        "operations",
    },
    "service": {
        "errors", "settings", "catalog", "jobs", "files", "index", "runtime", "search",
        "operations", "eval", "portable",
    },
    # not yet pruned to what it uses (ALLOWANCES_NOT_CHECKED)
    "interfaces": {"errors", "ids", "clock", "diskspace", "sqlite_files", "sqlite_faults"}
    | {"settings", "service", "providers", "files", "pipeline", "catalog", "jobs", "search",
       "eval", "operations"},
    "integrations": {"errors"},
}

# (importing module, imported room): breaks of the table to be removed; none since issue 24.
KNOWN_DEBT: set[tuple[str, str]] = set()

# (room, room) arrows one level down set aside: the app (``interfaces/http/__init__.py``,
# ``create_app``) mounts the console, whose routes use the HTTP room's shared pieces
# (``http/common.py``, the add response and models). To remove: the app assembled above both.
KNOWN_INNER_DEBT: set[tuple[str, str]] = {
    ("knowbase.interfaces.http", "knowbase.interfaces.console"),
}

# Rows whose unused allowances are not reported yet: issue 38 item 2 rewrites what a surface
# may import (the facade, errors, settings and the face only).
ALLOWANCES_NOT_CHECKED = frozenset({"interfaces"})


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "knowbase" and len(parts) > 1 else None


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class _Imports(ast.NodeVisitor):
    """``found``: every dotted name an import mentions (its module, and module.name for each
    name); ``statements``: (module, names) per import, ``names`` empty for ``import a.b``."""

    def __init__(self, module: str, is_package: bool, typing: bool) -> None:
        self.module, self.is_package, self.found = module, is_package, set[str]()
        self.statements: list[tuple[str, tuple[str, ...]]] = []
        self.typing = typing

    def visit_If(self, node: ast.If) -> None:
        name = getattr(node.test, "id", None) or getattr(node.test, "attr", None)
        if name == "TYPE_CHECKING" and not self.typing:
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.update(a.name for a in node.names)
        self.statements += [(a.name, ()) for a in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.module.split(".")
            if not self.is_package:
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        self.found.add(target)
        self.found.update(f"{target}.{a.name}" for a in node.names)
        self.statements.append((target, tuple(a.name for a in node.names)))


def _visit(path: Path, module: str, *, typing: bool = False) -> _Imports:
    """The imports of one module; ``typing``: those under ``if TYPE_CHECKING:`` too."""
    visitor = _Imports(module, path.name == "__init__.py", typing)
    visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
    return visitor


def _modules(package: Path) -> dict[str, Path]:
    return {
        module_name(path, package): path
        for path in sorted(package.rglob("*.py"))
        if "migrations" not in path.parts
    }


def room_edges(package: Path) -> dict[tuple[str, str], set[str]]:
    """(from room, to room) -> the modules that import across that edge."""
    rooms = {p.stem for p in package.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    edges: dict[tuple[str, str], set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        module = module_name(path, package)
        source = room_of(module)
        if source is None:
            continue
        for target in _visit(path, module).found:
            room = room_of(target)
            if room in rooms and room != source:
                edges.setdefault((source, room), set()).add(module)
    return edges


def violations(package: Path, table: dict[str, set[str]], debt: set[tuple[str, str]]) -> list[str]:
    found = []
    for (source, target), modules in sorted(room_edges(package).items()):
        if source not in table:
            found.append(f"room {source} is not in the layering table")
            continue
        if target in table[source]:
            continue
        found += [f"{m} imports {target}" for m in sorted(modules) if (m, target) not in debt]
    return found


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles of a directed graph, each as a path that ends where it starts (at least one per
    knot of nodes that reach each other)."""
    found, done = [], set[str]()

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in done:
                walk(nxt, path + [nxt])
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            walk(node, [node])
    return found


def cycles(package: Path, debt: set[tuple[str, str]]) -> list[list[str]]:
    """Cycles between top-level rooms, the imports in ``debt`` set aside."""
    graph: dict[str, set[str]] = {}
    for (source, target), modules in room_edges(package).items():
        if any((m, target) not in debt for m in modules):
            graph.setdefault(source, set()).add(target)
    return find_cycles(graph)


def module_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (see the module docstring for what counts)."""
    modules = _modules(package)

    def existing(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for target, names in _visit(path, module, typing=True).statements:
            for name in names or ("",):
                full = f"{target}.{name}" if name else target
                targets.add(full if full in modules else existing(target))
        graph[module] = targets - {"", module}
    return graph


def inner_room(module: str) -> str:
    """The room one level down a module lies in: ``knowbase.operations.add`` for every module
    of ``operations/add/``, the module itself for one that sits in a top-level room."""
    return ".".join(module.split(".")[:3])


def inner_room_graph(package: Path) -> dict[str, set[str]]:
    """Room -> the rooms of the same top-level room it imports, one level down."""
    graph: dict[str, set[str]] = {}
    for module, targets in module_graph(package).items():
        for target in targets:
            source_room, target_room = inner_room(module), inner_room(target)
            same_parent = module.split(".")[:2] == target.split(".")[:2]
            if same_parent and source_room != target_room:
                graph.setdefault(source_room, set()).add(target_room)
    return graph


def unused_allowances(package: Path, table: dict[str, set[str]]) -> list[str]:
    """``room -> allowed room`` entries of the table that no import of the room uses."""
    used = set(room_edges(package))
    return [
        f"{source} -> {target}"
        for source, allowed in sorted(table.items())
        if source not in ALLOWANCES_NOT_CHECKED
        for target in sorted(allowed)
        if (source, target) not in used
    ]


def test_every_import_follows_the_table() -> None:
    assert violations(PACKAGE, MAY_IMPORT, KNOWN_DEBT) == []


def test_no_debt_entry_is_stale() -> None:
    edges = room_edges(PACKAGE)
    stale = sorted(
        (m, room) for m, room in KNOWN_DEBT if m not in edges.get((room_of(m) or "", room), set())
    )
    assert stale == [], "these imports are gone: delete their KNOWN_DEBT entries"


def test_no_cycle_between_rooms_but_the_known_debt() -> None:
    assert cycles(PACKAGE, KNOWN_DEBT) == []


def test_no_cycle_between_rooms() -> None:
    assert cycles(PACKAGE, set()) == []


def test_every_allowance_is_used() -> None:
    assert unused_allowances(PACKAGE, MAY_IMPORT) == [], "delete these allowances from MAY_IMPORT"


def test_no_cycle_between_rooms_one_level_down_but_the_known_debt() -> None:
    graph = inner_room_graph(PACKAGE)
    stale = sorted((a, b) for a, b in KNOWN_INNER_DEBT if b not in graph.get(a, set()))
    assert stale == [], "these arrows are gone: delete their KNOWN_INNER_DEBT entries"
    for source, target in KNOWN_INNER_DEBT:
        graph[source].discard(target)
    assert find_cycles(graph) == []


def test_no_cycle_between_modules() -> None:
    assert find_cycles(module_graph(PACKAGE)) == []


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "knowbase"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_the_check_fails_on_a_planted_upward_import(tmp_path: Path) -> None:
    package = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "errors.py": "",
            "catalog/__init__.py": "",
            "catalog/items.py": "def f():\n    from knowbase.service import Knowledge\n",
            "service.py": "from knowbase.catalog import items\n",
        },
    )
    table = {"errors": set(), "catalog": {"errors"}, "service": {"catalog", "errors"}}
    assert violations(package, table, set()) == ["knowbase.catalog.items imports service"]
    assert violations(package, table, {("knowbase.catalog.items", "service")}) == []


def test_the_check_fails_on_a_planted_cycle(tmp_path: Path) -> None:
    package = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "jobs/__init__.py": "from .. import tasks\n",
            "tasks/__init__.py": "from knowbase.jobs import x\n",
        },
    )
    assert cycles(package, set()) == [["jobs", "tasks", "jobs"]]
    assert cycles(package, {("knowbase.tasks", "jobs")}) == []


def test_the_check_finds_a_cycle_between_modules_inside_a_room(tmp_path: Path) -> None:
    package = _plant(tmp_path, {
        "__init__.py": "",
        "jobs/__init__.py": "",
        "jobs/attempts.py": "from knowbase.jobs.registry import Registry\n",
        "jobs/registry.py": "from knowbase.jobs import context\n",
        "jobs/context.py": "def f():\n    from knowbase.jobs.attempts import g\n",
    })
    assert find_cycles(module_graph(package)) == [
        ["knowbase.jobs.attempts", "knowbase.jobs.registry", "knowbase.jobs.context",
         "knowbase.jobs.attempts"]
    ]
    assert find_cycles(inner_room_graph(package)) != []


def test_the_check_finds_a_cycle_between_rooms_one_level_down(tmp_path: Path) -> None:
    package = _plant(tmp_path, {
        "__init__.py": "",
        "operations/__init__.py": "",
        "operations/add/__init__.py": "",
        "operations/add/readd.py": "def f():\n    from knowbase.operations.sync import workflow\n",
        "operations/add/prepare.py": "",
        "operations/sync/__init__.py": "",
        "operations/sync/workflow.py": "",
        "operations/sync/handler.py": "from knowbase.operations.add.prepare import add_pages\n",
    })
    assert find_cycles(module_graph(package)) == []  # no two modules import each other
    assert find_cycles(inner_room_graph(package)) == [
        ["knowbase.operations.add", "knowbase.operations.sync", "knowbase.operations.add"]
    ]


def test_a_package_imported_only_as_a_submodule_parent_is_no_edge(tmp_path: Path) -> None:
    package = _plant(tmp_path, {
        "__init__.py": "",
        "mcp/__init__.py": "from knowbase.mcp import tools\n",
        "mcp/budget.py": "",
        "mcp/tools.py": "from knowbase.mcp import budget\n",
    })
    assert module_graph(package)["knowbase.mcp.tools"] == {"knowbase.mcp.budget"}
    assert find_cycles(module_graph(package)) == []


def test_the_check_fails_on_an_allowance_no_import_uses(tmp_path: Path) -> None:
    package = _plant(tmp_path, {
        "__init__.py": "",
        "errors.py": "",
        "ids.py": "",
        "catalog/__init__.py": "from knowbase.errors import KnowbaseError\n",
    })
    table = {"errors": set(), "ids": set(), "catalog": {"errors", "ids"}}
    assert unused_allowances(package, table) == ["catalog -> ids"]


def test_a_cycle_through_a_type_only_import_is_a_cycle(tmp_path: Path) -> None:
    # a protocol breaks such a circle (jobs/context.py, catalog/feed.py, index/qdrant/access.py)
    package = _plant(tmp_path, {
        "__init__.py": "",
        "jobs/__init__.py": "",
        "jobs/context.py": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from knowbase.jobs.manager import JobManager\n",
        "jobs/manager.py": "from knowbase.jobs.context import JobContext\n",
    })
    assert find_cycles(module_graph(package)) != []
