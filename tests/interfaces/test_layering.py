"""Surfaces translate, never decide (DESIGN "The facade is wiring"; issue 12 item 12): nothing in
``interfaces/`` reaches past the facade into the runtime, the catalog's repositories, the job
queue or the stores. Data classes (``catalog.models``) pass through; ``kb migrate`` is the one
admin command that opens the catalog itself (it runs before any ``Knowledge`` can)."""

from __future__ import annotations

import ast
from pathlib import Path

import knowbase.interfaces

INTERFACES = Path(knowbase.interfaces.__file__).parent
FORBIDDEN = ("knowbase.catalog", "knowbase.jobs", "knowbase.runtime", "knowbase.index")
ALLOWED = {
    "knowbase.catalog.models",  # plain dataclasses the facade returns
    "knowbase.jobs.model",  # the Job dataclass, likewise
    "knowbase.catalog.base_settings",  # the settings' declaration the surfaces derive from
    # kb migrate / migrate --check: upgrading the schema precedes any Knowledge
    ("cli/portable.py", "knowbase.catalog.db"),
    ("cli/portable.py", "knowbase.catalog.migrate"),
}
# readiness probes each component itself (``kb status``): the catalog, the index store
NOT_SURFACES = {"readiness.py"}


def _violations(path: Path, name: str | None = None) -> list[str]:
    name = name or path.name
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "rt":
            found.append(f"{name}:{node.lineno} uses .rt")
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for module in names:
            if (
                module.startswith(FORBIDDEN)
                and module not in ALLOWED
                and (name, module) not in ALLOWED
            ):
                found.append(f"{name}:{node.lineno} imports {module}")
    return found


def test_surfaces_reach_only_the_facade() -> None:
    files = {f.relative_to(INTERFACES).as_posix(): f for f in sorted(INTERFACES.rglob("*.py"))}
    assert len(files) > 10
    assert [v for n, f in files.items() if n not in NOT_SURFACES for v in _violations(f, n)] == []


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from knowbase.catalog import items\n\ndef f(kb):\n    return kb.rt.catalog\n")
    assert _violations(bad) == ["bad.py:1 imports knowbase.catalog", "bad.py:4 uses .rt"]
