"""A file's text with its figures in reading order, for the image-caption processor (issue 28).

    >>> [type(p).__name__ for p in read_with_figures(Path("report.docx"))]  # doctest: +SKIP
    ['Document', 'Figure', 'Document']

Each :class:`Figure` carries the image (PNG or JPEG bytes, what vision endpoints take) and the
locator of where it sits plus its 1-based number in the file: ``{"page": 3, "figure": 2}`` in a
PDF, ``{"slide": 4, "figure": 5}`` in a deck, ``{"heading": [...], "figure": 1}`` in a Word
document. Where it sits:

- DOCX: exactly where the picture is (mammoth's image hook leaves a token in the text, which
  splits the section around the figure);
- PPTX: after its slide's text (pictures inside groups count);
- PDF: after its page's text (pypdfium2's image objects, their own pixels, not a render);
- an image file: one figure, locator ``{}``.

Images under :data:`MIN_SIDE` pixels on a side (icons, bullets, rules) are skipped, larger
than :data:`MAX_SIDE` are scaled down, and at most :data:`MAX_FIGURES` are kept per file. This
runs in the reader child (:func:`~knowbase.pipeline.readers.isolation.read_with_figures_isolated`):
it parses untrusted files.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowbase.errors import UnreadableFile, UnsupportedFileType
from knowbase.pipeline.documents import Document
from knowbase.units.chunk import Locator

MIN_SIDE = 48
MAX_SIDE = 1568  # long side sent to the endpoint; more only costs tokens
MAX_FIGURES = 64
FIGURE_EXTENSIONS: frozenset[str] = frozenset({".pdf", ".docx", ".pptx"})
_TOKEN = re.compile(r"@@kbfigure(\d+)@@")


@dataclass(frozen=True)
class Figure:
    """One image of a file: ``data`` is PNG or JPEG (``mime``), ``locator`` where it sits."""

    locator: Locator
    data: bytes
    mime: str


Part = Document | Figure


def read_with_figures(path: Path) -> list[Part]:
    """``path``'s documents (as :func:`~knowbase.pipeline.readers.read_file` reads them) with
    its figures between them, in reading order; an image file is one figure."""
    from knowbase.pipeline.readers.formats import IMAGE_EXTENSIONS
    from knowbase.pipeline.readers.sniff import check_signature

    path = Path(path)
    ext = path.suffix.lower()
    check_signature(path, ext)
    if ext in IMAGE_EXTENSIONS:
        image = _normalise(path.read_bytes(), min_side=1)  # the user added it: any size
        if image is None:
            raise UnreadableFile(
                f"{path.name} is not an image Pillow can read", path=str(path), reason="corrupt"
            )
        return [Figure({}, *image)]
    if ext == ".pdf":
        return _pdf(path)
    if ext == ".docx":
        return _docx(path)
    if ext == ".pptx":
        return _pptx(path)
    raise UnsupportedFileType(f"{path.name}: no figures are read from {ext} files", path=str(path))


def _normalise(data: bytes, *, min_side: int = MIN_SIDE) -> tuple[bytes, str] | None:
    """(bytes, mime) a vision endpoint takes, or None for an icon-sized or unreadable image."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            if min(img.size) < min_side:
                return None
            if img.format in ("PNG", "JPEG") and max(img.size) <= MAX_SIDE:
                return data, f"image/{img.format.lower()}"
            return _png(img, min_side=min_side)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None  # an EMF/WMF drawing or a damaged image: no caption, the text stays


def _png(img: Any, *, min_side: int = MIN_SIDE) -> tuple[bytes, str] | None:
    if min(img.size) < min_side:
        return None
    img = img.convert("RGBA" if "A" in img.getbands() else "RGB")
    img.thumbnail((MAX_SIDE, MAX_SIDE))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue(), "image/png"


class _Numbering:
    """Numbers the kept figures 1, 2, … in file order, up to :data:`MAX_FIGURES`."""

    def __init__(self) -> None:
        self.count = 0

    def make(self, locator: Locator, image: tuple[bytes, str] | None) -> Figure | None:
        if image is None or self.count >= MAX_FIGURES:
            return None
        self.count += 1
        return Figure({**locator, "figure": self.count}, *image)


