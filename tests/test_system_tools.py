"""The needs_system plugin (tests/_system_tools.py): the skip and the one summary line."""

from __future__ import annotations

import shutil

from _system_tools import TOOLS, summary_line


def test_summary_line_names_packages_tests_and_command() -> None:
    line = summary_line(
        {
            ("poppler-utils",): {"tests/a/test_ocr.py::t1", "tests/a/test_ocr.py::t2"},
            ("libreoffice-writer-nogui",): {"tests/b/test_doc.py::t"},
        }
    )
    assert "\n" not in line
    assert "libreoffice-writer-nogui: 1 tests (test_doc.py)" in line
    assert "poppler-utils: 2 tests (test_ocr.py)" in line
    assert line.endswith("apt-get install libreoffice-writer-nogui poppler-utils")


def test_every_tool_names_debian_packages_and_checks_the_program() -> None:
    assert set(TOOLS) == {"tesseract", "pdftoppm", "soffice"}
    assert all(t.packages for t in TOOLS.values())
    assert TOOLS["pdftoppm"].available() == (shutil.which("pdftoppm") is not None)
