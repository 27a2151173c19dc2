"""Word and PowerPoint: docx → Markdown sections, pptx → one document per slide.

docx goes through mammoth (the converter markitdown itself uses) to HTML and markdownify to
Markdown with ATX headings, then :func:`read_markdown_text` gives heading-path locators;
equations (Office Math, which mammoth drops) are made linear text first (``omml.py``).
pptx is read with python-pptx directly so each slide keeps ``{"slide": n}``. Legacy .doc/.ppt
need LibreOffice (``soffice``) to convert first; without it they fail ``unreadable_file`` with a
hint saying what to install.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from knowbase.errors import UnreadableFile
from knowbase.pipeline.documents import Document
from knowbase.pipeline.readers.html import html_to_markdown
from knowbase.pipeline.readers.markdown import read_markdown_text
from knowbase.pipeline.readers.omml import docx_with_linear_math
from knowbase.pipeline.readers.sniff import check_zip
from knowbase.pipeline.readers.text import rows_to_markdown

_CONVERT_TIMEOUT_S = 90


def read_docx(path: Path) -> list[Document]:
    """Markdown of a Word document, one document per heading section."""
    import mammoth

    check_zip(path).close()
    try:
        with docx_with_linear_math(path) as fh:
            html = mammoth.convert_to_html(fh).value
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise _corrupt(path, "Word document", exc) from exc
    except Exception as exc:  # mammoth raises bare errors on malformed XML parts
        raise _corrupt(path, "Word document", exc) from exc
    return read_markdown_text(html_to_markdown(html))


def read_pptx(path: Path) -> list[Document]:
    """One document per slide with text (title once, then shapes, tables, chart titles, notes)."""
    from pptx import Presentation

    check_zip(path).close()
    try:
        prs = Presentation(str(path))
        docs = []
        for n, slide in enumerate(prs.slides, start=1):
            text = _slide_text(slide)
            if text:
                docs.append(Document(text, {"slide": n}))
        return docs
    except Exception as exc:  # python-pptx surfaces corrupt parts as KeyError/ValueError/lxml
        raise _corrupt(path, "PowerPoint file", exc) from exc


def _slide_text(slide: Any) -> str:
    parts: list[str] = []
    title_shape = slide.shapes.title
    title_id = None
    if title_shape is not None and title_shape.has_text_frame and title_shape.text.strip():
        parts.append("# " + " ".join(title_shape.text.split()))
        title_id = title_shape.shape_id
    for shape in slide.shapes:
        # python-pptx builds a new proxy per access, so the title is recognised by its id.
        if title_id is not None and shape.shape_id == title_id:
            continue
        parts.extend(_shape_text(shape))
    if slide.has_notes_slide:
        notes = slide.notes_slide.notes_text_frame
        if notes is not None and notes.text.strip():
            parts.append("### Notes\n\n" + notes.text.strip())
    return "\n\n".join(p for p in parts if p.strip())


def _shape_text(shape: Any) -> list[str]:
    if getattr(shape, "shape_type", None) == 6 or hasattr(shape, "shapes"):  # group
        out: list[str] = []
        for child in getattr(shape, "shapes", []):
            out.extend(_shape_text(child))
        return out
    if getattr(shape, "has_chart", False) and shape.has_chart:
        title = _chart_title(shape.chart)
        return [title] if title else []
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
        return [rows_to_markdown(rows)]
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        text = "\n".join(p.text for p in shape.text_frame.paragraphs if p.text.strip())
        return [text] if text.strip() else []
    return []


def _chart_title(chart: Any) -> str:
    """The chart's own title text (what the slide shows above the plot), or ''."""
    if not chart.has_title:
        return ""
    title = chart.chart_title
    if not title.has_text_frame:
        return ""
    return " ".join(title.text_frame.text.split())


def read_legacy_office(path: Path, target: str) -> list[Document]:
    """.doc/.ppt: convert with LibreOffice to ``target`` (``docx``/``pptx``) and read that."""
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        raise UnreadableFile(
            f"{path.name} is a legacy {path.suffix} file and no converter is installed",
            hint=f"install LibreOffice (apt-get install libreoffice-writer-nogui "
            f"libreoffice-impress-nogui) or save the file as .{target}",
            path=str(path),
            reason="no_converter",
        )
    with tempfile.TemporaryDirectory(prefix="kb-convert-") as tmp:
        cmd = [
            soffice,
            f"-env:UserInstallation=file://{tmp}/profile",
            "--headless",
            "--convert-to",
            target,
            "--outdir",
            tmp,
            str(path),
        ]
        try:
            subprocess.run(
                cmd, capture_output=True, timeout=_CONVERT_TIMEOUT_S, check=False, cwd=tmp
            )
        except subprocess.TimeoutExpired as exc:
            raise UnreadableFile(
                f"converting {path.name} took longer than {_CONVERT_TIMEOUT_S} s",
                path=str(path),
                reason="timeout",
            ) from exc
        out = Path(tmp) / f"{path.stem}.{target}"
        if not out.is_file():
            raise UnreadableFile(
                f"LibreOffice could not convert {path.name}; the file is corrupt or "
                "not a Word/PowerPoint document",
                path=str(path),
                reason="convert_failed",
            )
        return read_docx(out) if target == "docx" else read_pptx(out)


def _corrupt(path: Path, what: str, exc: BaseException) -> UnreadableFile:
    return UnreadableFile(
        f"{path.name} is not a readable {what}: {exc}", path=str(path), reason="corrupt"
    )
