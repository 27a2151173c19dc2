"""Legacy .doc / .ppt through LibreOffice (CI installs it), in the isolated reader child."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from knowbase.pipeline.readers import read_file_isolated

soffice = shutil.which("soffice") or shutil.which("libreoffice")
pytestmark = pytest.mark.needs_system("soffice")  # tests/_system_tools.py


def _convert(src: Path, target: str, out_dir: Path) -> Path:
    subprocess.run(
        [
            soffice,
            f"-env:UserInstallation=file://{out_dir}/profile",
            "--headless",
            "--convert-to",
            target,
            "--outdir",
            str(out_dir),
            str(src),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    return out_dir / f"{src.stem}.{target}"


def test_doc_is_converted_and_read(tmp_path):
    import docx

    document = docx.Document()
    document.add_heading("Harbour report", level=1)
    document.add_paragraph("The ferry to the northern island leaves at dawn.")
    src = tmp_path / "report.docx"
    document.save(src)
    legacy = _convert(src, "doc", tmp_path / "out")
    docs = read_file_isolated(legacy, timeout_s=180)
    text = "\n".join(d.text for d in docs)
    assert "ferry to the northern island" in text


def test_ppt_is_converted_and_read_per_slide(tmp_path):
    import pptx

    deck = pptx.Presentation()
    for title in ("Quarterly goals", "Lighthouse budget"):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
    src = tmp_path / "deck.pptx"
    deck.save(src)
    legacy = _convert(src, "ppt", tmp_path / "out")
    docs = read_file_isolated(legacy, timeout_s=180)
    assert [d.locator for d in docs if "Lighthouse budget" in d.text] == [{"slide": 2}]
