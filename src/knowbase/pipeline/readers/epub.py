"""EPUB → one document per chapter (spine item), located ``{"chapter": title}``.

Read straight from the zip (container.xml → OPF → spine), so no EPUB library quirk can drop a
chapter. Titles come from the table of contents (EPUB 3 nav or EPUB 2 NCX), else the chapter's
first heading, else its 1-based position. DRM-encrypted books fail ``encrypted_file``.
"""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from knowbase.errors import EncryptedFile, UnreadableFile
from knowbase.pipeline.documents import Document
from knowbase.pipeline.readers.html import html_to_markdown
from knowbase.pipeline.readers.markdown import read_markdown_text
from knowbase.pipeline.readers.sniff import check_zip

_FONT_OBFUSCATION = {
    "http://www.idpf.org/2008/embedding",
    "http://ns.adobe.com/pdf/enc#RC",
}
_MAX_PART_BYTES = 64 * 1024 * 1024


def read_epub(path: Path) -> list[Document]:
    """Chapters in reading order; empty chapters (covers, blank pages) are skipped."""
    with check_zip(path) as zf:
        try:
            return _read(zf, path)
        except (EncryptedFile, UnreadableFile):
            raise
        except (KeyError, ValueError, zipfile.BadZipFile, OSError) as exc:
            raise UnreadableFile(
                f"{path.name} is not a readable EPUB: {exc}", path=str(path), reason="corrupt"
            ) from exc


def _read(zf: zipfile.ZipFile, path: Path) -> list[Document]:
    _check_drm(zf, path)
    container = _xml(zf, "META-INF/container.xml")
    rootfile = container.find(".//{*}rootfile")
    if rootfile is None or not rootfile.get("full-path"):
        raise UnreadableFile(
            f"{path.name} has no package document", path=str(path), reason="corrupt"
        )
    opf_path = rootfile.get("full-path")
    opf = _xml(zf, opf_path)
    base = posixpath.dirname(opf_path)
    manifest = {
        item.get("id"): item
        for item in opf.iterfind(".//{*}manifest/{*}item")
        if item.get("id") and item.get("href")
    }
    titles = _toc_titles(zf, opf, manifest, base)
    docs: list[Document] = []
    for n, ref in enumerate(opf.iterfind(".//{*}spine/{*}itemref"), start=1):
        item = manifest.get(ref.get("idref"))
        if item is None or "html" not in (item.get("media-type") or "xhtml"):
            continue
        href = _join(base, item.get("href"))
        html = _part(zf, href).decode("utf-8", errors="replace")
        sections = read_markdown_text(html_to_markdown(html))
        text = "\n\n".join(d.text for d in sections).strip()
        if not text:
            continue
        title = titles.get(href) or _first_heading(sections) or n
        docs.append(Document(text, {"chapter": title}))
    return docs


def _check_drm(zf: zipfile.ZipFile, path: Path) -> None:
    if "META-INF/encryption.xml" not in zf.namelist():
        return
    enc = _xml(zf, "META-INF/encryption.xml")
    for method in enc.iterfind(".//{*}EncryptionMethod"):
        if method.get("Algorithm") not in _FONT_OBFUSCATION:
            raise EncryptedFile(f"{path.name} is a DRM-protected EPUB", path=str(path))


def _toc_titles(zf: zipfile.ZipFile, opf: Any, manifest: dict[str, Any], base: str) -> dict:
    titles: dict[str, str] = {}
    for item in manifest.values():
        props = item.get("properties") or ""
        media = item.get("media-type") or ""
        if "nav" not in props.split() and media != "application/x-dtbncx+xml":
            continue
        toc_path = _join(base, item.get("href"))
        toc_dir = posixpath.dirname(toc_path)
        try:
            toc = _xml(zf, toc_path)
        except (KeyError, ValueError):
            continue
        if media == "application/x-dtbncx+xml":
            for point in toc.iterfind(".//{*}navPoint"):
                label = point.find("{*}navLabel/{*}text")
                content = point.find("{*}content")
                if label is not None and content is not None and content.get("src"):
                    target = _join(toc_dir, content.get("src").split("#")[0])
                    titles.setdefault(target, " ".join("".join(label.itertext()).split()))
        else:
            for link in toc.iterfind(".//{*}nav//{*}a"):
                if link.get("href"):
                    target = _join(toc_dir, link.get("href").split("#")[0])
                    titles.setdefault(target, " ".join("".join(link.itertext()).split()))
    return {k: v for k, v in titles.items() if v}


def _first_heading(sections: list[Document]) -> str | None:
    for doc in sections:
        heading = doc.locator.get("heading")
        if heading:
            return heading[-1] or None
    return None


def _join(base: str, href: str) -> str:
    return posixpath.normpath(posixpath.join(base, unquote(href)))


def _part(zf: zipfile.ZipFile, name: str) -> bytes:
    info = zf.getinfo(name)
    if info.file_size > _MAX_PART_BYTES:
        raise ValueError(f"part {name} is {info.file_size} bytes")
    return zf.read(info)


def _xml(zf: zipfile.ZipFile, name: str) -> Any:
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, recover=True)
    root = etree.fromstring(_part(zf, name), parser)
    if root is None:
        raise ValueError(f"{name} is not XML")
    return root
