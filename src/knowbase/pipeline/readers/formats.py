"""Every format knowbase reads, and how: the one list behind ``kb formats`` and the docs.

Text formats beyond Markdown are read as text: reStructuredText by its heading sections,
JSON (minified files re-indented so the splitter finds line boundaries), YAML, TOML, INI, XML
and source code as they are (the structured splitter cuts at blank lines, which in code and
config files fall between definitions and sections). Files without an extension are read when
their name says they are text (README, LICENSE, Makefile…; case-insensitive, with a suffix such
as ``LICENSE-MIT`` allowed); their bytes still have to decode as text.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePath

from knowbase.pipeline.documents import Document


@dataclass(frozen=True)
class Format:
    """One row of ``kb formats``: what is read, with what, located how."""

    name: str
    extensions: tuple[str, ...]
    how: str
    locator: str


IMAGE_EXTENSIONS: frozenset[str] = frozenset({".png", ".jpg", ".jpeg", ".tif", ".tiff"})
"""Images: read by OCR or a caption, never as text."""

CODE_EXTENSIONS: tuple[str, ...] = (
    ".py", ".pyi", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".java", ".kt", ".kts",
    ".scala", ".go", ".rs", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".cs", ".fs",
    ".swift", ".m", ".rb", ".php", ".pl", ".pm", ".lua", ".r", ".jl", ".dart", ".ex", ".exs",
    ".erl", ".hs", ".clj", ".sh", ".bash", ".zsh", ".fish", ".ps1", ".bat", ".sql", ".css",
    ".scss", ".less", ".vue", ".svelte", ".proto", ".graphql", ".tf", ".gradle", ".cmake",
)  # fmt: skip
CONFIG_EXTENSIONS: tuple[str, ...] = (
    ".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".properties",
)  # fmt: skip
MARKUP_EXTENSIONS: tuple[str, ...] = (".xml", ".svg", ".xsd", ".rss", ".atom")
PLAIN_EXTENSIONS: tuple[str, ...] = (".txt", ".text", ".log", ".tex", ".adoc", ".org")
TEXT_NAMES: tuple[str, ...] = (
    "readme", "license", "licence", "copying", "notice", "authors", "contributors",
    "changelog", "changes", "history", "news", "todo", "install", "makefile", "gnumakefile",
    "dockerfile", "containerfile", "procfile", "gemfile", "rakefile", "vagrantfile",
    "jenkinsfile", "justfile", "brewfile", "codeowners",
)  # fmt: skip
"""Extensionless file names read as text (lower case; ``LICENSE-MIT``, ``README_fr`` too)."""

FORMATS: tuple[Format, ...] = (
    Format("Markdown", (".md", ".markdown", ".mdx"), "heading sections", "heading path"),
    Format("PDF", (".pdf",), "pdfium + pdfplumber's table code: tables, headings, columns, "
           "right-to-left lines in logical order; OCR for scans", "page"),
    Format("Word", (".docx", ".doc"), "mammoth → Markdown sections (.doc: LibreOffice)",
           "heading path"),
    Format("PowerPoint", (".pptx", ".ppt"), "per slide, tables as Markdown", "slide"),
    Format("Spreadsheet", (".xlsx", ".xls", ".xlsb", ".ods"), "calamine, a table per sheet",
           "sheet"),
    Format("CSV", (".csv",), "Markdown tables of 64 KiB, header repeated, delimiter sniffed",
           "rows"),
    Format("HTML", (".html", ".htm"), "Markdown sections, tables kept", "heading path"),
    Format("EPUB", (".epub",), "per chapter", "chapter"),
    Format("reStructuredText", (".rst",), "heading sections", "heading path"),
    Format("JSON", (".json", ".jsonl", ".ndjson", ".geojson"),
           "as text; minified JSON re-indented", "-"),
    Format("YAML/TOML/INI", CONFIG_EXTENSIONS, "as text", "-"),
    Format("XML", MARKUP_EXTENSIONS, "as text", "-"),
    Format("Source code", CODE_EXTENSIONS, "as text, cut at blank lines", "-"),
    Format("Plain text", PLAIN_EXTENSIONS, "as text, charset detected", "-"),
    Format("Extensionless", (), "README, LICENSE, Makefile… by name; any other file whose "
           "content is text (GPL-3, README.Debian, *.copyright)", "-"),
    Format("Compressed text", (".gz", ".bz2", ".xz"), "one text file inside, read "
           "decompressed (bomb-guarded)", "-"),
    Format("Images", (".png", ".jpg", ".jpeg", ".tif", ".tiff"), "OCR (tesseract) or a "
           "caption (caption:profile:model) when the base has a processor", "page"),
)  # fmt: skip

TEXT_EXTENSIONS: frozenset[str] = frozenset(
    CODE_EXTENSIONS + CONFIG_EXTENSIONS + MARKUP_EXTENSIONS + PLAIN_EXTENSIONS
) | {".rst", ".json", ".jsonl", ".ndjson", ".geojson"}
"""Extensions read by this module (``.txt`` included)."""


def is_text_name(name: str | PurePath) -> bool:
    """Whether an extensionless file name is one of the known text files (``README``)."""
    p = PurePath(name)
    if p.suffix or p.name.startswith("."):
        return False
    head = re.split(r"[-_.]", p.name.lower(), maxsplit=1)[0]
    return head in TEXT_NAMES


def read_text_format(path: Path) -> list[Document]:
    """Read a text-format file: ``.rst`` by sections, minified JSON re-indented, others as is."""
    from knowbase.pipeline.readers.text import decode_text

    text = decode_text(path.read_bytes(), name=path.name)
    ext = path.suffix.lower()
    if ext == ".rst":
        return rst_sections(text)
    if ext in (".json", ".geojson") and "\n" not in text.strip()[:4096] and len(text) > 200:
        # Not valid JSON after all: index the text as it is.
        with contextlib.suppress(ValueError):
            text = json.dumps(json.loads(text), indent=1, ensure_ascii=False)
    return [Document(text)]


_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+:.<>_])\1{2,}[ \t]*$")


def rst_sections(text: str) -> list[Document]:
    """Split reStructuredText at its section titles; locator ``{"heading": [...]}``.

    Title levels follow the order in which adornment styles first appear, as docutils does.

    >>> [d.locator for d in rst_sections("Guide\\n=====\\nx\\n\\nInstall\\n-------\\ny\\n")]
    [{'heading': ['Guide']}, {'heading': ['Guide', 'Install']}]
    """
    lines = text.split("\n")
    styles: list[str] = []
    path: list[str] = []
    docs: list[Document] = []
    start, locator = 0, {}
    i = 0
    while i < len(lines):
        title, style, span = _title_at(lines, i)
        if title is None:
            i += 1
            continue
        body = "\n".join(lines[start:i])
        if body.strip():
            docs.append(Document(body, locator))
        if style not in styles:
            styles.append(style)
        level = styles.index(style)
        path = [*path[:level], title]
        start, locator = i, {"heading": list(path)}
        i += span
    body = "\n".join(lines[start:])
    if body.strip():
        docs.append(Document(body, locator))
    return docs


def _title_at(lines: list[str], i: int) -> tuple[str | None, str, int]:
    """``(title, style, lines used)`` when a section title starts at line ``i``."""
    line = lines[i]
    over = _ADORNMENT.match(line)
    if over and i + 2 < len(lines):  # overline + title + underline
        title, under = lines[i + 1].strip(), lines[i + 2]
        if title and under.strip() == line.strip() and len(line.strip()) >= len(title):
            return title, "o" + line.strip()[0], 3
    if i + 1 < len(lines) and line.strip() and not line.startswith((" ", "\t")):
        under = _ADORNMENT.match(lines[i + 1])
        if under and not over and len(lines[i + 1].rstrip()) >= len(line.rstrip()):
            return line.strip(), lines[i + 1].strip()[0], 2
    return None, "", 1
