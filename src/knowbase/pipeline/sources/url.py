"""Fetching a web page as Markdown (§4.1 "URL").

The origin fetched through a hosted reader service; we fetch directly with httpx and convert
with trafilatura (main content only), so nothing leaves the machine but the GET itself.

A fetch: SSRF check → limiter slot (the timeout starts here) → GET, following redirects by hand
so every hop passes the SSRF check again → content-type and size checks while streaming →
HTML to Markdown. Errors, mapped once here:

- :class:`InvalidUrl` — bad URL, refused address (first URL or any hop), too many redirects;
- :class:`OriginMissing` — HTTP 404 / 410;
- :class:`Unavailable` — timeout, connection failure, DNS failure, HTTP 429 / 5xx (transient);
- :class:`UnreadableFile` — other 4xx, refused content type, body over ``max_bytes``,
  undecodable body;
- :class:`EmptyContent` — the page has no text.
"""

from __future__ import annotations

import contextlib
import html as html_lib
import re
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import httpx

from knowbase.errors import EmptyContent, InvalidUrl, OriginMissing, Unavailable, UnreadableFile
from knowbase.pipeline.sources.ratelimit import FetchLimiter, default_limiter
from knowbase.pipeline.sources.ssrf import IPAddress, VettedUrl, vet_url

