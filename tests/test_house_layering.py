"""The house's layering, checked over every module (AST; imports inside functions count; those
under ``if TYPE_CHECKING:`` count for cycles and for a surface's row, not for the other rows).

``MAY_IMPORT`` is the architecture as a table: a room (a subpackage or a top-level module of
``knowbase``) may import only the rooms it lists, and every room it lists is imported by one of
its modules (an allowance nothing uses is deleted). The face, ``knowbase/__init__.py``, is a
room of its own (:data:`FACE`): a module imports it when it takes a name from it (``from
knowbase import Base``); ``import knowbase`` alone binds the package Python has already run and
is not counted. ``KNOWN_DEBT`` names, module by module, the imports that break the table (empty
since the one-house restructure, issue 24). The test fails on any import outside table and
debt, on a debt entry that no longer exists (delete it), and on a cycle between rooms once the
debt is set aside.

Surfaces talk to the facade only (issue 38): ``interfaces`` may import the face, ``service``,
``errors`` and ``settings``, and nothing else, type-only imports included (what a surface names
in a hint, the face exports).

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
#: The face (``knowbase/__init__.py``) as a room of the table: what the package exports.
FACE = "knowbase"

# bottom to top: a room imports only rooms listed before it (its row says which, and no more)
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "ids": set(),
    "clock": set(),
    "processes": set(),
    "diskspace": {"errors"},
    "sqlite_files": set(),
    "sqlite_faults": {"errors"},
    "settings": set(),
    "conflict_strategy": set(),
    "locks": {"errors"},
    "providers": {"errors", "settings"},
    "units": set(),
    "pipeline": {"errors", "settings", "providers", "units"},
    "index": {"errors", "sqlite_files", "sqlite_faults", "units"},
    # the catalog checks a new base's index backend against the index's registry of names
    "catalog": {"errors", "ids", "diskspace", "sqlite_files", "sqlite_faults", "index"},
    "jobs": {"errors", "ids", "diskspace", "processes", "catalog"},
    "files": {"errors", "processes"},
    "runtime": {
        "errors", "diskspace", "settings", "locks", "providers", "catalog", "jobs", "files",
        "index",
    },
    "search": {"errors", "providers", "catalog", "pipeline", "index", "runtime"},
    "operations": {
        "errors", "ids", "diskspace", "conflict_strategy", "providers", "units", "catalog",
        "jobs", "files", "pipeline", "index", "runtime",
    },
    "eval": {"errors", "providers", "catalog", "search", "operations"},
    "portable": {
        "errors", "ids", "providers", "units", "catalog", "files", "pipeline", "index",
        "runtime", "operations",
    },
    "service": {
        "errors", "settings", "conflict_strategy", "providers", "catalog", "jobs", "files",
        "pipeline", "index", "runtime", "search", "operations", "eval", "portable",
    },
    # the face: the errors at once; the rest it exports by name, each loaded on first use from
    # the module that defines it (PEP 562: a string, not an import this test sees)
    FACE: {"errors"},
    "interfaces": {"errors", "settings", "service", FACE},
    "integrations": {"errors", FACE},
}

# (importing module, imported room): breaks of the table to be removed; none since issue 24.
KNOWN_DEBT: set[tuple[str, str]] = set()

# (room, room) arrows one level down set aside: the app (``interfaces/http/__init__.py``,
# ``create_app``) mounts the console, whose routes use the HTTP room's shared pieces
# (``http/common.py``, the add response and models). To remove: the app assembled above both.
KNOWN_INNER_DEBT: set[tuple[str, str]] = {
    ("knowbase.interfaces.http", "knowbase.interfaces.console"),
}

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
    name); ``statements``: (module, names) per import, ``names`` empty for ``import a.b``.
    ``type_checking``: count the imports under ``if TYPE_CHECKING:`` too."""

    def __init__(self, module: str, is_package: bool, type_checking: bool = False) -> None:
        self.module, self.is_package, self.found = module, is_package, set[str]()
        self.statements: list[tuple[str, tuple[str, ...]]] = []
        self.type_checking = type_checking

    def visit_If(self, node: ast.If) -> None:
        name = getattr(node.test, "id", None) or getattr(node.test, "attr", None)
        if name == "TYPE_CHECKING" and not self.type_checking:
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


