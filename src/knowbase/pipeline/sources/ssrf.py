"""The SSRF guard for URL items: which URLs knowbase may fetch (§4.1 "URL").

Every URL we fetch, and every redirect hop, passes :func:`check_url`: http(s) only, and its host
must resolve to public addresses. A host that resolves to *any* refused address is refused, so
one public record next to a private one does not get through.

Policy per address (IPv4 and IPv6; IPv4-mapped, 6to4, Teredo and NAT64 addresses are judged by
the IPv4 address they carry):

- always refused: multicast, unspecified (``0.0.0.0``, ``::``), reserved, and the cloud
  metadata endpoints (``169.254.169.254``, ``fd00:ec2::254``);
- refused unless ``allow_local``: loopback, private (RFC 1918, ULA, CGNAT…), link-local, and
  anything else that is not globally routable.

:func:`vet_url` also returns the vetted addresses; the fetcher connects to them (Host header and
TLS SNI keep the name), so a DNS record that changes between check and connect (DNS
rebinding) cannot send the request elsewhere.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

import httpx

from knowbase.errors import InvalidUrl, Unavailable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_ALLOWED_SCHEMES = ("http", "https")
_MAX_URL_CHARS = 8192
_METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# After IDNA encoding a host is LDH labels (underscores occur in the wild) or an IP literal.
_HOST_RE = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f:.]+")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client address; the server half is public by design
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal_reason(ip: IPAddress, *, allow_local: bool) -> str | None:
    """Why ``ip`` may not be fetched, or ``None`` when it may.

    >>> refusal_reason(ipaddress.ip_address("10.0.0.1"), allow_local=False)
    'private'
    """
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            return refusal_reason(inner, allow_local=allow_local)
    if ip in _METADATA_ADDRESSES:
        return "cloud metadata endpoint"
    if ip.is_multicast:
        return "multicast"
    if ip.is_unspecified:
        return "unspecified"
    # Loopback before reserved: ::1 also lies in the reserved ::/8.
    if ip.is_loopback:
        return None if allow_local else "loopback"
    if ip.is_link_local:
        return None if allow_local else "link-local"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return None if allow_local else "private"
    if not ip.is_global:
        return None if allow_local else "not globally routable"
    return None


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Unavailable(
            f"Cannot resolve host {host!r}: {exc}",
            hint="check the URL and the network connection",
            host=host,
        ) from exc
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        # Strip an IPv6 zone id ("fe80::1%eth0") before parsing.
        addresses.append(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
    return addresses


def parse_url(url: str) -> httpx.URL:
    """``url`` as an :class:`httpx.URL` if it is a well-formed http(s) URL with a host.

    Raises :class:`InvalidUrl` otherwise. Does no network I/O.
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidUrl("Invalid knowledge url: empty", url=url)
    text = url.strip()
    if len(text) > _MAX_URL_CHARS:
        raise InvalidUrl(f"Invalid knowledge url: longer than {_MAX_URL_CHARS} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise InvalidUrl("Invalid knowledge url: contains control characters", url=text)
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise InvalidUrl(f"Invalid knowledge url: {exc}", url=text) from exc
    if parsed.scheme not in _ALLOWED_SCHEMES:
        raise InvalidUrl(
            f"Invalid knowledge url: only http and https are supported, not {parsed.scheme!r}",
            url=text,
        )
    if not parsed.host:
        raise InvalidUrl("Invalid knowledge url: no host", url=text)
    raw_host = parsed.raw_host.decode("ascii", errors="replace")
    if not _HOST_RE.fullmatch(raw_host):
        raise InvalidUrl(f"Invalid knowledge url: bad host {parsed.host!r}", url=text)
    return parsed


@dataclass(frozen=True)
class VettedUrl:
    """A URL that passed the guard and the addresses to connect to (see :func:`vet_url`)."""

    url: str
    addresses: tuple[IPAddress, ...]


def vet_url(url: str, *, allow_local: bool) -> VettedUrl:
    """:func:`check_url`, also returning the vetted addresses the request may connect to.

    Connecting to those addresses (instead of letting the client resolve the name again) closes
    the DNS-rebinding gap between the check and the connect.
    """
    parsed = parse_url(url)
    host = parsed.raw_host.decode("ascii")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    # A trailing dot names the same host (the DNS root): "localhost." is localhost, and the
    # resolver here does not know it with the dot, which let it through as "unresolvable".
    name = host.rstrip(".") or host
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(name)]
    except ValueError:
        try:
            addresses = _resolve(name, port)
        except Unavailable:
            # RFC 6761 §6.3: "localhost" and every name under it is loopback even where this
            # resolver does not list it (browsers resolve "foo.localhost" so).
            if name.lower() != "localhost" and not name.lower().endswith(".localhost"):
                raise
            addresses = [ipaddress.ip_address("127.0.0.1")]
    if not addresses:
        raise Unavailable(f"Host {host!r} has no addresses", host=host)
    for address in addresses:
        reason = refusal_reason(address, allow_local=allow_local)
        if reason is not None:
            hint = (
                None
                if allow_local or reason in _ALWAYS
                else (
                    "to fetch local or private addresses, allow them for this base: "
                    "kb base set BASE --allow-local-urls, the console's base Settings, or "
                    "PATCH /bases/BASE allow_local_urls"
                )
            )
            raise InvalidUrl(
                f"Refused url {str(parsed)!r}: {host} resolves to {address} ({reason})",
                hint=hint,
                url=str(parsed),
                address=str(address),
                reason=reason,
            )
    return VettedUrl(str(parsed), tuple(dict.fromkeys(addresses)))


def check_url(url: str, *, allow_local: bool) -> str:
    """Validate ``url`` and the addresses its host resolves to; return the normalised URL.

    Normalised as :class:`httpx.URL` writes it: scheme and host lower-cased, IDNA host,
    percent-encoded path, default port dropped. Raises :class:`InvalidUrl` for a bad URL or a
    refused address and :class:`Unavailable` when the host cannot be resolved.

    >>> check_url("HTTP://127.0.0.1:8080/a b", allow_local=True)
    'http://127.0.0.1:8080/a%20b'
    """
    return vet_url(url, allow_local=allow_local).url


_ALWAYS = frozenset({"cloud metadata endpoint", "multicast", "unspecified", "reserved"})
