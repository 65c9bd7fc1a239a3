"""The aiohttp transport under client-chosen URLs (pass-through paths and queries)."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc

import httpx
import pytest

from proxy.upstream.transport import READ_BODY, READ_LIMIT, AiohttpTransport

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
        async with httpx.AsyncClient(transport=AiohttpTransport()) as client:
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
    transport = AiohttpTransport()
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
