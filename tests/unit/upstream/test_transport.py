"""The upstream transport under client-chosen URLs and headers (pass-through paths and queries)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import tracemalloc
from collections.abc import AsyncIterator

import httpx
import pytest

from proxy.upstream.transport import READ_BODY, READ_LIMIT, UpstreamTransport

_OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Any request, whatever its line's length: 200 ``{}`` (keep-alive)."""
    try:
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(_OK)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


@pytest.mark.timeout(300)  # 600 requests under tracemalloc: 13 s on an idle machine, a minute on a busy one
async def test_distinct_long_urls_are_not_kept_parsed():
    server = await asyncio.start_server(_answer, "127.0.0.1", 0, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(transport=UpstreamTransport()) as client:
            tracemalloc.start()
            # The libraries' own bounded caches (urllib's, yarl's: 128 URLs each) fill first.
            for n in range(200):
                await client.get(f"http://127.0.0.1:{port}/v1/models?{n}=" + "x" * 60_000)
            before = tracemalloc.get_traced_memory()[0]
            for n in range(200, 600):
                await client.get(f"http://127.0.0.1:{port}/v1/models?{n}=" + "x" * 60_000)
            held = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.stop()
    finally:
        server.close()
        await server.wait_closed()

    assert held < 4_000_000  # 400 more parsed 60 kB URLs kept would hold ~48 MB


async def _serve_once(reply: bytes):
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


_BODY = b'{"id":"chatcmpl-1","choices":[]}'


@pytest.mark.parametrize(
    ("encoding", "sent"),
    [
        (None, _BODY),
        ("identity", _BODY),
        ("gzip", gzip.compress(_BODY, mtime=0)),  # an upstream that ignored accept-encoding: decoded as before
    ],
    ids=["no-encoding", "identity", "gzip"],  # stable ids: every xdist worker must collect the same tests
)
async def test_a_body_read_whole_is_the_reply_as_sent_decoded_only_where_it_says_so(encoding, sent):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(sent)
    if encoding:
        head += b"Content-Encoding: " + encoding.encode() + b"\r\n"
    server = await _serve_once(head + b"\r\n" + sent)
    port = server.sockets[0].getsockname()[1]
    transport = UpstreamTransport()
    try:
        request = httpx.Request("POST", f"http://127.0.0.1:{port}/v1/chat/completions", content=b"{}")
        request.extensions = {READ_BODY: True, READ_LIMIT: None}
        response = await transport.handle_async_request(request)
    finally:
        await transport.aclose()
        server.close()
        await server.wait_closed()

    assert (response.status_code, response.content, await response.aread()) == (200, _BODY, _BODY)
    assert response.headers.raw[:2] == [(b"Content-Type", b"application/json"), (b"Content-Length", b"%d" % len(sent))]
    assert (response.is_stream_consumed, response.is_closed) == (True, True)


async def _recording_server(seen: list[bytes]):
    """Records each request as it arrives (head and body), answers 200 ``{}``."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.lower().split(b"\r\n")
                length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:"))
                seen.append(head + await reader.readexactly(length))
                writer.write(_OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


@contextlib.asynccontextmanager
async def _recorded() -> AsyncIterator[tuple[int, list[bytes], UpstreamTransport]]:
    """A recording server's port, what it records, and a transport closed with it."""
    seen: list[bytes] = []
    server = await _recording_server(seen)
    transport = UpstreamTransport()
    try:
        yield server.sockets[0].getsockname()[1], seen, transport
    finally:
        await transport.aclose()
        server.close()
        await server.wait_closed()


async def test_the_upstream_client_sends_on_this_transport_what_an_httpx_request_would():
    """The client hands this transport a call's parts (no httpx request): the same bytes go out."""
    from proxy.settings import Settings
    from proxy.upstream.client import UpstreamClient

    seen: list[bytes] = []
    server = await _recording_server(seen)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/chat/completions?beta=true"
    headers = [
        ("Content-Type", "application/json"),
        ("x-tag", "a"),
        ("X-Tag", "b"),  # duplicates kept, in order
        ("content-length", "999"),  # the transport frames the body itself
        ("x-session-id", "séance ☕"),  # non-ASCII: UTF-8 on the wire
    ]
    transport = UpstreamTransport()
    client = UpstreamClient(Settings(upstream=f"http://127.0.0.1:{port}/v1"), transport)
    try:
        reply = await client.send("POST", url, headers, b'{"a":1}')
        # As the client built its requests before: a body as a stream, so httpx adds no headers.
        encoded = httpx.Headers(headers, encoding="utf-8")
        request = httpx.Request("POST", url, headers=encoded, stream=httpx.ByteStream(b'{"a":1}'))
        request.read()
        request.extensions = {READ_BODY: True, READ_LIMIT: None}
        via_httpx = await transport.handle_async_request(request)
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()

    assert (reply.response.status_code, reply.response.content) == (via_httpx.status_code, via_httpx.content)
    assert reply.response.headers.raw == via_httpx.headers.raw
    assert reply.response.headers._list == httpx.Headers(via_httpx.headers.raw)._list  # as httpx itself builds them
    assert seen[0] == seen[1]
    assert b"\r\nx-tag: a\r\nx-tag: b\r\nx-session-id: " + "séance ☕".encode() + b"\r\n" in seen[0]
    assert seen[0].lower().count(b"content-length: 7\r\n") == 1


async def test_the_transport_adds_no_header_of_its_own():
    """No User-Agent, Accept, Accept-Encoding nor Content-Type of aiohttp's: only Host, the
    caller's headers and the body's length go out."""
    async with _recorded() as (port, seen, transport):
        await transport.exchange(
            "POST", f"http://127.0.0.1:{port}/v1/x", [("x-tag", "a")], b'{"a":1}', {}, read_body=True, limit=None
        )

    lines = seen[0].split(b"\r\n\r\n")[0].split(b"\r\n")[1:]
    assert [line.split(b":")[0].lower() for line in lines] == [b"host", b"x-tag", b"content-length"]


async def test_a_header_value_with_a_line_break_is_refused_before_anything_is_sent():
    async with _recorded() as (port, seen, transport):
        with pytest.raises(ValueError, match="Newline or carriage return"):
            await transport.exchange(
                "POST",
                f"http://127.0.0.1:{port}/v1/x",
                [("x-tag", "a\r\nx-injected: 1")],
                b"{}",
                {},
                read_body=True,
                limit=None,
            )
    assert seen == []


async def test_a_url_of_another_scheme_is_unsupported():
    transport = UpstreamTransport()
    with pytest.raises(httpx.UnsupportedProtocol):
        await transport.exchange("GET", "ftp://127.0.0.1/v1/models", [], None, {}, read_body=True, limit=None)
    await transport.aclose()


@pytest.mark.parametrize(
    ("path", "host"),
    [("/v1/x?beta=true", "127.0.0.1:{port}"), ("/v1/x", "127.0.0.1:{port}")],
    ids=["with-query", "without-query"],
)
async def test_the_request_line_and_host_are_the_urls_own(path, host):
    async with _recorded() as (port, seen, transport):
        await transport.exchange("POST", f"http://127.0.0.1:{port}{path}", [], b"{}", {}, read_body=True, limit=None)
    lines = seen[0].split(b"\r\n")
    assert lines[:2] == [f"POST {path} HTTP/1.1".encode(), f"host: {host.format(port=port)}".encode()]


async def test_a_bodiless_get_carries_no_length_and_a_bodiless_post_a_zero_one():
    from proxy.upstream.transport import request_head

    assert b"content-length" not in request_head("GET", "/v1/models", "h", [], None)
    assert request_head("POST", "/v1/x", "h", [], None).endswith(b"content-length: 0\r\n\r\n")