MiB = 1024 * 1024
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown"})
PAGE_TYPES = HTML_TYPES | TEXT_TYPES
USER_AGENT = "knowbase/0.1 (+https://github.com/knowbase; local knowledge base)"
_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
_TITLE_RE = re.compile(rb"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)


@dataclass
class FetchedPage:
    """A fetched page: the URL asked for, where it ended after redirects, and its Markdown."""

    url: str
    final_url: str
    title: str | None
    markdown: str
    content_type: str
    etag: str | None = None
    last_modified: str | None = None
    not_modified: bool = False  # a 304 to a conditional GET: no body, keep the snapshot


@dataclass(frozen=True)
class RawResponse:
    """The body of a successful GET, before conversion (shared with the sitemap fetcher)."""

    url: str
    final_url: str
    content_type: str  # media type only, lower-cased ("" when the server sent none)
    charset: str | None
    body: bytes
    etag: str | None = None
    last_modified: str | None = None
    not_modified: bool = False


def _media_type(header: str | None) -> tuple[str, str | None]:
    if not header:
        return "", None
    parts = [p.strip() for p in header.split(";")]
    charset = None
    for param in parts[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return parts[0].lower(), charset


def _raise_for_status(response: httpx.Response, url: str) -> None:
    code = response.status_code
    if code < 400:
        if code >= 300:
            raise UnreadableFile(f"Unexpected HTTP {code} from {url}", url=url, status=code)
        return
    if code in (404, 410):
        raise OriginMissing(f"The page is gone (HTTP {code}): {url}", url=url, status=code)
    if code == 429 or code >= 500:
        raise Unavailable(
            f"The server answered HTTP {code}: {url}",
            hint="try again later",
            url=url,
            status=code,
        )
    raise UnreadableFile(f"The server refused the page (HTTP {code}): {url}", url=url, status=code)


def _read_capped(response: httpx.Response, url: str, max_bytes: int, deadline: float) -> bytes:
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise UnreadableFile(
            f"The page is too large ({declared} bytes > {max_bytes}): {url}",
            url=url,
            max_bytes=max_bytes,
        )
    chunks: list[bytes] = []
    total = 0
    for chunk in response.iter_bytes():
        total += len(chunk)
        if total > max_bytes:
            raise UnreadableFile(
                f"The page is too large (more than {max_bytes} bytes): {url}",
                url=url,
                max_bytes=max_bytes,
            )
        # httpx's timeouts are per read; a server trickling bytes needs a total deadline too.
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("total deadline exceeded")
        chunks.append(chunk)
    return b"".join(chunks)


def fetch_raw(
    url: str,
    *,
    accept: Collection[str],
    allow_local: bool = False,
    limiter: FetchLimiter | None = None,
    client: httpx.Client | None = None,
    timeout_s: float = 30,
    max_bytes: int = 10 * MiB,
    max_redirects: int = 5,
    validators: Mapping[str, str] | None = None,
) -> RawResponse:
    """GET ``url`` under the SSRF guard and the limiter; refuse media types not in ``accept``.

    One limiter slot covers the whole fetch, redirects included. A response without a
    ``Content-Type`` is accepted (the caller sniffs it). ``validators`` (``etag``,
    ``last_modified`` from an earlier response) make it a conditional GET: a 304 comes back as
    ``not_modified`` with an empty body. Errors as in the module docstring.
    """
    start = vet_url(url, allow_local=allow_local)
    start_url = start.url
    limiter = limiter or default_limiter()
    own_client = client is None
    http = client or httpx.Client(headers={"User-Agent": USER_AGENT})
    try:
        with limiter.slot():
            deadline = time.monotonic() + timeout_s
            return _follow(
                http,
                start,
                accept,
                allow_local,
                deadline,
                timeout_s,
                max_bytes,
                max_redirects,
                _conditional_headers(validators),
            )
    except httpx.TimeoutException as exc:
        raise Unavailable(
            f"Fetching {start_url} timed out after {timeout_s:g} s",
            hint="try again later",
            url=start_url,
        ) from exc
    except httpx.DecodingError as exc:
        raise UnreadableFile(f"Cannot decode the response of {start_url}: {exc}") from exc
    except httpx.HTTPError as exc:
        raise Unavailable(f"Cannot fetch {start_url}: {exc}", url=start_url) from exc
    finally:
        if own_client:
            http.close()


def _conditional_headers(validators: Mapping[str, str] | None) -> dict[str, str]:
    headers = {}
    if validators and validators.get("etag"):
        headers["If-None-Match"] = validators["etag"]
    if validators and validators.get("last_modified"):
        headers["If-Modified-Since"] = validators["last_modified"]
    return headers


def _pinned_get(
    stack: contextlib.ExitStack,
    http: httpx.Client,
    target: VettedUrl,
    timeout: httpx.Timeout,
    extra_headers: Mapping[str, str] | None = None,
) -> httpx.Response:
    """GET ``target`` on its vetted addresses in turn (like ``socket.create_connection``).

    The Host header and TLS SNI carry the name, so virtual hosts and certificate checks work.
    """
    for index, address in enumerate(target.addresses):
        try:
            return stack.enter_context(
                _pinned_stream(http, target.url, address, timeout, extra_headers)
            )
        except httpx.ConnectError:
            if index == len(target.addresses) - 1:
                raise
    raise AssertionError("vet_url never returns an empty address list")


def _pinned_stream(
    http: httpx.Client,
    url: str,
    address: IPAddress,
    timeout: httpx.Timeout,
    extra_headers: Mapping[str, str] | None = None,
) -> contextlib.AbstractContextManager[httpx.Response]:
    logical = httpx.URL(url)
    extensions = (
        {"sni_hostname": logical.raw_host.decode("ascii")} if logical.scheme == "https" else None
    )
    return http.stream(
        "GET",
        logical.copy_with(host=str(address)),
        headers={**(extra_headers or {}), "Host": logical.netloc.decode("ascii")},
        timeout=timeout,
        follow_redirects=False,
        extensions=extensions,
    )


def _follow(
    http: httpx.Client,
    start: VettedUrl,
    accept: Collection[str],
    allow_local: bool,
    deadline: float,
    timeout_s: float,
    max_bytes: int,
    max_redirects: int,
    extra_headers: Mapping[str, str] | None = None,
) -> RawResponse:
    start_url = start.url
    target = start
    current = start_url
    seen = {current}
    for _hop in range(max_redirects + 1):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise httpx.ReadTimeout("total deadline exceeded")
        timeout = httpx.Timeout(min(timeout_s, remaining))
        with contextlib.ExitStack() as stack:
            response = _pinned_get(stack, http, target, timeout, extra_headers)
            location = response.headers.get("location")
            if response.status_code in _REDIRECT_CODES and location:
                target = vet_url(str(httpx.URL(current).join(location)), allow_local=allow_local)
                current = target.url
                if current in seen:
                    raise InvalidUrl(f"Redirect loop at {current}", url=start_url, hop=current)
                seen.add(current)
                continue
            etag = response.headers.get("etag")
            modified = response.headers.get("last-modified")
            if response.status_code == 304 and extra_headers:
                return RawResponse(start_url, current, "", None, b"", etag, modified, True)
            _raise_for_status(response, current)
            media, charset = _media_type(response.headers.get("content-type"))
            if media and media not in accept:
                raise UnreadableFile(
                    f"Unsupported content type {media!r} at {current}",
                    url=current,
                    content_type=media,
                    hint="knowbase fetches web pages (HTML, plain text, Markdown)",
                )
            body = _read_capped(response, current, max_bytes, deadline)
            return RawResponse(start_url, current, media, charset, body, etag, modified)
    raise InvalidUrl(
        f"Too many redirects (more than {max_redirects}) from {start_url}",
        url=start_url,
        max_redirects=max_redirects,
    )


def decode_text(body: bytes, charset: str | None, url: str) -> str:
    """Decode a text body: the declared charset, else UTF-8, else charset detection."""
    if charset:
        try:
            return body.decode(charset)
        except (LookupError, UnicodeDecodeError):
            pass  # a wrong declaration is common; fall through to detection
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(body).best()
    if best is None:
        raise UnreadableFile(f"Cannot decode the text of {url}", url=url)
    return str(best)


def _html_title(body: bytes, extracted: str | None) -> str | None:
    if extracted and extracted.strip():
        return extracted.strip()
    match = _TITLE_RE.search(body)
    if not match:
        return None
    text = match.group(1).decode("utf-8", errors="replace")
    title = " ".join(html_lib.unescape(text).split())
    return title or None


def _html_fallback(html: str) -> str:
    """Markdown via markitdown when trafilatura finds no main content (short or odd pages)."""
    import io

    from markitdown import MarkItDown, StreamInfo

    try:
        result = MarkItDown().convert_stream(
            io.BytesIO(html.encode("utf-8")),
            stream_info=StreamInfo(mimetype="text/html", extension=".html", charset="utf-8"),
        )
    except Exception:  # noqa: BLE001 - a fallback converter must never mask the real outcome
        return ""
    return result.markdown or ""


def html_to_markdown(body: bytes, charset: str | None, url: str) -> tuple[str | None, str]:
    """(title, markdown) of an HTML page: trafilatura's main content, markitdown as fallback."""
    import trafilatura

    html = decode_text(body, charset, url)
    markdown = trafilatura.extract(
        html,
        url=url,
        output_format="markdown",
        include_links=True,
        include_tables=True,
        include_comments=False,
    )
    if not markdown or not markdown.strip():
        markdown = _html_fallback(html)
    metadata = trafilatura.extract_metadata(html)
    title = _html_title(body, metadata.title if metadata else None)
    return title, markdown or ""


def _looks_like_html(body: bytes) -> bool:
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def fetch_page(
    url: str,
    *,
    allow_local: bool = False,
    limiter: FetchLimiter | None = None,
    client: httpx.Client | None = None,
    timeout_s: float = 30,
    max_bytes: int = 10 * MiB,
    max_redirects: int = 5,
    validators: Mapping[str, str] | None = None,
) -> FetchedPage:
    """Fetch ``url`` and convert it to Markdown; title and markdown are trimmed.

    ``limiter`` defaults to the process-wide :func:`default_limiter`; ``client`` to a fresh
    httpx client (closed afterwards). Errors as in the module docstring.

    >>> page = fetch_page("https://example.com/guide")  # doctest: +SKIP
    >>> page.title, page.markdown[:12]
    ('Getting Started', '# Getting St')
    """
    raw = fetch_raw(
        url,
        accept=PAGE_TYPES,
        allow_local=allow_local,
        limiter=limiter,
        client=client,
        timeout_s=timeout_s,
        max_bytes=max_bytes,
        max_redirects=max_redirects,
        validators=validators,
    )
    if raw.not_modified:
        return FetchedPage(
            raw.url, raw.final_url, None, "", "", raw.etag, raw.last_modified, not_modified=True
        )
    media = raw.content_type or ("text/html" if _looks_like_html(raw.body) else "text/plain")
    if media in HTML_TYPES:
        title, markdown = html_to_markdown(raw.body, raw.charset, raw.final_url)
    else:
        title, markdown = None, decode_text(raw.body, raw.charset, raw.final_url)
    markdown = markdown.strip()
    if not markdown:
        raise EmptyContent(f"The page has no text: {raw.final_url}", url=raw.final_url)
    return FetchedPage(
        url=raw.url,
        final_url=raw.final_url,
        title=title.strip() if title else None,
        markdown=markdown,
        content_type=media,
        etag=raw.etag,
        last_modified=raw.last_modified,
    )
