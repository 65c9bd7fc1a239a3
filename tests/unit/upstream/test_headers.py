"""Which upstream response headers reach the client: end-to-end ones, never hop-by-hop headers,
framing, cookies or a spoofed ``X-LoopWarden-*``; the proxy's own are added."""

from __future__ import annotations

from proxy.upstream.headers import HOP_BY_HOP, reply_headers


def test_reply_headers_keep_end_to_end_drop_cookies_and_add_own():
    raw = [
        (b"Content-Type", b"application/json"),
        (b"Content-Length", b"12"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Connection", b"keep-alive"),
        (b"X-LoopWarden-Spoofed", b"1"),
        (b"x-request-id", b"r1"),
        (b"Set-Cookie", b"session=operator; Path=/"),
        (b"set-cookie2", b"legacy=operator"),
    ]

    out = reply_headers(raw, [(b"x-loopwarden-upstream-attempts", b"1")])

    assert out == [
        (b"Content-Type", b"application/json"),
        (b"x-request-id", b"r1"),
        (b"x-loopwarden-upstream-attempts", b"1"),
    ]


def test_no_hop_by_hop_header_reaches_the_client():
    raw = [(name.title().encode(), b"v") for name in sorted(HOP_BY_HOP)] + [(b"ETag", b"e1")]

    assert reply_headers(raw) == [(b"ETag", b"e1")]
