"""One HTTP/1.1 connection to an upstream: how each way a reply can be framed, cut short or
malformed reaches the caller, and when a connection may carry the next request."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from proxy.errors import UpstreamReplyTooLarge
from proxy.upstream.http1 import Http1Connection

_REQUEST = b"POST /v1/x HTTP/1.1\r\nhost: upstream\r\ncontent-length: 2\r\n\r\n{}"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def answering(*replies: bytes, then_close: bool = False) -> Handler:
    """A server that reads one request head per reply and writes that reply as it is."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for reply in replies:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(reply)
                await writer.drain()
            if then_close:
                writer.close()
            else:
                await reader.read()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return handle


@contextlib.asynccontextmanager
async def connected(handler: Handler) -> AsyncIterator[Http1Connection]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    _, connection = await loop.create_connection(lambda: Http1Connection(loop), "127.0.0.1", port)
    try:
        yield connection
    finally:
        connection.abort()
        server.close()
        await server.wait_closed()


def _sized(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body


async def exchange(connection: Http1Connection, limit: int | None = None, read_timeout: float = 5.0) -> bytes:
    connection.send(_REQUEST, limit, head_only=False)
    await connection.head(read_timeout)
    return await connection.whole(read_timeout)


async def test_a_reply_with_a_length_is_read_whole_with_its_status_reason_and_headers():
    handler = answering(b"HTTP/1.1 201 Made\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 5\r\n\r\nhello")
    async with connected(handler) as connection:
        body = await exchange(connection)
        assert (connection.status, connection.reason, body) == (201, b"Made", b"hello")
        assert connection.headers == [(b"X-A", b"1"), (b"x-a", b"2"), (b"Content-Length", b"5")]


async def test_a_chunked_reply_comes_back_unchunked():
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    async with connected(answering(chunked)) as connection:
        assert await exchange(connection) == b"abcde"


async def test_a_reply_framed_by_nothing_ends_with_the_connection():
    async with connected(answering(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", then_close=True)) as connection:
        assert await exchange(connection) == b"until the end"
        assert not connection.reusable


async def test_a_body_cut_short_is_an_incomplete_reply():
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"
    async with connected(answering(cut, then_close=True)) as connection:
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete body"):
            await exchange(connection)


async def test_a_connection_closed_before_any_reply_byte_is_a_disconnect():
    async with connected(answering(b"", then_close=True)) as connection:
        with pytest.raises(httpx.RemoteProtocolError, match="server disconnected"):
            await exchange(connection)


async def test_a_reply_that_does_not_parse_is_a_protocol_error():
    async with connected(answering(b"SMTP ready\r\n\r\n")) as connection:
        with pytest.raises(httpx.RemoteProtocolError, match="malformed reply"):
            await exchange(connection)


async def test_an_informational_reply_is_skipped_for_the_one_that_follows():
    replies = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    async with connected(answering(replies)) as connection:
        assert (await exchange(connection), connection.status) == (b"{}", 200)


async def test_a_reply_that_never_comes_is_a_read_timeout():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    async with connected(silent) as connection:
        with pytest.raises(httpx.ReadTimeout):
            await exchange(connection, read_timeout=0.05)
        assert connection.closed


async def test_the_read_timeout_counts_from_the_last_byte_not_the_first():
    async def trickling(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n")
        for piece in (b"ab", b"cd", b"ef"):
            await asyncio.sleep(0.3)
            writer.write(piece)
        await reader.read()

    async with connected(trickling) as connection:
        # 0.9 s in all, never 0.3 s without a byte against a 0.6 s timeout.
        assert await exchange(connection, read_timeout=0.6) == b"abcdef"


async def test_a_body_over_the_limit_fails_and_drops_the_connection():
    big = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789"
    async with connected(answering(big)) as connection:
        with pytest.raises(UpstreamReplyTooLarge):
            await exchange(connection, limit=9)
        assert connection.closed


async def test_a_head_reply_has_no_body_and_its_connection_is_not_reused():
    async with connected(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n")) as connection:
        connection.send(b"HEAD / HTTP/1.1\r\nhost: upstream\r\n\r\n", None, head_only=True)
        await connection.head(5.0)
        assert (await connection.whole(5.0), connection.reusable) == (b"", False)


async def test_a_complete_reply_leaves_the_connection_for_the_next_request():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    async with connected(answering(ok, ok)) as connection:
        assert await exchange(connection) == b"{}"
        assert connection.reusable
        connection.done()
        assert await exchange(connection) == b"{}"


async def test_a_reply_that_says_close_ends_the_connection():
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    async with connected(answering(closing)) as connection:
        assert await exchange(connection) == b"{}"
        assert not connection.reusable


async def test_bytes_nobody_asked_for_close_an_idle_connection():
    extra = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    async with connected(answering(extra)) as connection:
        await exchange(connection)
        connection.done()
        for _ in range(100):
            if connection.closed:
                break
            await asyncio.sleep(0.01)
        assert connection.closed


async def test_a_streamed_body_arrives_whole_and_in_order_however_slowly_it_is_read():
    body = bytes(range(256)) * 4_096  # 1 MiB: past the point where the connection stops reading

    async with connected(answering(_sized(body))) as connection:
        connection.send(_REQUEST, None, head_only=False)
        await connection.head(5.0)
        await asyncio.sleep(0.2)  # let the upstream fill what the connection will hold
        pieces = []
        while piece := await connection.chunk(5.0):
            pieces.append(piece)
        assert b"".join(pieces) == body


async def test_a_reply_still_coming_at_the_deadline_is_a_timeout_error():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    async with connected(silent) as connection:
        connection.send(_REQUEST, None, head_only=False)
        with pytest.raises(TimeoutError):
            await connection.head(None, asyncio.get_running_loop().time() + 0.05)
        assert connection.closed


async def test_the_deadline_holds_however_steadily_bytes_come():
    async def trickling(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        for _ in range(100):
            await asyncio.sleep(0.02)
            writer.write(b"x")
        await reader.read()

    async with connected(trickling) as connection:
        connection.send(_REQUEST, None, head_only=False)
        deadline = asyncio.get_running_loop().time() + 0.3  # the whole body takes 2 s
        await connection.head(5.0, deadline)
        with pytest.raises(TimeoutError):
            await connection.whole(5.0, deadline)


async def test_a_body_read_whole_is_read_past_the_point_where_a_stream_would_pause():
    body = b"y" * (4 << 20)  # 4 MiB, read whole: nobody takes pieces meanwhile

    async with connected(answering(_sized(body))) as connection:
        assert await exchange(connection) == body
