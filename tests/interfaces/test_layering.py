"""Surfaces translate, never decide (DESIGN "The facade is wiring"; issue 12 item 12): nothing in
``interfaces/`` reaches past the facade into the runtime, the catalog, the job queue or the
stores. The data classes the facade returns come from the face (``from knowbase import Base``);
``kb migrate`` upgrades the catalog through ``service/migration.py``, readiness probes each
component in ``service/readiness.py`` (issue 38). ``tests/test_house_layering.py`` holds the
whole rule (what a surface may import); this test adds ``kb.rt``, the runtime behind the
facade."""

from __future__ import annotations

import ast
from pathlib import Path

import knowbase.interfaces

INTERFACES = Path(knowbase.interfaces.__file__).parent
FORBIDDEN = ("knowbase.catalog", "knowbase.jobs", "knowbase.runtime", "knowbase.index")


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
            if module.startswith(FORBIDDEN):
                found.append(f"{name}:{node.lineno} imports {module}")
    return found


def test_surfaces_reach_only_the_facade() -> None:
    files = {f.relative_to(INTERFACES).as_posix(): f for f in sorted(INTERFACES.rglob("*.py"))}
    assert len(files) > 10
    assert [v for n, f in files.items() for v in _violations(f, n)] == []


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from knowbase.catalog import items\n\ndef f(kb):\n    return kb.rt.catalog\n")
    assert _violations(bad) == ["bad.py:1 imports knowbase.catalog", "bad.py:4 uses .rt"]
