"""Sitemaps: urlset, nested indexes, gzip, text sitemaps, bounds and hostile XML."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import pytest
from test_sources_url import LoopbackServer, loopback_server

from knowbase.errors import InvalidUrl, OriginMissing, UnreadableFile
from knowbase.pipeline.sources.ratelimit import FetchLimiter
from knowbase.pipeline.sources.sitemap import fetch_sitemap, parse_sitemap


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with loopback_server() as srv:
        yield srv


@pytest.fixture
def limiter() -> FetchLimiter:
    return FetchLimiter(per_minute=10_000)


def sitemap(
    server: LoopbackServer, path: str, limiter: FetchLimiter, **kwargs: object
) -> list[str]:
    return fetch_sitemap(server.url(path), allow_local=True, limiter=limiter, **kwargs)  # type: ignore[arg-type]


def test_urlset_in_order_deduplicated_http_only(
    server: LoopbackServer, limiter: FetchLimiter
) -> None:
    assert sitemap(server, "/sitemap.xml", limiter) == [
        server.url("/article"),
        server.url("/plain"),
    ]


def test_index_is_followed_recursively_skipping_broken_children(
    server: LoopbackServer, limiter: FetchLimiter
) -> None:
    # index → sitemap.xml, missing.xml (404, skipped), nested-index → sitemap2.xml.gz and,
    # looping back, index.xml (already seen: not fetched twice).
    before = len(server.hits)
    assert sitemap(server, "/index.xml", limiter) == [
        server.url("/article"),
        server.url("/plain"),
        server.url("/md"),
    ]
    fetched = server.hits[before:]
    assert fetched.count("/index.xml") == 1
    assert "/missing.xml" in fetched


def test_bounds_on_depth_count_and_urls(server: LoopbackServer, limiter: FetchLimiter) -> None:
    # Depth 1: the nested index is read but its children are not.
    assert sitemap(server, "/index.xml", limiter, max_depth=1) == [
        server.url("/article"),
        server.url("/plain"),
    ]
    assert sitemap(server, "/index.xml", limiter, max_urls=1) == [server.url("/article")]
    assert sitemap(server, "/index.xml", limiter, max_sitemaps=1) == []


def test_text_sitemap(server: LoopbackServer, limiter: FetchLimiter) -> None:
    assert sitemap(server, "/sitemap.txt", limiter) == [server.url("/a"), server.url("/b")]


def test_root_failures_raise(server: LoopbackServer, limiter: FetchLimiter) -> None:
    with pytest.raises(OriginMissing):
        sitemap(server, "/missing.xml", limiter)
    with pytest.raises(UnreadableFile, match="DOCTYPE"):
        sitemap(server, "/bomb.xml", limiter)
    with pytest.raises(UnreadableFile, match="Not a sitemap"):
        sitemap(server, "/not-sitemap.xml", limiter)
    with pytest.raises(UnreadableFile, match="content type"):
        sitemap(server, "/sitemap.html", limiter)
    with pytest.raises(InvalidUrl):
        fetch_sitemap(server.url("/sitemap.xml"), limiter=limiter)  # loopback refused


def test_parse_refuses_entity_declarations_without_doctype() -> None:
    with pytest.raises(UnreadableFile):
        parse_sitemap(b'<?xml version="1.0"?><!ENTITY x "y"><urlset/>')


def test_parse_malformed_xml() -> None:
    with pytest.raises(UnreadableFile, match="Malformed"):
        parse_sitemap(b"<urlset><url><loc>x</loc></url>")


def test_parse_without_namespace_and_index() -> None:
    parsed = parse_sitemap(
        b"<sitemapindex><sitemap><loc>https://a.example/s1.xml</loc></sitemap>"
        b"<sitemap><lastmod>2026</lastmod></sitemap></sitemapindex>"
    )
    assert (parsed.pages, parsed.sitemaps) == ([], ["https://a.example/s1.xml"])


def test_gzip_bomb_stops_at_the_cap() -> None:
    body = gzip.compress(b"<urlset>" + b" " * 5_000_000 + b"</urlset>")
    assert len(body) < 20_000
    with pytest.raises(UnreadableFile, match="decompressed"):
        parse_sitemap(body, max_bytes=1_000_000)
    assert parse_sitemap(body, max_bytes=6_000_000).pages == []


def test_oversized_plain_body_is_refused() -> None:
    with pytest.raises(UnreadableFile, match="too large"):
        parse_sitemap(b"<urlset>" + b" " * 2000 + b"</urlset>", max_bytes=1000)
