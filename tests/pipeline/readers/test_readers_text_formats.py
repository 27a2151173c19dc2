"""Text formats beyond Markdown (issue 28): rst sections, JSON, YAML, code, README by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from knowbase.errors import UnreadableFile
from knowbase.pipeline.readers import is_supported, read_file
from knowbase.pipeline.readers.formats import FORMATS, TEXT_EXTENSIONS, is_text_name

pytestmark = pytest.mark.timeout(60)


def test_text_formats_and_names_are_supported() -> None:
    for name in ("a.rst", "b.json", "c.yaml", "d.toml", "e.ini", "f.xml", "g.py", "h.ts"):
        assert is_supported(name), name
    for name in ("README", "LICENSE", "Makefile", "LICENSE-MIT", "readme_fr", "Dockerfile"):
        assert is_supported(name) and is_text_name(name), name
    for name in ("program", ".gitignore", "a.exe", "READMEX"):
        assert not is_supported(name), name
    listed = {e for f in FORMATS for e in f.extensions}
    assert listed | {".txt"} >= TEXT_EXTENSIONS


def test_rst_is_read_by_sections(tmp_path: Path) -> None:
    p = tmp_path / "guide.rst"
    p.write_text(
        "=====\nGuide\n=====\n\nIntro text.\n\nInstall\n-------\n\nRun pip.\n\n"
        "Extras\n~~~~~~\n\nOptional.\n\nUsage\n-------\n\nCall it.\n",
        encoding="utf-8",
    )
    docs = read_file(p)
    assert [d.locator for d in docs] == [
        {"heading": ["Guide"]},
        {"heading": ["Guide", "Install"]},
        {"heading": ["Guide", "Install", "Extras"]},
        {"heading": ["Guide", "Usage"]},
    ]
    assert "".join(d.text for d in docs).count("Run pip.") == 1


def test_minified_json_is_reindented_and_pretty_json_kept(tmp_path: Path) -> None:
    data = {"items": [{"name": f"widget {i}", "colour": "teal"} for i in range(20)]}
    small = tmp_path / "min.json"
    small.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
    text = read_file(small)[0].text
    assert text.count("\n") > 20 and json.loads(text) == data
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(data, indent=4), encoding="utf-8")
    assert read_file(pretty)[0].text == json.dumps(data, indent=4)


def test_yaml_code_and_readme_read_as_text(tmp_path: Path) -> None:
    (tmp_path / "conf.yaml").write_text("server:\n  port: 8080\n", encoding="utf-8")
    (tmp_path / "tool.py").write_text("def main():\n    return 1\n", encoding="utf-8")
    (tmp_path / "README").write_text("Project readme.\n", encoding="utf-8")
    assert read_file(tmp_path / "conf.yaml")[0].text == "server:\n  port: 8080\n"
    assert "def main" in read_file(tmp_path / "tool.py")[0].text
    assert read_file(tmp_path / "README")[0].text.strip() == "Project readme."


def test_binary_file_with_a_text_name_is_unreadable(tmp_path: Path) -> None:
    p = tmp_path / "LICENSE"
    p.write_bytes(b"%PDF-1.4\n" + bytes(range(256)) * 4)
    with pytest.raises(UnreadableFile):
        read_file(p)


def test_kb_formats_lists_every_format() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", "formats", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    rows = json.loads(out)
    names = {r["format"] for r in rows}
    assert {"PDF", "reStructuredText", "JSON", "Source code", "Extensionless"} <= names
    ext_row = next(r for r in rows if r["format"] == "Extensionless")
    assert "readme" in ext_row["names"] and "makefile" in ext_row["names"]
