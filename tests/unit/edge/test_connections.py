"""Connections the server cannot be made to hold, at the protocol level: the guarded protocols
serve a real socket in process. An upgrade asked with any method but ``GET`` is answered as
HTTP and closed, a handshake the WebSocket library cannot parse gets a 400 and a close, and a
request head that does not arrive in time closes the connection. The whole server's behaviour
is in tests/reliability/test_held_connections.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState
from websockets.asyncio.client import connect

from proxy.edge.connections import BAD_HANDSHAKE, SEND_MANY, GuardedHttpProtocol, guarded_websocket_protocol
from tests.support.waiting import PATIENCE_SECS


async def app(scope, receive, send) -> None:
    """Answers every HTTP request 426, as the routes answer an upgrade they do not serve; a
    socket gets two messages sent as one batch, then a close."""
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        await scope["extensions"][SEND_MANY]([b"one", "twö".encode()])
        await send({"type": "websocket.close", "code": 1000})
        return
    await send({"type": "http.response.start", "status": 426, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


@pytest.fixture
async def port() -> AsyncIterator[int]:
    """A port served by the guarded protocols, with a head deadline of a tenth of a second."""
    config = Config(app, ws=guarded_websocket_protocol() or "none", log_level="critical", lifespan="off")
    config.load()
    protocol = GuardedHttpProtocol.with_header_timeout(0.1)
    state = ServerState()
    server = await asyncio.get_running_loop().create_server(
        lambda: protocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0
    )
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def until_closed(port: int, data: bytes) -> bytes:
    """What the server answers ``data`` with, read until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(-1), PATIENCE_SECS)
    finally:
        writer.close()


def upgrade(method: str, extra: bytes = b"\r\n") -> bytes:
    return (
        f"{method} /v1/responses HTTP/1.1\r\nHost: proxy\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Version: 13\r\n"
    ).encode() + extra


@pytest.mark.parametrize("method", ["HEAD", "PUT", "OPTIONS"])
async def test_an_upgrade_asked_with_another_method_than_get_is_answered_as_http_and_closed(port, method):
    reply = await until_closed(port, upgrade(method))

    assert reply.startswith(b"HTTP/1.1 426 ")


async def test_a_handshake_the_library_cannot_parse_gets_a_400_and_a_close(port):
    key = b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    reply = await until_closed(port, upgrade("GET", key + b"Content-Length: 3\r\n\r\nabc"))  # a body: unparsable

    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert body_length(head) == len(body) > 0  # whole, then closed (until_closed read to EOF)


def body_length(head: bytes) -> int:
    """The Content-Length a response head declares (uvicorn >= 0.55 answers such a handshake
    itself; older releases said nothing and the guarded protocol answers BAD_HANDSHAKE)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise AssertionError(f"no content-length in {head!r}")


async def test_a_batch_the_app_sends_arrives_as_its_text_messages_in_order(port):
    async with connect(f"ws://127.0.0.1:{port}/v1/responses", open_timeout=PATIENCE_SECS) as socket:
        received = [message async for message in socket]

    assert received == ["one", "twö"]


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 70000])
def test_texts_are_framed_as_the_library_frames_a_servers_text_messages(size):
    from websockets.frames import Frame, Opcode

    from proxy.edge.connections import text_frames

    texts = [b"x" * size, "twö".encode()]
    library = b"".join(Frame(Opcode.TEXT, text).serialize(mask=False, extensions=[]) for text in texts)

    assert text_frames(texts) == library
    assert text_frames(texts, [b"pong"]) == b"pong" + library


def test_a_socket_not_open_or_with_an_extension_leaves_the_framing_to_the_library():
    from types import SimpleNamespace

    from websockets.protocol import State

    from proxy.edge.connections import _frames_itself

    open_plain = {"state": State.OPEN, "extensions": [], "expect_continuation_frame": False}

    assert _frames_itself(SimpleNamespace(**open_plain))
    assert not _frames_itself(SimpleNamespace(**{**open_plain, "state": State.CLOSING}))
    assert not _frames_itself(SimpleNamespace(**{**open_plain, "extensions": [object()]}))
    assert not _frames_itself(SimpleNamespace(**{**open_plain, "expect_continuation_frame": True}))
    assert not _frames_itself(SimpleNamespace(send_text=None))


async def test_a_request_head_that_does_not_arrive_in_time_closes_the_connection(port):
    assert await until_closed(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n") == b""


async def test_a_later_request_head_that_does_not_arrive_in_time_closes_the_connection(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PATIENCE_SECS)
        assert head.startswith(b"HTTP/1.1 426 ")
        await asyncio.sleep(0.05)  # the connection's one timer, armed by the first head, fires mid-way
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n")

        assert await asyncio.wait_for(reader.read(-1), PATIENCE_SECS) == b""
    finally:
        writer.close()


def test_a_head_deadline_of_its_own_leaves_the_protocol_it_derives_from_alone():
    quick = GuardedHttpProtocol.with_header_timeout(0.5)

    assert quick.header_timeout == 0.5
    assert GuardedHttpProtocol.header_timeout == 10.0
    assert issubclass(quick, GuardedHttpProtocol)


def test_the_400_for_a_bad_handshake_declares_its_body_length():
    head, _, body = BAD_HANDSHAKE.partition(b"\r\n\r\n")

    assert body_length(head) == len(body)


def test_a_protocol_without_the_sans_io_parts_offers_no_batch_send():
    from types import SimpleNamespace

    from proxy.edge.connections import _has_sans_io_parts

    conn = SimpleNamespace(send_text=None, data_to_send=None)
    whole = SimpleNamespace(
        writable=None,
        disconnected=False,
        handshake_complete=True,
        close_sent=False,
        initial_response=None,
        transport=None,
        conn=conn,
    )
    renamed = SimpleNamespace(**{**vars(whole), "conn": SimpleNamespace(send_text=None)})

    assert _has_sans_io_parts(whole)
    assert not _has_sans_io_parts(renamed)


class Transport:
    """Records what the cycle writes and when it closes."""

    def __init__(self) -> None:
        self.events: list[bytes | str] = []

    def write(self, data: bytes) -> None:
        self.events.append(bytes(data))

    def is_closing(self) -> bool:
        return "close" in self.events

    def close(self) -> None:
        self.events.append("close")


def cycle(keep_alive: bool = True):
    """A request's cycle as uvicorn makes it, its ``send`` the guarded protocol's."""
    import logging

    from uvicorn.protocols.http.flow_control import FlowControl
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    from proxy.edge.connections import WholeReplies

    transport = Transport()
    made = RequestResponseCycle(
        scope={"method": "POST"},  # type: ignore[typeddict-item]
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test"),
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )
    made.send = WholeReplies(made)  # type: ignore[method-assign]
    return made, transport


@pytest.mark.parametrize("keep_alive", [True, False])
async def test_a_whole_reply_goes_out_in_one_write(keep_alive):
    made, transport = cycle(keep_alive)

    await made.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    assert transport.events == []  # the head waits for its body
    await made.send({"type": "http.response.body", "body": b"{}"})

    assert (
        transport.events[0]
        == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n"
        + (b"\r\n" if keep_alive else b"connection: close\r\n\r\n")
        + b"{}"
    )
    assert transport.events[1:] == ([] if keep_alive else ["close"])  # written before the close
    assert made.response_complete
    assert made.transport is transport


async def test_a_streams_head_goes_out_at_once():
    made, transport = cycle()

    stream = [(b"content-type", b"text/event-stream")]
    await made.send({"type": "http.response.start", "status": 200, "headers": stream})
    assert len(transport.events) == 1
    await made.send({"type": "http.response.body", "body": b"data: x\n\n", "more_body": True})
    await made.send({"type": "http.response.body", "body": b"", "more_body": False})

    assert transport.events[1:] == [b"9\r\ndata: x\n\n\r\n", b"0\r\n\r\n"]


def bare_cycle(method: str = "POST", default_headers=()):
    """A cycle whose ``send`` is uvicorn's own, beside the guarded one, for the same request."""
    made, transport = cycle()
    del made.send  # the instance's WholeReplies: the class's send again
    made.scope = {"method": method}  # type: ignore[assignment]
    made.default_headers = list(default_headers)
    return made, transport


