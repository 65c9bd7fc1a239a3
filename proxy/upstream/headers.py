"""Which of the upstream's response headers reach the client, whatever the format.

The edge copies them onto a reply it relays whole; the streaming client onto a guarded stream's
first event. Both sit above this module, so the rule is written once, here.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["HOP_BY_HOP", "reply_headers"]

# Hop-by-hop headers (RFC 9110 §7.6.1): they describe one connection, so cross no proxy either way.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Never copied upstream → client: hop-by-hop, framing the ASGI server recomputes, and cookies:
# the provider sets them on the operator's account, which every tenant's client would share.
_NOT_RETURNED = frozenset(
    name.encode() for name in HOP_BY_HOP | {"content-length", "date", "server", "set-cookie", "set-cookie2"}
)


def reply_headers(
    raw: Iterable[tuple[bytes, bytes]], own: Iterable[tuple[bytes, bytes]] = ()
) -> list[tuple[bytes, bytes]]:
    """Upstream response headers for the client: end-to-end ones only (no cookies), plus the proxy's own."""
    kept = [(k, v) for k, v in raw if (low := k.lower()) not in _NOT_RETURNED and not low.startswith(b"x-loopwarden-")]
    kept.extend(own)
    return kept
