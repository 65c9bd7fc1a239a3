"""The proxy's own client WebSocket against a raw upstream that writes the frames each test
chooses: the handshake, messages as they arrive (fragments, many per read, a frame cut across
reads), control frames, the faults (too large, a protocol error, a lost connection, a silent
peer) and the close. The whole path through the proxy: tests/integration/
test_responses_upstream_socket.py."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable

import pytest

from proxy.upstream.pool import ConnectionPool
from proxy.upstream.websocket import (
    Closed,
    HandshakeRefused,
    MessageTooBig,
    UpstreamWebSocket,
    open_websocket,
)
from proxy.upstream.websocket_frames import accept_key, mask
from tests.support.waiting import PATIENCE_SECS
from tests.unit.upstream.test_pool import certificate  # noqa: F401 (a fixture: the TLS tests' certificate)

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
WRONG_ACCEPT = (
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n"
)


def server_frame(opcode: int, payload: bytes, *, fin: bool = True, first: int = 0) -> bytes:
    """A frame as a server writes it (unmasked); ``first``: bits added to the first byte."""
    head = (0x80 if fin else 0) | opcode | first
    size = len(payload)
    if size < 126:
        return bytes((head, size)) + payload
    if size < 65536:
        return struct.pack("!BBH", head, 126, size) + payload
    return struct.pack("!BBQ", head, 127, size) + payload


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """A client's frame: its opcode and unmasked payload (a client must mask)."""
    first, second = await reader.readexactly(2)
    assert second & 0x80, "a client frame is masked"
    size = second & 0x7F
    if size == 126:
        size = struct.unpack("!H", await reader.readexactly(2))[0]
    elif size == 127:
        size = struct.unpack("!Q", await reader.readexactly(8))[0]
    key = await reader.readexactly(4)
    return first & 0x0F, mask(await reader.readexactly(size), key)


class Upstream:
    """A raw WebSocket server: answers the handshake (or as told), then hands the test its streams."""

    def __init__(self, answer: Callable[[bytes], bytes] | None = None) -> None:
        self.answer = answer or self.accept
        self.heads: list[bytes] = []
        self.streams: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    @staticmethod
    def accept(head: bytes) -> bytes:
        key = next(
            line.split(b":", 1)[1].strip() for line in head.split(b"\r\n") if line.startswith(b"sec-websocket-key")
        )
        accept = accept_key(key)
        return (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "
            + accept
            + b"\r\n\r\n"
        )

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        answer = self.answer(head)
        writer.write(answer)
        if answer.endswith(b"\r\n\r\n"):
            await self.streams.put((reader, writer))
        else:  # an answer cut short: the connection goes with it
            writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str, ConnectionPool]]:
    fake = Upstream()
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    pool = ConnectionPool(limit=8, keepalive_expiry=30.0)
    yield fake, f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/responses?x=1", pool
    await pool.close()
    server.close()
    await server.wait_closed()


async def opened(upstream, *, max_size: int = 1 << 20, heartbeat: float = 30.0, headers=()) -> tuple:
    fake, url, pool = upstream
    socket = await asyncio.wait_for(open_websocket(pool, url, headers, max_size=max_size, heartbeat=heartbeat), 10)
    reader, writer = await asyncio.wait_for(fake.streams.get(), PATIENCE_SECS)
    return socket, reader, writer


async def receive(socket: UpstreamWebSocket) -> bytes:
    return await asyncio.wait_for(socket.receive(None), PATIENCE_SECS)


async def test_the_handshake_asks_for_the_upgrade_with_the_callers_headers(upstream):
    socket, _, _ = await opened(
        upstream, headers=[("Authorization", "Bearer k"), ("OpenAI-Beta", "responses_websockets=1")]
    )

    head = upstream[0].heads[0]
    assert head.startswith(b"GET /v1/responses?x=1 HTTP/1.1\r\nhost: 127.0.0.1:")
    assert b"\r\nauthorization: Bearer k\r\nopenai-beta: responses_websockets=1\r\n" in head
    assert b"\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-version: 13\r\n" in head
    assert b"content-length" not in head
    assert not socket.closed
    socket.abort()


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        (b"HTTP/1.1 426 Upgrade Required\r\ncontent-length: 0\r\n\r\n", 426),
        (WRONG_ACCEPT, 101),
        (b"SSH-2.0-OpenSSH\r\n\r\n", None),
    ],
    ids=["refused", "wrong-accept", "not-http"],
)
async def test_an_upgrade_not_accepted_is_refused_with_the_upstreams_status(upstream, answer, status):
    upstream[0].answer = lambda head: answer

    with pytest.raises(HandshakeRefused) as refused:
        await opened(upstream)

    assert refused.value.status == status


async def test_an_upstream_that_closes_during_the_handshake_fails_the_open(upstream):
    upstream[0].answer = lambda head: b"HTTP/1.1 101 Switching"  # then the connection closes

    with pytest.raises(ConnectionResetError):
        await opened(upstream)