def _visit(path: Path, module: str, type_checking: bool = False) -> _Imports:
    visitor = _Imports(module, path.name == "__init__.py", type_checking)
    visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
    return visitor


def _modules(package: Path) -> dict[str, Path]:
    return {
        module_name(path, package): path
        for path in sorted(package.rglob("*.py"))
        if "migrations" not in path.parts
    }


def room_edges(
    package: Path, *, type_checking: bool = False
) -> dict[tuple[str, str], set[str]]:
    """(from room, to room) -> the modules that import across that edge. A name taken from the
    package itself (``knowbase.Base``, not a room) is an import of the face, :data:`FACE`;
    with ``type_checking`` the imports under ``if TYPE_CHECKING:`` count too."""
    rooms = {p.stem for p in package.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    edges: dict[tuple[str, str], set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        module = module_name(path, package)
        source = FACE if module == "knowbase" else room_of(module)
        if source is None:
            continue
        for target in _visit(path, module, type_checking).found:
            room = room_of(target)
            if room is not None and room not in rooms and target.count(".") == 1:
                room = FACE  # from knowbase import Base
            elif room not in rooms:
                continue
            if room != source:
                edges.setdefault((source, room), set()).add(module)
    return edges


def violations(
    package: Path,
    table: dict[str, set[str]],
    debt: set[tuple[str, str]],
    *,
    type_checking: bool = False,
) -> list[str]:
    found = []
    edges = room_edges(package, type_checking=type_checking)
    for (source, target), modules in sorted(edges.items()):
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
        for target, names in _visit(path, module, type_checking=True).statements:
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


def test_surfaces_import_only_the_face_the_facade_errors_and_settings() -> None:
    assert MAY_IMPORT["interfaces"] == {FACE, "service", "errors", "settings"}
    found = violations(PACKAGE, MAY_IMPORT, KNOWN_DEBT, type_checking=True)
    assert [v for v in found if v.startswith("knowbase.interfaces.")] == [], (
        "a surface names only what the face exports, type hints included: export it there"
    )


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


def test_the_check_fails_on_a_surface_that_reaches_past_the_face(tmp_path: Path) -> None:
    package = _plant(
        tmp_path,
        {
            "__init__.py": "from knowbase.errors import NotFound\n",
            "errors.py": "",
            "catalog/__init__.py": "",
            "catalog/models.py": "from knowbase.errors import NotFound\n",
            "service/__init__.py": "from knowbase.catalog.models import Base\n",
            "interfaces/__init__.py": "",
            "interfaces/mcp/__init__.py": "",
            "interfaces/mcp/tools.py": (
                "from typing import TYPE_CHECKING\n"
                "from knowbase import Base, passage\n"
                "from knowbase.errors import NotFound\n"
                "from knowbase.service import Knowledge\n"
                "if TYPE_CHECKING:\n"
                "    from knowbase.catalog.models import Item\n"
                "def f():\n"
                "    from knowbase.catalog.models import Base\n"
            ),
            "interfaces/mcp/listing.py": "import knowbase\nfrom ... import Item\n",
        },
    )
    table = {
        "errors": set(),
        "catalog": {"errors"},
        "service": {"errors", "catalog"},
        FACE: {"errors"},
        "interfaces": {"errors", "service", FACE},
    }
    assert violations(package, table, set()) == ["knowbase.interfaces.mcp.tools imports catalog"]
    assert violations(package, table, set(), type_checking=True) == [
        "knowbase.interfaces.mcp.tools imports catalog"
    ]
    assert unused_allowances(package, table) == ["service -> errors"]  # the face's rows are used
    (package / "interfaces/mcp/tools.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from knowbase.catalog.models import Item\nfrom knowbase import Base\n"
    )
    assert violations(package, table, set()) == []
    assert violations(package, table, set(), type_checking=True) == [
        "knowbase.interfaces.mcp.tools imports catalog"
    ]
    # a name taken from the face is an import of the face: a room not allowed it is told so
    (package / "catalog/models.py").write_text("from knowbase import Base\n")
    assert violations(package, table, set()) == ["knowbase.catalog.models imports knowbase"]


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