def guarded_cycle(method: str = "POST", default_headers=()):
    from proxy.edge.connections import WholeReplies

    made, transport = bare_cycle(method, default_headers)
    made.send = WholeReplies(made)  # type: ignore[method-assign]
    return made, transport


async def sent(make, headers, body: bytes, **options) -> tuple[list[bytes | str], object]:
    """What a cycle writes for one whole reply, and the error uvicorn raised for it, if any."""
    made, transport = make(**options)
    try:
        await made.send({"type": "http.response.start", "status": 201, "headers": headers})
        await made.send({"type": "http.response.body", "body": body})
    except Exception as exc:  # compared: the same error either way
        return [b"".join(e for e in transport.events if isinstance(e, bytes))], (type(exc), str(exc))
    assert made.response_complete
    assert made.response_started
    return [b"".join(e for e in transport.events if isinstance(e, bytes))], None


WHOLE_REPLIES = [
    ([(b"content-type", b"application/json"), (b"content-length", b"2")], b"{}", {}),
    ([(b"Content-Type", b"application/json"), (b"X-Request-Id", b"Ab"), (b"content-length", b"2")], b"{}", {}),
    ([(b"content-length", b"2"), (b"content-length", b"2")], b"{}", {}),  # the first one counts
    ([(b"content-length", b"2"), (b"x-a", b"1")], b"{}", {"default_headers": [(b"server", b"uvicorn")]}),
    ([(b"content-length", b" 2")], b"{}", {}),  # a length int() reads
    ([(b"content-length", b"0")], b"", {"method": "HEAD"}),
    ([(b"content-length", b"2"), (b"connection", b"close")], b"{}", {}),
    ([(b"content-length", b"2"), (b"transfer-encoding", b"chunked")], b"{}", {}),
    ([(b"content-length", b"3")], b"{}", {}),  # shorter than its length
    ([(b"content-length", b"1")], b"{}", {}),  # longer
    ([(b"content-length", b"2"), (b"bad name", b"x")], b"{}", {}),
    ([(b"content-length", b"2"), (b"x-a", b"line\nbreak")], b"{}", {}),
    ([(b"content-length", b"2"), (b"x-a", b"tab\tok")], b"{}", {}),
]


@pytest.mark.parametrize(("headers", "body", "options"), WHOLE_REPLIES)
async def test_a_whole_reply_is_written_as_uvicorn_writes_it(headers, body, options):
    guarded, guarded_error = await sent(guarded_cycle, headers, body, **options)
    bare, bare_error = await sent(bare_cycle, headers, body, **options)

    assert guarded == bare
    assert guarded_error == bare_error


async def test_a_whole_reply_completes_its_cycle_as_uvicorn_does():
    made, transport = guarded_cycle()
    done: list[bool] = []
    made.on_response = lambda: done.append(made.message_event.is_set())

    await made.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await made.send({"type": "http.response.body", "body": b"{}"})

    assert transport.events == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    assert made.response_complete
    assert not made.waiting_for_100_continue
    assert made.chunked_encoding is False
    assert done == [True]