def _pdf(path: Path) -> list[Part]:
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    from knowbase.pipeline.readers.pdf import read_pdf

    docs = read_pdf(path)
    numbering = _Numbering()
    by_page: dict[int, list[Figure]] = {}
    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        raise UnreadableFile(
            f"{path.name}: its figures cannot be read: {exc}", path=str(path), reason="corrupt"
        ) from exc
    try:
        for n, page in enumerate(pdf, start=1):
            for obj in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,), max_depth=3):
                try:
                    image = _png(obj.get_bitmap(render=False).to_pil())
                except Exception:  # noqa: BLE001 - pdfium/Pillow on one odd image stream
                    image = None  # no caption for it; the page's text and other figures stay
                fig = numbering.make({"page": n}, image)
                if fig is not None:
                    by_page.setdefault(n, []).append(fig)
    finally:
        pdf.close()
    last_of_page = {d.locator["page"]: i for i, d in enumerate(docs)}
    parts: list[Part] = []
    for i, doc in enumerate(docs):
        page = doc.locator["page"]
        for earlier in sorted(p for p in by_page if p < page):  # pages without text
            parts.extend(by_page.pop(earlier))
        parts.append(doc)
        if last_of_page[page] == i:
            parts.extend(by_page.pop(page, []))
    for page in sorted(by_page):  # pages after the last one with text
        parts.extend(by_page[page])
    return parts


def _docx(path: Path) -> list[Part]:
    import mammoth

    from knowbase.pipeline.readers.html import html_to_markdown
    from knowbase.pipeline.readers.markdown import read_markdown_text
    from knowbase.pipeline.readers.omml import docx_with_linear_math
    from knowbase.pipeline.readers.sniff import check_zip

    check_zip(path).close()
    images: list[tuple[bytes, str] | None] = []

    def keep(image: Any) -> dict[str, str]:
        with image.open() as fh:
            images.append(_normalise(fh.read()))
        return {"src": "", "alt": f"kbfigure{len(images)}"}

    try:
        with docx_with_linear_math(path) as fh:
            html = mammoth.convert_to_html(fh, convert_image=mammoth.images.img_element(keep)).value
    except Exception as exc:  # mammoth raises bare errors on malformed XML parts
        raise UnreadableFile(
            f"{path.name} is not a readable Word document: {exc}", path=str(path), reason="corrupt"
        ) from exc
    # html_to_markdown drops <img>; a plain-text token survives it and marks the spot.
    html = re.sub(r'<img [^>]*alt="kbfigure(\d+)"[^>]*>', r" @@kbfigure\1@@ ", html)
    numbering = _Numbering()
    parts: list[Part] = []
    for doc in read_markdown_text(html_to_markdown(html)):
        pieces = _TOKEN.split(doc.text)
        for i, piece in enumerate(pieces):
            if i % 2 == 0:
                if piece.strip():
                    parts.append(Document(piece.strip("\n").rstrip(), doc.locator))
            else:
                fig = numbering.make(doc.locator, images[int(piece) - 1])
                if fig is not None:
                    parts.append(fig)
    return parts


def _pptx(path: Path) -> list[Part]:
    from pptx import Presentation

    from knowbase.pipeline.readers.office import read_pptx

    docs = {d.locator["slide"]: d for d in read_pptx(path)}
    numbering = _Numbering()
    parts: list[Part] = []
    try:
        prs = Presentation(str(path))
        for n, slide in enumerate(prs.slides, start=1):
            if n in docs:
                parts.append(docs[n])
            for blob in _slide_pictures(slide.shapes):
                fig = numbering.make({"slide": n}, _normalise(blob))
                if fig is not None:
                    parts.append(fig)
    except Exception as exc:  # python-pptx surfaces corrupt parts as KeyError/ValueError/lxml
        raise UnreadableFile(
            f"{path.name} is not a readable PowerPoint file: {exc}",
            path=str(path),
            reason="corrupt",
        ) from exc
    return parts


def _slide_pictures(shapes: Any) -> list[bytes]:
    """Image bytes of the pictures among ``shapes``, groups opened, in z-order."""
    out: list[bytes] = []
    for shape in shapes:
        if hasattr(shape, "shapes"):  # a group shape
            out.extend(_slide_pictures(shape.shapes))
            continue
        try:
            out.append(shape.image.blob)
        except (AttributeError, ValueError, KeyError):
            continue  # not a picture, or a picture placeholder left empty
    return out
