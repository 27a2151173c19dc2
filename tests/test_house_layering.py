"""The house's layering, checked over every module (AST; imports inside functions count, those
under ``if TYPE_CHECKING:`` do not).

``MAY_IMPORT`` is the architecture as a table: a room (a subpackage or a top-level module of
``knowbase``) may import only the rooms it lists. ``KNOWN_DEBT`` names, module by module, the
imports that break the table (empty since the one-house restructure, issue 24). The test
fails on any import outside table and debt, on a debt entry that no longer exists (delete it),
and on a cycle between rooms once the debt is set aside.
"""

from __future__ import annotations

import ast
from pathlib import Path

import knowbase

PACKAGE = Path(knowbase.__file__).parent

_BASE = {"errors", "ids", "clock", "diskspace", "sqlite_files", "sqlite_faults"}
# bottom to top: a room imports only rooms listed before it (its row says which)
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "ids": set(),
    "clock": set(),
    "diskspace": {"errors"},
    "sqlite_files": {"errors"},
    "sqlite_faults": {"errors"},
    "settings": _BASE,
    "locks": _BASE | {"settings"},
    "providers": _BASE | {"settings"},
    "catalog": _BASE | {"settings"},
    "jobs": _BASE | {"settings", "catalog", "locks"},
    "files": _BASE | {"settings", "jobs"},
    "pipeline": _BASE | {"settings", "providers"},
    "index": _BASE | {"settings", "catalog", "pipeline"},
    "runtime": _BASE
    | {"settings", "catalog", "jobs", "locks", "pipeline", "providers", "files", "index"},
    "search": _BASE | {"settings", "catalog", "pipeline", "providers", "index", "runtime"},
    "operations": _BASE
    | {
        "settings",
        "catalog",
        "jobs",
        "locks",
        "pipeline",
        "providers",
        "runtime",
        "files",
        "index",
    },
    "eval": _BASE | {"settings", "catalog", "providers", "search", "operations"},
    "portable": _BASE
    | {
        "settings",
        "catalog",
        "jobs",
        "locks",
        "pipeline",
        "providers",
        "runtime",
        "files",
        "index",
        "operations",
    },
    "service": _BASE
    | {
        "settings",
        "catalog",
        "jobs",
        "locks",
        "pipeline",
        "providers",
        "runtime",
        "files",
        "index",
        "search",
        "eval",
        "operations",
        "portable",
    },
    "interfaces": _BASE
    | {
        "settings",
        "service",
        "providers",
        "files",
        "pipeline",
        "catalog",
        "jobs",
        "search",
        "eval",
        "operations",
    },
    "integrations": _BASE | {"settings", "service"},
}

# (importing module, imported room): breaks of the table to be removed; none since issue 24.
KNOWN_DEBT: set[tuple[str, str]] = set()


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "knowbase" and len(parts) > 1 else None


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module, self.is_package, self.found = module, is_package, set[str]()

    def visit_If(self, node: ast.If) -> None:
        name = getattr(node.test, "id", None) or getattr(node.test, "attr", None)
        if name == "TYPE_CHECKING":
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.update(a.name for a in node.names)

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
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        for target in visitor.found:
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


def cycles(package: Path, debt: set[tuple[str, str]]) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for (source, target), modules in room_edges(package).items():
        if any((m, target) not in debt for m in modules):
            graph.setdefault(source, set()).add(target)
    found, done = [], set[str]()

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in done:
                walk(nxt, path + [nxt])
        done.add(node)

    for room in sorted(graph):
        if room not in done:
            walk(room, [room])
    return found


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
