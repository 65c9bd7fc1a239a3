"""Which address an upstream URL's host really names, and whether the proxy may call it.

Resolvers accept more notations for an IP address than the dotted quad: ``2852039166``,
``0xa9fea9fe``, ``0251.0376.0251.0376`` and ``169.254.43518`` all reach 169.254.169.254
(``inet_aton``'s forms), and IPv6 can wrap an IPv4 address (``::ffff:…``, SIIT, NAT64, 6to4);
a non-ASCII host is IDNA-mapped (``169。254。169。254``, full-width dots and letters) before
it is connected to.
A check on the host's text is bypassed by any of them, so the host is first normalized to
the one address it names, then checked against the link-local, unspecified and multicast
ranges and the known cloud metadata endpoints.
"""

from __future__ import annotations

import ipaddress
import unicodedata
from urllib.parse import unquote

__all__ = ["METADATA_ADDRESSES", "METADATA_HOSTS", "blocked_reason", "host_address"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)
"""Names of cloud instance-metadata services (GCP, AWS, Tencent, Equinix Metal)."""

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(text)
    for text in (
        "169.254.169.254",  # AWS, GCP, Azure, Oracle, OpenStack, DigitalOcean, Hetzner, …
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.0.23",  # Tencent Cloud
        "100.100.100.200",  # Alibaba Cloud (in the shared CGNAT range, not link-local)
        "192.0.0.192",  # Oracle Cloud Classic
        "fd00:ec2::254",  # AWS IMDS over IPv6 (a unique-local address)
        "fd00:ec2::23",  # AWS ECS / time sync over IPv6
    )
)
"""Cloud metadata endpoints outside the link-local ranges, plus the well-known link-local ones."""

_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # "0.x.y.z": connects to the local host on Linux
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")
_IDEOGRAPHIC_STOP = "\u3002"
"""What IDNA maps to '.' besides what NFKC already does (full-width and half-width stops)."""
_HEX_DIGITS = frozenset("0123456789abcdef")


def _ipv4_part(text: str) -> int | None:
    """One part of an ``inet_aton`` address: decimal, ``0x`` hex or ``0`` octal; None if not a number."""
    if text[:2] in ("0x", "0X"):
        digits = text[2:].lower()
        return int(digits, 16) if digits and set(digits) <= _HEX_DIGITS else (0 if not digits else None)
    if not text.isascii() or not text.isdigit():
        return None
    if len(text) > 1 and text[0] == "0":
        return int(text, 8) if set(text) <= set("01234567") else None
    return int(text)


def _ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address of a host written in any of ``inet_aton``'s forms (1 to 4 parts).

    Raises ValueError for a host that ends in a number but is no valid address: resolvers
    disagree about such names, so none of them is let through."""
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # a trailing dot: "169.254.169.254."
    if not parts or _ipv4_part(parts[-1]) is None:
        return None  # an ordinary host name
    numbers = [_ipv4_part(part) for part in parts]
    if len(parts) > 4 or any(number is None for number in numbers):
        raise ValueError(f"upstream host {host!r} is neither a name nor a valid address")
    *head, last = [number for number in numbers if number is not None]
    if any(number > 255 for number in head) or last >= 256 ** (5 - len(parts)):
        raise ValueError(f"upstream host {host!r} is neither a name nor a valid address")
    value = last
    for position, number in enumerate(head):
        value += number << (8 * (3 - position))
    return ipaddress.IPv4Address(value)


def _host_text(host: str) -> str:
    """The host as the HTTP client will resolve it: unquoted, lower-case, IDNA's mapping of
    dots and compatibility characters applied."""
    host = unquote(host).strip()
    if not host.isascii():
        host = unicodedata.normalize("NFKC", host).replace(_IDEOGRAPHIC_STOP, ".")
    return host.lower()


def host_address(host: str) -> IPAddress | None:
    """The address a URL's host names (None for a DNS name), IPv4 inside IPv6 unwrapped."""
    host = _host_text(host)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host:
        try:
            address: IPAddress = ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"upstream host {host!r} is not a valid IPv6 address") from None
    else:
        found = _ipv4(host)
        if found is None:
            return None
        address = found
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and (address in _NAT64 or address in _SIIT):
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is None and int(address) >> 32 == 0 and int(address) > 1:
            embedded = ipaddress.IPv4Address(int(address))  # IPv4-compatible "::a.b.c.d"
        if embedded is not None:
            return embedded
        if address.scope_id is not None:
            address = ipaddress.IPv6Address(str(address).split("%", 1)[0])
    return address


def blocked_reason(host: str) -> str | None:
    """Why the proxy must not call ``host`` (a metadata endpoint, link-local…), or None."""
    name = _host_text(host).rstrip(".")
    if name in METADATA_HOSTS:
        return f"upstream host {host!r} is a cloud metadata endpoint"
    address = host_address(host)
    if address is None:
        return None
    if address in METADATA_ADDRESSES:
        return f"upstream address {host} ({address}) is a cloud metadata endpoint"
    if (
        address.is_link_local
        or address.is_multicast
        or address.is_unspecified
        or (isinstance(address, ipaddress.IPv4Address) and address in _THIS_NETWORK)
    ):
        return f"upstream address {host} ({address}) is link-local, multicast or unspecified"
    return None
