"""Office Math (OMML) in Word documents → linear text runs mammoth can read.

mammoth drops ``m:oMath`` / ``m:oMathPara`` (it does not know the math namespace), so an
equation a user sees vanished from the text. Before conversion each math zone in the parts
that hold body text is replaced by a plain ``w:r``/``w:t`` run with its linear form, in reading
order: the ``m:t`` texts, with ``/``, ``^``, ``_`` and ``√`` where fractions, scripts and
radicals put structure (``E=mc^2``, ``(a+b)/2``). Not LaTeX; enough to read and to search.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import IO

from lxml import etree

M = "http://schemas.openxmlformats.org/officeDocument/2006/math"
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
# Parts mammoth reads text from; math in headers/footers is not read by mammoth at all.
_PARTS = ("word/document.xml", "word/footnotes.xml", "word/endnotes.xml", "word/comments.xml")
_MATH_MARK = M.encode()


def _m(tag: str) -> str:
    return f"{{{M}}}{tag}"


def _w(tag: str) -> str:
    return f"{{{W}}}{tag}"


def docx_with_linear_math(path: Path) -> IO[bytes]:
    """The file to give mammoth: ``path`` itself, or an in-memory copy with math made text.

    The copy is made only when a text part mentions the math namespace, so documents
    without equations are read straight from disk.
    """
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        rewritten = {}
        for part in _PARTS:
            if part in names:
                data = zf.read(part)
                if _MATH_MARK in data:
                    rewritten[part] = linearize_part(data)
        if not rewritten:
            return path.open("rb")
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in zf.infolist():
                dst.writestr(info, rewritten.get(info.filename) or zf.read(info))
    out.seek(0)
    return out


def linearize_part(xml: bytes) -> bytes:
    """One WordprocessingML part with every math zone replaced by a text run."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    root = etree.fromstring(xml, parser)
    # Outermost zones first: an m:oMathPara holds m:oMath children, replaced with it.
    zones = [
        el
        for el in root.iter(_m("oMathPara"), _m("oMath"))
        if not any(a.tag in (_m("oMathPara"), _m("oMath")) for a in el.iterancestors())
    ]
    for zone in zones:
        text = linear_text(zone)
        run = etree.Element(_w("r"))
        t = etree.SubElement(run, _w("t"))
        t.text = text
        t.set(XML_SPACE, "preserve")
        parent = zone.getparent()
        if parent is not None and parent.tag == _w("body"):
            para = etree.Element(_w("p"))  # a display equation straight in the body
            para.append(run)
            run = para
        run.tail = zone.tail
        if parent is not None:
            parent.replace(zone, run)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)


def linear_text(el: etree._Element) -> str:
    """The linear form of one OMML element (and its children), in reading order."""
    if not isinstance(el.tag, str) or etree.QName(el).namespace != M:
        return ""  # comments, and w:rPr and the like inside math: formatting, not text
    tag = etree.QName(el).localname
    if tag == "t":
        return el.text or ""
    if tag.endswith("Pr"):
        return ""  # properties: m:dPr, m:naryPr, m:ctrlPr …

    def part(name: str) -> str:
        return "".join(linear_text(c) for c in el if _local(c) == name)

    if tag == "oMathPara":
        return "  ".join(linear_text(c) for c in el if _local(c) == "oMath")
    if tag == "f":
        return f"{_group(part('num'))}/{_group(part('den'))}"
    if tag == "sSup":
        return f"{part('e')}^{_group(part('sup'))}"
    if tag == "sSub":
        return f"{part('e')}_{_group(part('sub'))}"
    if tag == "sSubSup":
        return f"{part('e')}_{_group(part('sub'))}^{_group(part('sup'))}"
    if tag == "sPre":
        return f"_{_group(part('sub'))}^{_group(part('sup'))}{part('e')}"
    if tag == "rad":
        deg = part("deg")
        return (f"{_group(deg)}" if deg else "") + f"√{_group(part('e'))}"
    if tag == "nary":
        sign = _prop(el, "naryPr", "chr") or "∫"
        sub, sup = part("sub"), part("sup")
        limits = (f"_{_group(sub)}" if sub else "") + (f"^{_group(sup)}" if sup else "")
        return f"{sign}{limits} {part('e')}"
    if tag == "d":
        beg = _prop(el, "dPr", "begChr")
        end = _prop(el, "dPr", "endChr")
        sep = _prop(el, "dPr", "sepChr")
        inner = (sep if sep is not None else "|").join(
            linear_text(c) for c in el if _local(c) == "e"
        )
        return f"{'(' if beg is None else beg}{inner}{')' if end is None else end}"
    if tag == "func":
        name, arg = part("fName"), part("e")
        return f"{name}{'' if arg.startswith('(') else ' '}{arg}"
    if tag == "m":  # matrix: rows of cells
        rows = [", ".join(linear_text(e) for e in r if _local(e) == "e") for r in el]
        return "[" + "; ".join(r for r in rows if r) + "]"
    if tag == "eqArr":
        return "; ".join(linear_text(c) for c in el if _local(c) == "e")
    return "".join(linear_text(c) for c in el)


def _local(el: etree._Element) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


def _prop(el: etree._Element, pr: str, name: str) -> str | None:
    """``m:val`` of ``el``'s ``m:<pr>/m:<name>``; None when absent ("" is a real value)."""
    found = el.find(f"{_m(pr)}/{_m(name)}")
    return None if found is None else found.get(_m("val"), "")


def _group(text: str) -> str:
    """Parenthesise a multi-token operand so ``a+b`` over ``2`` reads ``(a+b)/2``."""
    return text if len(text) <= 1 or text.isalnum() else f"({text})"