async def test_the_messages_of_one_read_are_all_ready_at_once_and_fragments_are_joined(upstream):
    socket, _, writer = await opened(upstream)
    writer.write(
        server_frame(1, b'{"a":1}')
        + server_frame(1, b"frag", fin=False)
        + server_frame(0, b"ment", fin=False)
        + server_frame(0, b"ed")
        + server_frame(2, b"x" * 70000)
    )

    assert await receive(socket) == b'{"a":1}'
    assert socket.ready()
    assert socket.take() == b"fragmented"
    assert socket.take() == b"x" * 70000
    assert not socket.ready()
    socket.abort()


async def test_a_frame_cut_across_reads_is_read_whole(upstream):
    socket, _, writer = await opened(upstream)
    frame = server_frame(1, b"y" * 300_000)
    for start in range(0, len(frame), 1000):
        writer.write(frame[start : start + 1000])
        await writer.drain()

    assert await receive(socket) == b"y" * 300_000
    socket.abort()


async def test_a_text_sent_is_one_masked_frame(upstream):
    socket, reader, _ = await opened(upstream)
    socket.send(b'{"type":"response.create"}')
    socket.send(b"z" * 70000)

    assert await read_frame(reader) == (1, b'{"type":"response.create"}')
    assert await read_frame(reader) == (1, b"z" * 70000)
    socket.abort()


async def test_a_ping_is_answered_with_its_payload(upstream):
    socket, reader, writer = await opened(upstream)
    writer.write(server_frame(9, b"are you there"))

    assert await asyncio.wait_for(read_frame(reader), PATIENCE_SECS) == (10, b"are you there")
    socket.abort()


async def test_a_message_of_the_size_limit_ends_reads_and_closes_with_1009(upstream):
    socket, reader, writer = await opened(upstream, max_size=100)
    writer.write(server_frame(1, b"small") + server_frame(1, b"x" * 100))

    assert await receive(socket) == b"small"
    with pytest.raises(MessageTooBig):
        await receive(socket)
    opcode, payload = await asyncio.wait_for(read_frame(reader), PATIENCE_SECS)
    assert (opcode, payload[:2]) == (8, (1009).to_bytes(2, "big"))
    assert socket.closed


async def test_fragments_that_add_up_past_the_size_limit_are_too_big(upstream):
    socket, _, writer = await opened(upstream, max_size=100)
    writer.write(server_frame(1, b"x" * 60, fin=False) + server_frame(0, b"x" * 60))

    with pytest.raises(MessageTooBig):
        await receive(socket)


async def test_a_close_from_the_upstream_is_answered_and_ends_reads_with_its_code(upstream):
    socket, reader, writer = await opened(upstream)
    writer.write(server_frame(1, b"last") + server_frame(8, (1011).to_bytes(2, "big") + b"bye"))

    assert await receive(socket) == b"last"
    with pytest.raises(Closed) as closed:
        await receive(socket)
    assert closed.value.code == socket.close_code == 1011
    assert (await asyncio.wait_for(read_frame(reader), PATIENCE_SECS))[0] == 8
    with pytest.raises(ConnectionResetError):
        socket.send(b"more")


async def test_a_close_without_a_code_ends_reads_with_1005(upstream):
    socket, _, writer = await opened(upstream)
    writer.write(server_frame(8, b""))

    with pytest.raises(Closed) as closed:
        await receive(socket)
    assert closed.value.code == 1005


@pytest.mark.parametrize(
    "frame",
    [
        server_frame(1, b"x", first=0x40),  # a reserved bit: no extension was negotiated
        server_frame(0, b"x"),  # a continuation of nothing
        server_frame(1, b"a", fin=False) + server_frame(1, b"b"),  # a new message amid a fragmented one
        server_frame(9, b"p", fin=False),  # a fragmented control frame
        server_frame(3, b"x"),  # an opcode RFC 6455 does not define
        server_frame(8, (1004).to_bytes(2, "big")),  # a reserved close code
        server_frame(8, b"\x03"),  # half a close code
    ],
    ids=[
        "reserved-bit",
        "lone-continuation",
        "interleaved",
        "fragmented-ping",
        "unknown-opcode",
        "bad-code",
        "short-close",
    ],
)
async def test_a_protocol_error_ends_reads_and_closes_with_1002(upstream, frame):
    socket, reader, writer = await opened(upstream)
    writer.write(frame)

    with pytest.raises(Closed) as closed:
        await receive(socket)
    assert closed.value.code == 1002
    opcode, payload = await asyncio.wait_for(read_frame(reader), PATIENCE_SECS)
    assert (opcode, payload) == (8, (1002).to_bytes(2, "big"))


