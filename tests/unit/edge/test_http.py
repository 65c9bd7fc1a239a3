"""Header filtering and bounded body reads."""

from __future__ import annotations

import pytest

from proxy.edge.http import (
    client_headers,
    forwarded_headers,
    header,
    header_text,
    headers_by_name,
    read_body,
    upstream_request_headers,
)
from proxy.errors import PayloadTooLarge


def test_upstream_headers_drop_hop_by_hop_credentials_and_own_headers():
    headers = [
        ("Host", "proxy"),
        ("Content-Length", "10"),
        ("Connection", "close, X-Hop"),
        ("X-Hop", "1"),
        ("Authorization", "Bearer lw-proxy-key"),
        ("X-LoopWarden-Key", "lw-proxy-key"),
        ("X-LoopWarden-Session", "s1"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Type", "application/json"),
        ("OpenAI-Organization", "org-1"),
    ]

    out = upstream_request_headers(headers, "Bearer sk-provider")

    assert out == [
        ("Content-Type", "application/json"),
        ("OpenAI-Organization", "org-1"),
        ("authorization", "Bearer sk-provider"),
    ]


def test_identity_encoding_replaces_accept_encoding():
    out = upstream_request_headers([("Accept-Encoding", "gzip, br")], None, identity_encoding=True)

    assert out == [("accept-encoding", "identity")]


def _receiver(*chunks: bytes):
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive():
        return messages.pop(0)

    return receive


async def test_read_body_joins_chunks():
    assert await read_body(_receiver(b"ab", b"cd", b""), 10, None) == b"abcd"


async def test_read_body_refuses_declared_length_over_limit_before_reading():
    async def receive():
        raise AssertionError("must not read")

    with pytest.raises(PayloadTooLarge):
        await read_body(receive, 10, "11")


async def test_read_body_refuses_chunked_body_once_over_limit():
    with pytest.raises(PayloadTooLarge):
        await read_body(_receiver(b"123456", b"789012", b"never read"), 10, None)


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"plain-id", "plain-id"),
        ("séance ☕".encode(), "séance ☕"),
        (b"caf\xe9", "café"),  # not UTF-8: read as latin-1, never an error
    ],
)
def test_header_values_are_read_as_utf8_text(raw, text):
    assert header_text(raw) == text


CLIENT = [("x-api-key", "lw-proxy-key"), ("anthropic-version", "2023-06-01"), ("anthropic-beta", "a,b")]


def test_the_tenants_key_replaces_the_callers_x_api_key():
    headers = upstream_request_headers(CLIENT, "Bearer sk-ant-tenant", key_header="x-api-key")

    assert [v for k, v in headers if k == "x-api-key"] == ["sk-ant-tenant"]
    assert not any(k == "authorization" for k, _ in headers)
    assert ("anthropic-beta", "a,b") in headers


def test_without_a_key_header_the_key_goes_in_authorization_as_before():
    headers = upstream_request_headers([("authorization", "Bearer lw")], "Bearer sk-x")

    assert headers == [("authorization", "Bearer sk-x")]


HEADERS = [(b"x-session-id", b"s1"), (b"x-title", "né".encode()), (b"x-session-id", b"s2"), (b"x-raw", b"\xe9")]


@pytest.mark.parametrize("name", [b"x-session-id", b"x-title", b"x-raw", b"x-absent"])
@pytest.mark.parametrize("given", [list, tuple, iter])
def test_headers_read_by_name_are_what_header_reads(name, given):
    """Indexed once, the first value of a repeated name still wins, decoded as header_text does."""
    scope = {"headers": given(HEADERS)}
    expected = header({"headers": HEADERS}, name)  # type: ignore[typeddict-item]

    assert headers_by_name(scope)(name) == expected  # type: ignore[arg-type]


FORWARDED_CASES = [
    [(b"host", b"proxy"), (b"content-type", b"application/json"), (b"authorization", b"Bearer lw-x")],
    [(b"user-agent", "agent ☕".encode()), (b"x-loopwarden-goal", b"g"), (b"accept-encoding", b"gzip")],
    [(b"connection", b"keep-alive, x-secret"), (b"x-secret", b"s"), (b"x-kept", b"k")],  # named by Connection
    [(b"Connection", b"x-secret"), (b"X-Secret", b"s"), (b"X-LoopWarden-Key", b"k"), (b"X-Kept", b"k")],
    [(b"x-title", b"caf\xe9"), (b"te", b"trailers"), (b"x-api-key", b"lw-proxy")],  # a value not UTF-8
    [],
]


@pytest.mark.parametrize("raw", FORWARDED_CASES)
@pytest.mark.parametrize("identity_encoding", [True, False])
@pytest.mark.parametrize(
    ("authorization", "key_header"),
    [("Bearer sk-up", "authorization"), ("Bearer sk-up", "x-api-key"), (None, "x-api-key")],
)
@pytest.mark.parametrize("given", [list, tuple])
@pytest.mark.parametrize("dropped", [(), ("X-Api-Key", "api-key")], ids=["none-dropped", "keys-dropped"])
def test_one_pass_forwards_what_the_two_steps_do(raw, identity_encoding, authorization, key_header, given, dropped):
    scope = {"headers": given(raw)}
    options = {"identity_encoding": identity_encoding, "key_header": key_header, "dropped": dropped}
    two_steps = upstream_request_headers(client_headers(scope), authorization, **options)

    assert forwarded_headers(scope, authorization, **options) == two_steps
