"""Tests that need a system program (tesseract, poppler, LibreOffice) and say so in one line.

Mark a test ``@pytest.mark.needs_system("tesseract", "pdftoppm")``: it is skipped where a named
program is missing, and the terminal summary ends with ONE line naming the Debian packages
that would un-skip which tests. CI (``.ci/run``) installs all of them, so there nothing is
skipped for this reason. Registered from ``tests/conftest.py`` (``pytest_plugins``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class SystemTool:
    packages: tuple[str, ...]  # Debian package names, as .ci/run installs them
    available: Callable[[], bool]


def _tesseract() -> bool:
    from knowbase.pipeline.processing.tesseract import tesseract_available

    return tesseract_available()  # the program and at least one default language


def _soffice() -> bool:
    return bool(shutil.which("soffice") or shutil.which("libreoffice"))


TOOLS: dict[str, SystemTool] = {
    "tesseract": SystemTool(
        ("tesseract-ocr", "tesseract-ocr-eng", "tesseract-ocr-chi-sim"), _tesseract
    ),
    "pdftoppm": SystemTool(("poppler-utils",), lambda: shutil.which("pdftoppm") is not None),
    "soffice": SystemTool(("libreoffice-writer-nogui", "libreoffice-impress-nogui"), _soffice),
}

_missing_key = pytest.StashKey[dict[tuple[str, ...], set[str]]]()
_cache: dict[str, bool] = {}


def _is_available(name: str) -> bool:
    if name not in _cache:
        _cache[name] = TOOLS[name].available()
    return _cache[name]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_system(*tools): skipped unless these programs are installed "
        f"(one of: {', '.join(TOOLS)})",
    )
    config.stash[_missing_key] = {}


def pytest_runtest_setup(item: pytest.Item) -> None:
    names = [n for m in item.iter_markers("needs_system") for n in m.args]
    unknown = [n for n in names if n not in TOOLS]
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown needs_system tool(s) {unknown}")
    missing = [n for n in dict.fromkeys(names) if not _is_available(n)]
    if not missing:
        return
    packages = tuple(p for n in missing for p in TOOLS[n].packages)
    item.config.stash[_missing_key].setdefault(packages, set()).add(item.nodeid)
    pytest.skip(f"needs {', '.join(missing)}: apt-get install {' '.join(packages)}")


# The outermost wrapper, so the line comes after pytest's own short summary: the last line.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config):  # type: ignore[no-untyped-def]
    result = yield
    missing = config.stash.get(_missing_key, {})
    if missing:
        terminalreporter.write_line(summary_line(missing))
    return result


def summary_line(missing: dict[tuple[str, ...], set[str]]) -> str:
    """One line: which packages would un-skip how many tests of which files, and the command."""
    parts = []
    for packages, nodeids in sorted(missing.items()):
        files = sorted({n.split("::", 1)[0].rsplit("/", 1)[-1] for n in nodeids})
        parts.append(f"{' '.join(packages)}: {len(nodeids)} tests ({', '.join(files)})")
    every = dict.fromkeys(p for packages in sorted(missing) for p in packages)
    return (
        "skipped for want of system packages: "
        + "; ".join(parts)
        + f" — apt-get install {' '.join(every)}"
    )
