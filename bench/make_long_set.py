"""Build ``eval/long/corpus.jsonl`` from the Sphinx docs of three BSD-3 Pallets sdists.

Run by hand once (the corpus is committed; queries and qrels are written by hand)::

    pip download --no-binary :all: --no-deps click==8.1.7 flask==3.0.3 jinja2==3.1.4
    for f in *.tar.gz; do tar xzf "$f"; done
    python bench/make_long_set.py DIR_WITH_THE_UNPACKED_SDISTS

Each narrative ``.rst`` page becomes one document: its first heading is the title, later
headings become Markdown headings (``##`` and deeper, by the order their underline style first
appears, as reStructuredText does), ``.. _label:`` targets and ``.. currentmodule::``-style
directives without a body are dropped; everything else stays as written.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PAGES = {
    "click-8.1.7": "quickstart parameters options arguments commands prompts documentation "
    "complex advanced testing utils shell-completion exceptions unicode-support wincmd "
    "setuptools why",
    "flask-3.0.3": "quickstart config blueprints cli errorhandling testing templating "
    "appcontext reqcontext signals logging views server debugging web-security async-await "
    "extensiondev lifecycle design shell",
    "jinja2-3.1.4": "templates extensions sandbox nativetypes tricks faq switching integration",
}
_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")
_DROP = re.compile(r"^\.\. (_[^:]+:|currentmodule::|module::|highlight::|versionadded::)")


def convert(rst: str) -> tuple[str, str]:
    """``(title, markdown body)`` of one reStructuredText page."""
    lines = rst.splitlines()
    styles: list[str] = []
    out: list[str] = []
    title = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        over = _UNDERLINE.match(line) and i + 2 < len(lines) and _UNDERLINE.match(lines[i + 2])
        if over and lines[i + 1].strip():
            style, text, i = "over" + line[0], lines[i + 1].strip(), i + 3
        elif (
            line.strip()
            and not line.startswith(" ")
            and _UNDERLINE.match(nxt)
            and (len(nxt.rstrip()) >= len(line.rstrip()))
        ):
            style, text, i = nxt[0], line.strip(), i + 2
        else:
            if not _DROP.match(line):
                out.append(line)
            i += 1
            continue
        if style not in styles:
            styles.append(style)
        level = styles.index(style) + 1
        if level == 1 and not title:
            title = text
            continue
        out.append("#" * max(2, level) + " " + text)
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()
    return title, body


def main(root: Path) -> None:
    rows = []
    for sdist, pages in PAGES.items():
        project = sdist.split("-")[0].replace("jinja2", "jinja")
        for page in pages.split():
            title, body = convert((root / sdist / "docs" / f"{page}.rst").read_text("utf-8"))
            rows.append({"_id": f"{project}-{page}", "title": title, "text": body})
    out = Path(__file__).resolve().parent.parent / "eval" / "long" / "corpus.jsonl"
    with out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} documents -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
