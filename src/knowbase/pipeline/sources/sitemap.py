"""Sitemaps: the page URLs a ``sitemap`` item imports (sitemaps.org protocol).

Reads a ``<urlset>``, a ``<sitemapindex>`` (recursively, bounded in depth, sitemap count and
URL count), gzip-compressed sitemaps and plain-text sitemaps (one URL per line). Every fetch
goes through :func:`knowbase.pipeline.sources.url.fetch_raw` (SSRF guard, limiter, size cap).

XML from the network is untrusted: a document that declares a DOCTYPE or an ENTITY is refused
before parsing, so entity expansion ("billion laughs") and external entities cannot happen,
and the body is already capped in bytes (and again after gunzip).
"""

from __future__ import annotations

import logging
import re
import zlib
from dataclasses import dataclass, field
from xml.etree import ElementTree

import httpx

from knowbase.errors import KnowbaseError, UnreadableFile
from knowbase.pipeline.sources.ratelimit import FetchLimiter
from knowbase.pipeline.sources.url import MiB, decode_text, fetch_raw

log = logging.getLogger(__name__)

SITEMAP_TYPES = frozenset(
    {
        "application/xml",
        "text/xml",
        "application/gzip",
        "application/x-gzip",
        "application/octet-stream",  # how many servers label sitemap.xml.gz
        "text/plain",
    }
)
_DECLARATION_RE = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_GZIP_MAGIC = b"\x1f\x8b"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _gunzip(body: bytes, max_bytes: int, url: str) -> bytes:
    # Decompress incrementally so a gzip bomb stops at the cap instead of filling memory.
    inflater = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise UnreadableFile(f"Corrupt gzip sitemap: {url}", url=url) from exc
    if len(out) > max_bytes or inflater.unconsumed_tail:
        raise UnreadableFile(
            f"The sitemap is too large once decompressed (> {max_bytes} bytes): {url}", url=url
        )
    return out


@dataclass(frozen=True)
class ParsedSitemap:
    """What one sitemap document lists: page URLs, or (for an index) child sitemap URLs."""

    pages: list[str] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)


def parse_sitemap(body: bytes, url: str = "", *, max_bytes: int = 10 * MiB) -> ParsedSitemap:
    """Parse one sitemap document (XML urlset / sitemapindex, gzip, or plain text).

    Pure: no network. Raises :class:`UnreadableFile` for malformed, oversized or
    DOCTYPE/ENTITY-bearing XML.

    >>> parse_sitemap(b'<urlset><url><loc> https://a.example/x </loc></url></urlset>').pages
    ['https://a.example/x']
    """
    if body.startswith(_GZIP_MAGIC):
        body = _gunzip(body, max_bytes, url)
    if len(body) > max_bytes:
        raise UnreadableFile(f"The sitemap is too large (> {max_bytes} bytes): {url}", url=url)
    head = body.lstrip()[:1]
    if head != b"<":
        return _parse_text(body, url)
    if _DECLARATION_RE.search(body):
        raise UnreadableFile(
            f"Refused sitemap with a DOCTYPE or ENTITY declaration: {url}",
            url=url,
            hint="sitemaps never need DTDs; this one may be hostile",
        )
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError as exc:
        raise UnreadableFile(f"Malformed sitemap XML ({exc}): {url}", url=url) from exc
    kind = _local(root.tag)
    if kind not in ("urlset", "sitemapindex"):
        raise UnreadableFile(f"Not a sitemap (root element <{kind}>): {url}", url=url)
    entry = "url" if kind == "urlset" else "sitemap"
    locs: list[str] = []
    for child in root:
        if _local(child.tag) != entry:
            continue
        for node in child:
            if _local(node.tag) == "loc" and node.text and node.text.strip():
                locs.append(node.text.strip())
                break
    return ParsedSitemap(pages=locs) if kind == "urlset" else ParsedSitemap(sitemaps=locs)


def _parse_text(body: bytes, url: str) -> ParsedSitemap:
    text = decode_text(body, None, url)
    pages = [line.strip() for line in text.splitlines() if line.strip()]
    return ParsedSitemap(pages=[p for p in pages if p.lower().startswith(("http://", "https://"))])


def _is_http(link: str) -> bool:
    return link.lower().startswith(("http://", "https://"))


def fetch_sitemap(
    url: str,
    *,
    allow_local: bool = False,
    limiter: FetchLimiter | None = None,
    client: httpx.Client | None = None,
    timeout_s: float = 30,
    max_bytes: int = 10 * MiB,
    max_urls: int = 5000,
    max_depth: int = 3,
    max_sitemaps: int = 50,
) -> list[str]:
    """The page URLs of the sitemap at ``url``, in document order, deduplicated.

    Indexes are followed depth first up to ``max_depth`` levels below ``url`` and
    ``max_sitemaps`` documents in all; collection stops at ``max_urls``. Only http(s) links
    are kept (each page is SSRF-checked again when fetched). A failing *child* sitemap is
    logged and skipped so one broken file does not sink a whole site; a failing root raises
    (see :mod:`knowbase.pipeline.sources.url` for the error mapping).

    >>> fetch_sitemap("https://example.com/sitemap.xml")  # doctest: +SKIP
    ['https://example.com/', 'https://example.com/about']
    """
    pages: list[str] = []
    seen_pages: set[str] = set()
    seen_sitemaps: set[str] = set()
    fetched = 0

    def visit(sitemap_url: str, depth: int) -> None:
        nonlocal fetched
        fetched += 1
        raw = fetch_raw(
            sitemap_url,
            accept=SITEMAP_TYPES,
            allow_local=allow_local,
            limiter=limiter,
            client=client,
            timeout_s=timeout_s,
            max_bytes=max_bytes,
        )
        seen_sitemaps.add(raw.final_url)
        parsed = parse_sitemap(raw.body, raw.final_url, max_bytes=max_bytes)
        for page in parsed.pages:
            if len(pages) >= max_urls:
                return
            if _is_http(page) and page not in seen_pages:
                seen_pages.add(page)
                pages.append(page)
        for child in parsed.sitemaps:
            if len(pages) >= max_urls or fetched >= max_sitemaps:
                return
            if depth >= max_depth or not _is_http(child) or child in seen_sitemaps:
                continue
            seen_sitemaps.add(child)
            try:
                visit(child, depth + 1)
            except KnowbaseError as exc:
                log.warning("skipping sitemap %s: %s", child, exc)

    visit(url, 0)
    return pages
