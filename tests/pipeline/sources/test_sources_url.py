"""fetch_page and the SSRF guard against a real loopback HTTP server.

The server helpers here are also imported by the sitemap tests.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARTICLE = b"""<!doctype html><html><head><meta charset="utf-8">
<title>Getting Started - Example Docs</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About us</a> | <a href="/blog">Blog</a></nav>
<article><h1>Getting Started</h1>
<p>Knowbase turns folders, web pages and notes into a searchable knowledge base. This first
paragraph is long enough for the extractor to treat it as the main content of the page.</p>
<p>Read the <a href="https://example.com/guide">full guide</a> for the details about chunking,
embedding and hybrid search with citations.</p>
<table><tr><th>Mode</th><th>Speed</th></tr><tr><td>BM25</td><td>fast</td></tr></table>
</article>
<footer><p>Copyright 2026 Footer Corporation, all rights reserved.</p></footer>
</body></html>"""


@dataclass
class Route:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    stream: Callable[[], Iterator[bytes]] | None = None
    delay: float = 0.0


@dataclass
class LoopbackServer:
    base: str
    routes: dict[str, Route]
    hits: list[str]
    stop: threading.Event

    def url(self, path: str) -> str:
        return self.base + path


def _handler(server_state: dict) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:  # noqa: N802
            state = server_state
            state["hits"].append(self.path)
            route = state["routes"].get(self.path)
            if self.path == "/echo-host":
                host = (self.headers.get("Host") or "").encode()
                route = Route(200, {"Content-Type": "text/plain"}, b"host=" + host)
            if route is None:
                route = Route(404, {"Content-Type": "text/plain"}, b"not found")
            if route.delay and state["stop"].wait(route.delay):
                return
            self.send_response(route.status)
            for key, value in route.headers.items():
                self.send_header(key, value)
            if route.stream is not None:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in route.stream():
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                return
            if "Content-Length" not in route.headers:
                self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            with suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(route.body)

    return Handler


def _huge() -> Iterator[bytes]:
    for _ in range(64):
        yield b"x" * 65536


def default_routes(base: str) -> dict[str, Route]:
    html = {"Content-Type": "text/html; charset=utf-8"}
    xml = {"Content-Type": "application/xml"}
    urlset = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<url><loc>{base}/article</loc><lastmod>2026-01-01</lastmod></url>"
        f"<url><loc> {base}/plain </loc></url>"
        f"<url><loc>{base}/article</loc></url>"
        "<url><loc>ftp://example.com/file</loc></url>"
        "</urlset>"
    ).encode()
    urlset2 = (
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<url><loc>{base}/md</loc></url><url><loc>{base}/plain</loc></url></urlset>"
    ).encode()
    index = (
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<sitemap><loc>{base}/sitemap.xml</loc></sitemap>"
        f"<sitemap><loc>{base}/missing.xml</loc></sitemap>"
        f"<sitemap><loc>{base}/nested-index.xml</loc></sitemap>"
        "</sitemapindex>"
    ).encode()
    nested = (
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<sitemap><loc>{base}/sitemap2.xml.gz</loc></sitemap>"
        f"<sitemap><loc>{base}/index.xml</loc></sitemap>"
        "</sitemapindex>"
    ).encode()
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;">]><urlset><url><loc>&lol2;</loc></url></urlset>'
    )
    return {
        "/article": Route(200, html, ARTICLE),
        "/plain": Route(200, {"Content-Type": "text/plain"}, b"  Plain text page.\nLine two.\n "),
        "/md": Route(200, {"Content-Type": "text/markdown"}, b"# Markdown page\n\nbody\n"),
        "/latin1": Route(
            200, {"Content-Type": "text/plain; charset=iso-8859-1"}, "café".encode("latin-1")
        ),
        "/no-type": Route(200, {}, b"<html><body><p>Untyped but clearly HTML.</p></body></html>"),
        "/footer-only": Route(
            200, html, b"<html><body><footer><p>Contact us at the office</p></footer></body></html>"
        ),
        "/empty": Route(
            200, html, b"<html><head><title>Nothing</title></head><body> </body></html>"
        ),
        "/blank": Route(200, {"Content-Type": "text/plain"}, b" \n\t "),
        "/image": Route(200, {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n"),
        "/slow": Route(200, html, ARTICLE, delay=5.0),
        "/huge": Route(200, {"Content-Type": "text/plain"}, stream=_huge),
        "/huge-declared": Route(200, {"Content-Type": "text/plain", "Content-Length": "999999999"}),
        "/gone": Route(404, {"Content-Type": "text/html"}, b"<h1>404</h1>"),
        "/gone410": Route(410, {}, b""),
        "/error": Route(503, {}, b""),
        "/forbidden": Route(403, {}, b""),
        "/redirect-ok": Route(301, {"Location": "/article"}),
        "/redirect-metadata": Route(302, {"Location": "http://169.254.169.254/latest/meta-data/"}),
        "/redirect-ftp": Route(302, {"Location": "ftp://example.com/"}),
        "/cycle": Route(302, {"Location": "/cycle2"}),
        "/cycle2": Route(302, {"Location": "/cycle"}),
        **{f"/chain/{i}": Route(302, {"Location": f"/chain/{i + 1}"}) for i in range(10)},
        "/chain/10": Route(200, {"Content-Type": "text/plain"}, b"end of the chain"),
        "/sitemap.xml": Route(200, xml, urlset),
        "/sitemap2.xml.gz": Route(
            200, {"Content-Type": "application/gzip"}, gzip.compress(urlset2)
        ),
        "/index.xml": Route(200, xml, index),
        "/nested-index.xml": Route(200, {"Content-Type": "text/xml"}, nested),
        "/sitemap.txt": Route(
            200, {"Content-Type": "text/plain"}, f"{base}/a\n\n{base}/b\nnot a url\n".encode()
        ),
        "/bomb.xml": Route(200, xml, bomb),
        "/not-sitemap.xml": Route(200, xml, b"<rss><channel/></rss>"),
        "/sitemap.html": Route(200, html, ARTICLE),
    }


@contextmanager
def loopback_server() -> Iterator[LoopbackServer]:
    """Serve :func:`default_routes` on 127.0.0.1 (a free port) in a background thread."""
    state: dict = {"routes": {}, "hits": [], "stop": threading.Event()}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    state["routes"] = default_routes(base)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield LoopbackServer(base, state["routes"], state["hits"], state["stop"])
    finally:
        state["stop"].set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


# --- tests -----------------------------------------------------------------------------------

import ipaddress  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

from knowbase.errors import (  # noqa: E402
    EmptyContent,
    InvalidUrl,
    OriginMissing,
    Unavailable,
    UnreadableFile,
)
from knowbase.pipeline.sources.ratelimit import FetchLimiter  # noqa: E402
from knowbase.pipeline.sources.ssrf import check_url, refusal_reason  # noqa: E402
from knowbase.pipeline.sources.url import fetch_page  # noqa: E402


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with loopback_server() as srv:
        yield srv


@pytest.fixture
def limiter() -> FetchLimiter:
    # A private, generous limiter: the shared default allows only 10 fetches a minute.
    return FetchLimiter(concurrency=3, per_minute=10_000)


def fetch(server: LoopbackServer, path: str, limiter: FetchLimiter, **kwargs: object):
    return fetch_page(server.url(path), allow_local=True, limiter=limiter, **kwargs)  # type: ignore[arg-type]


def test_article_main_content_and_title(server: LoopbackServer, limiter: FetchLimiter) -> None:
    page = fetch(server, "/article", limiter)
    assert page.title == "Getting Started"
    assert page.content_type == "text/html"
    assert page.url == page.final_url == server.url("/article")
    assert page.markdown.startswith("# Getting Started")
    assert "[full guide](https://example.com/guide)" in page.markdown
    assert "| BM25 | fast |" in page.markdown
    assert "Footer Corporation" not in page.markdown
    assert "About us" not in page.markdown
    assert page.markdown == page.markdown.strip()


def test_plain_and_markdown_pages_are_kept_verbatim_but_trimmed(
    server: LoopbackServer, limiter: FetchLimiter
) -> None:
    plain = fetch(server, "/plain", limiter)
    assert (plain.markdown, plain.title, plain.content_type) == (
        "Plain text page.\nLine two.",
        None,
        "text/plain",
    )
    md = fetch(server, "/md", limiter)
    assert md.markdown == "# Markdown page\n\nbody"
    assert fetch(server, "/latin1", limiter).markdown == "café"


def test_missing_content_type_is_sniffed(server: LoopbackServer, limiter: FetchLimiter) -> None:
    page = fetch(server, "/no-type", limiter)
    assert page.content_type == "text/html"
    assert page.markdown == "Untyped but clearly HTML."


def test_markitdown_fallback_when_trafilatura_finds_nothing(
    server: LoopbackServer, limiter: FetchLimiter
) -> None:
    assert fetch(server, "/footer-only", limiter).markdown == "Contact us at the office"


def test_empty_page_is_empty_content(server: LoopbackServer, limiter: FetchLimiter) -> None:
    for path in ("/empty", "/blank"):
        with pytest.raises(EmptyContent):
            fetch(server, path, limiter)


def test_redirect_is_followed_and_reported(server: LoopbackServer, limiter: FetchLimiter) -> None:
    page = fetch(server, "/redirect-ok", limiter)
    assert page.url == server.url("/redirect-ok")
    assert page.final_url == server.url("/article")
    assert page.title == "Getting Started"


def test_redirect_to_metadata_endpoint_is_refused_even_with_allow_local(
    server: LoopbackServer, limiter: FetchLimiter
) -> None:
    with pytest.raises(InvalidUrl) as info:
        fetch(server, "/redirect-metadata", limiter)
    assert info.value.details["address"] == "169.254.169.254"


def test_redirect_to_another_protocol_is_refused(
    server: LoopbackServer, limiter: FetchLimiter
) -> None:
    with pytest.raises(InvalidUrl):
        fetch(server, "/redirect-ftp", limiter)


def test_redirect_chain_is_bounded(server: LoopbackServer, limiter: FetchLimiter) -> None:
    with pytest.raises(InvalidUrl, match="Too many redirects"):
        fetch(server, "/chain/0", limiter, max_redirects=5)
    assert fetch(server, "/chain/5", limiter, max_redirects=5).markdown == "end of the chain"


def test_redirect_loop_is_refused(server: LoopbackServer, limiter: FetchLimiter) -> None:
    with pytest.raises(InvalidUrl, match="loop"):
        fetch(server, "/cycle", limiter)


def test_loopback_is_refused_without_allow_local(
    server: LoopbackServer, limiter: FetchLimiter
) -> None:
    before = len(server.hits)
    with pytest.raises(InvalidUrl) as info:
        fetch_page(server.url("/article"), limiter=limiter)
    assert info.value.details["reason"] == "loopback"
    assert len(server.hits) == before  # refused before any request left


def test_non_page_content_type_is_refused(server: LoopbackServer, limiter: FetchLimiter) -> None:
    with pytest.raises(UnreadableFile, match="image/png"):
        fetch(server, "/image", limiter)


def test_status_codes_map_to_errors(server: LoopbackServer, limiter: FetchLimiter) -> None:
    with pytest.raises(OriginMissing):
        fetch(server, "/gone", limiter)
    with pytest.raises(OriginMissing):
        fetch(server, "/gone410", limiter)
    with pytest.raises(Unavailable):
        fetch(server, "/error", limiter)
    with pytest.raises(UnreadableFile):
        fetch(server, "/forbidden", limiter)


def test_huge_body_is_capped_while_streaming(server: LoopbackServer, limiter: FetchLimiter) -> None:
    with pytest.raises(UnreadableFile, match="too large"):
        fetch(server, "/huge", limiter, max_bytes=100_000)
    with pytest.raises(UnreadableFile, match="too large"):
        fetch(server, "/huge-declared", limiter, max_bytes=100_000)


def test_slow_response_times_out(server: LoopbackServer, limiter: FetchLimiter) -> None:
    started = time.monotonic()
    with pytest.raises(Unavailable, match="timed out"):
        fetch(server, "/slow", limiter, timeout_s=0.3)
    assert time.monotonic() - started < 3


def test_timeout_starts_only_when_the_slot_is_granted(
    server: LoopbackServer,
) -> None:
    # The fake clock makes the limiter "wait" 60 s for the window; a timeout that had started
    # while queueing would have expired long before the request.
    now = [0.0]
    fake = FetchLimiter(
        per_minute=1, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)
    )
    with fake.slot():
        pass
    page = fetch_page(server.url("/plain"), allow_local=True, limiter=fake, timeout_s=5)
    assert now[0] == pytest.approx(60.0)
    assert page.markdown.startswith("Plain text page.")


def test_connects_to_the_vetted_address_with_the_name_in_host(
    server: LoopbackServer, limiter: FetchLimiter
) -> None:
    # The request goes to the address the guard checked, the Host header keeps the name.
    port = server.base.rsplit(":", 1)[1]
    page = fetch_page(f"http://localhost:{port}/echo-host", allow_local=True, limiter=limiter)
    assert page.markdown == f"host=localhost:{port}"
    assert page.final_url == f"http://localhost:{port}/echo-host"


def test_connection_refused_is_unavailable(limiter: FetchLimiter) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(Unavailable):
        fetch_page(f"http://127.0.0.1:{port}/", allow_local=True, limiter=limiter, timeout_s=2)


# --- the SSRF guard on its own ---------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "",
        "   ",
        "http://",
        "http://a b/",
    ],
)
def test_check_url_refuses_bad_urls(url: str) -> None:
    with pytest.raises(InvalidUrl):
        check_url(url, allow_local=True)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://10.0.0.1/", "private"),
        ("http://192.168.1.20:8080/wiki", "private"),
        ("http://127.0.0.1/", "loopback"),
        ("http://localhost/", "loopback"),
        # A trailing dot is the same host (issue 37: "localhost." was accepted, then failed).
        ("http://localhost./", "loopback"),
        ("http://LOCALHOST.:8080/x", "loopback"),
        ("http://127.0.0.1./", "loopback"),
        ("http://wiki.localhost./", "loopback"),  # RFC 6761: all of *.localhost is loopback
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:10.0.0.1]/", "private"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[fc00::1]/", "private"),
        ("http://100.64.0.1/", "not globally routable"),
    ],
)
def test_local_addresses_need_allow_local(url: str, reason: str) -> None:
    with pytest.raises(InvalidUrl) as info:
        check_url(url, allow_local=False)
    assert info.value.details["reason"] == reason
    assert info.value.hint
    assert check_url(url, allow_local=True)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://[::ffff:169.254.169.254]/",
        "http://0.0.0.0/",
        "http://[::]/",
        "http://224.0.0.1/",
        "http://240.0.0.1/",
    ],
)
def test_some_addresses_are_always_refused(url: str) -> None:
    with pytest.raises(InvalidUrl):
        check_url(url, allow_local=True)


def test_public_address_passes_and_url_is_normalised() -> None:
    assert check_url("HTTP://93.184.215.14/a b?q=1#frag", allow_local=False) == (
        "http://93.184.215.14/a%20b?q=1#frag"
    )
    assert refusal_reason(ipaddress.ip_address("8.8.8.8"), allow_local=False) is None
    assert refusal_reason(ipaddress.ip_address("2002:0a00:0001::1"), allow_local=False) == "private"


def test_unresolvable_host_is_unavailable() -> None:
    with pytest.raises(Unavailable):
        check_url("http://nothing.invalid/", allow_local=False)