async def test_a_lost_connection_ends_reads_with_1006(upstream):
    socket, _, writer = await opened(upstream)
    writer.transport.abort()

    with pytest.raises(Closed) as closed:
        await receive(socket)
    assert closed.value.code == 1006


async def test_a_socket_whose_connection_is_gone_frees_its_place_for_the_next(upstream):
    fake, url, _ = upstream
    pool = ConnectionPool(limit=1, keepalive_expiry=30.0)
    socket, _, writer = await opened((fake, url, pool))
    writer.transport.abort()
    with pytest.raises(Closed):
        await receive(socket)

    second, _, _ = await opened((fake, url, pool))  # within the limit of one: the first one's place is free

    await second.close()
    await pool.close()


async def test_a_socket_past_the_pools_limit_waits_for_a_place(upstream):
    fake, url, _ = upstream
    pool = ConnectionPool(limit=1, keepalive_expiry=30.0)
    first, _, _ = await opened((fake, url, pool))
    waiting = asyncio.ensure_future(open_websocket(pool, url, (), max_size=100, heartbeat=30.0, connect_timeout=10))
    await asyncio.sleep(0.05)
    assert not waiting.done()

    first.abort()

    second = await asyncio.wait_for(waiting, PATIENCE_SECS)
    await second.close()
    await pool.close()


async def test_a_read_that_waits_too_long_times_out():
    socket = UpstreamWebSocket(100, 0)

    with pytest.raises(TimeoutError):
        await socket.receive(0.01)


async def test_a_silent_upstream_is_pinged_then_let_go_when_it_stays_silent(upstream):
    socket, reader, _ = await opened(upstream, heartbeat=0.05)

    assert await asyncio.wait_for(read_frame(reader), PATIENCE_SECS) == (9, b"")
    with pytest.raises(Closed) as closed:
        await receive(socket)
    assert closed.value.code == 1006


async def test_an_upstream_that_answers_the_ping_is_kept(upstream):
    socket, reader, writer = await opened(upstream, heartbeat=0.05)
    for _ in range(3):
        assert await asyncio.wait_for(read_frame(reader), PATIENCE_SECS) == (9, b"")
        writer.write(server_frame(10, b""))

    assert not socket.closed
    socket.abort()


async def test_a_close_sends_a_close_frame_and_waits_for_the_answer(upstream):
    socket, reader, writer = await opened(upstream)
    closing = asyncio.ensure_future(socket.close())

    assert await asyncio.wait_for(read_frame(reader), PATIENCE_SECS) == (8, (1000).to_bytes(2, "big"))
    writer.write(server_frame(1, b"late") + server_frame(8, (1000).to_bytes(2, "big")))
    await asyncio.wait_for(closing, PATIENCE_SECS)
    assert socket.closed
    assert not socket.ready()  # what came after the close is nobody's


async def test_a_slow_reader_pauses_the_connection_and_resumes_it_when_read():
    class Transport:
        paused = 0

        def pause_reading(self) -> None:
            self.paused += 1

        def resume_reading(self) -> None:
            self.paused -= 1

    socket = UpstreamWebSocket(0, 0)
    transport = Transport()
    socket.connection_made(transport)  # type: ignore[arg-type]
    socket._head = None
    message = server_frame(1, b"m" * 100_000)
    socket.data_received(message * 3)

    assert transport.paused == 1
    socket.take()
    socket.take()
    assert transport.paused == 1  # still above the low mark
    socket.take()
    assert transport.paused == 0


async def test_every_message_received_is_taken_at_once_and_what_is_given_back_comes_first_again(upstream):
    socket, _, writer = await opened(upstream)
    writer.write(server_frame(1, b"one") + server_frame(1, b"two") + server_frame(1, b"three"))

    assert await receive(socket) == b"one"
    taken = socket.take_all()
    socket.give_back(taken[1:])

    assert taken == [b"two", b"three"]
    assert socket.take_all() == [b"three"]
    assert not socket.ready()
    socket.abort()


async def test_a_wss_upstream_is_reached_over_verified_tls(certificate):  # noqa: F811 (the fixture)
    import ssl

    from tests.unit.upstream.test_pool import CountingResolver, _server_tls

    fake = Upstream()
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0, ssl=_server_tls(certificate))
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    pool = ConnectionPool(limit=4, keepalive_expiry=30, resolver=CountingResolver(), ssl_context=trusting)
    try:
        url = f"wss://upstream.test:{server.sockets[0].getsockname()[1]}/v1/responses"
        socket = await asyncio.wait_for(open_websocket(pool, url, (), max_size=1 << 20, heartbeat=30), 10)
        _, writer = await asyncio.wait_for(fake.streams.get(), PATIENCE_SECS)
        writer.write(server_frame(1, b"over tls"))

        assert await receive(socket) == b"over tls"
        assert fake.heads[0].startswith(b"GET /v1/responses HTTP/1.1\r\nhost: upstream.test:")
        socket.abort()
    finally:
        await pool.close()
        server.close()
