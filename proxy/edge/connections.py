"""Connections the server cannot be made to hold: every request is answered or closed.

uvicorn hands a request carrying ``Upgrade: websocket`` to its WebSocket protocol, whatever its
method; the WebSocket library refuses to parse a ``HEAD`` or ``POST`` (or a handshake with a
body) and, having nothing to answer, leaves the connection open for good. Nor does uvicorn
bound how long a request's headers may take to arrive, so a client trickling them holds a
descriptor forever (slowloris). Two protocol classes close both holes:

- :class:`GuardedHttpProtocol` hands only a ``GET`` over to the WebSocket protocol (RFC 6455
  knows no other); any other method asking for an upgrade is served as plain HTTP, where the
  app refuses it in the route's own error shape (:mod:`proxy.edge.websockets`), and the
  connection closes after that answer. It also closes a connection whose request head has
  not arrived ``header_timeout`` seconds after the connection opened or the request began.
- It also writes a whole reply (a head with a ``Content-Length``, then its body) in one
  write where uvicorn makes two: one system call per reply, not two (:class:`WholeReplies`).
- :func:`guarded_websocket_protocol` wraps the WebSocket protocol so that a handshake the
  library cannot parse gets a 400 and a close instead of silence (uvicorn 0.55 and newer
  answer it themselves; the wrapper then stays quiet). On shutdown it leaves open a socket
  whose app says a response is in flight (:data:`BUSY` in the scope's extensions): the app
  closes it with 1001 once that response is done, within the graceful-shutdown grace;
  every other socket is closed at once (1012), as uvicorn does. It also offers the app
  :data:`SEND_MANY`: a batch of text messages framed in one pass and one write (a stream's chunk
  of many events is one write, not one per event, as over HTTP).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Sequence
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.auto import AutoWebSocketsProtocol

try:
    from websockets.exceptions import InvalidState as _InvalidState
    from websockets.protocol import State

    _OPEN: Any = State.OPEN
except ImportError:  # pragma: no cover - without the library there is no sans-I/O protocol
    _InvalidState = RuntimeError  # type: ignore[assignment,misc]
    _OPEN = None

__all__ = [
    "BUSY",
    "DRAIN",
    "SEND_MANY",
    "GuardedHttpProtocol",
    "WholeReplies",
    "guarded_websocket_protocol",
    "text_frames",
]

BUSY = "loopwarden.socket_busy"
"""The scope extension through which a socket's app says whether a response is in flight."""
DRAIN = "loopwarden.socket_drain"
"""The scope extension set when the server stops while the socket's response is in flight."""
SEND_MANY = "loopwarden.socket_send_many"
"""The scope extension the app awaits with text messages (UTF-8 bytes) to send them in order in
one write; absent where the server's WebSocket library does not allow it."""

logger = logging.getLogger(__name__)

BAD_HANDSHAKE = (
    b"HTTP/1.1 400 Bad Request\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: 33\r\n"
    b"connection: close\r\n"
    b"\r\n"
    b"Not a valid WebSocket handshake.\n"
)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on request heads and upgrades for ``GET`` only."""

    header_timeout: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None
        self._head_since: float | None = None
        """When the head now awaited began to be (None: none is)."""
        self._held: RequestResponseCycle | None = None

    @classmethod
    def with_header_timeout(cls, seconds: float) -> type[GuardedHttpProtocol]:
        """This protocol with its own head deadline: uvicorn builds protocols from a class."""
        return cast("type[GuardedHttpProtocol]", type(cls.__name__, (cls,), {"header_timeout": seconds}))

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle  # a client gone before its reply is whole: its watch is told at once
        sending = cycle.send if cycle is not None and not cycle.response_complete else None
        if isinstance(sending, WholeReplies) and sending.watch is not None:
            sending.watch()
        self._head_since = None
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_head_deadline()

    def on_headers_complete(self) -> None:
        self._disarm_head_deadline()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle is not self._held:  # a new request (not an upgrade)
            self._held = cycle
            cycle.send = WholeReplies(cycle)  # type: ignore[method-assign]

    def _should_upgrade(self) -> bool:
        """Only a ``GET`` is a WebSocket handshake; the rest stays HTTP and gets the app's answer."""
        return bool(super()._should_upgrade() and self.scope.get("method") == "GET")

    def _unsupported_upgrade_warning(self) -> None:
        """The parser stops at an upgrade it was not allowed to make: answer this request, then
        close, since nothing after it on the connection can be read as HTTP."""
        logger.debug("upgrade request served as HTTP: %s", self.scope.get("method"))
        if self.cycle is not None:
            self.cycle.keep_alive = False

    def _arm_head_deadline(self) -> None:
        """A head is awaited from now (or from earlier, when one already was: a connection's first
        request counts from the connection). One timer serves a connection's many requests: it is
        armed only when none is, and finds out when it fires whether a head is late."""
        if self.header_timeout <= 0:
            return
        if self._head_since is None:
            self._head_since = self.loop.time()
        if self._head_deadline is None:
            self._head_deadline = self.loop.call_later(self.header_timeout, self._head_too_slow)

    def _disarm_head_deadline(self) -> None:
        """The head arrived: no timer to cancel per request (one that fires finds no head awaited)."""
        self._head_since = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if self._head_since is None:
            return  # every head arrived in time: the next one awaited arms the timer again
        left = self._head_since + self.header_timeout - self.loop.time()
        if left > 0:  # the head awaited began after the timer did
            self._head_deadline = self.loop.call_later(left, self._head_too_slow)
            return
        if not self.transport.is_closing():
            logger.debug("request head not received within %.1f s; connection closed", self.header_timeout)
            self.transport.close()


class WholeReplies:
    """The ``send`` uvicorn's cycle hands the app, writing a whole reply in one go: the head of
    a reply with a ``Content-Length`` is held until its body, and uvicorn writes both (checked
    and framed as ever) into one buffer that goes out in one write. A stream's head (no length)
    goes at once; so does a held head before anything but a body (which an app never sends)."""

    __slots__ = ("_cycle", "_held", "_send", "watch")

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle
        self._send = cycle.send
        self._held: Any = None
        self.watch: Callable[[], None] | None = None
        """Called when the connection is lost before the reply is whole (a client watch's)."""

    @property
    def client_gone(self) -> bool:
        """The connection was lost before the reply was whole."""
        return bool(self._cycle.disconnected)

    async def __call__(self, message: Any) -> None:
        held = self._held
        if held is None:
            if message["type"] == "http.response.start" and _has_length(message.get("headers", ())):
                self._held = message
                return
            await self._send(message)
            return
        self._held = None
        if message["type"] != "http.response.body":
            await self._send(held)
            await self._send(message)
            return
        cycle = self._cycle
        if _written_whole(cycle, held, message):
            return
        transport = cycle.transport
        joined = _OneWrite(transport)
        cycle.transport = joined  # type: ignore[assignment]
        try:
            await self._send(held)
            await self._send(message)
        finally:
            cycle.transport = transport
            joined.flush()


class _OneWrite:
    """Stands in for the transport while uvicorn writes one reply: what it writes is kept, and
    written as one when the reply is done (or before the connection closes)."""

    __slots__ = ("_chunks", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self._chunks.append(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def flush(self) -> None:
        chunks = self._chunks
        if chunks:
            self._transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))
            chunks.clear()


def _written_whole(cycle: RequestResponseCycle, head: Any, message: Any) -> bool:
    """Write a whole reply as uvicorn's ``send`` would for its head and its body, byte for byte,
    in one write and without uvicorn's Python loop over each header (two searches, a lower and
    four comparisons apiece): every header checked with the same two expressions over all names
    and all values at once. False, having written nothing, for whatever is not the common
    case (a paused or closed connection, ``HEAD``, a closing connection, chunked framing, a
    body that does not match its length, anything uvicorn would refuse): uvicorn's path then."""
    if cycle.flow.write_paused or cycle.disconnected or cycle.response_started or cycle.access_log:
        return False
    status = head["status"]
    line = STATUS_LINE.get(status)
    if line is None or not cycle.keep_alive or message.get("more_body", False) or cycle.scope["method"] == "HEAD":
        return False
    try:
        names, values = zip(*cycle.default_headers, *head.get("headers", ()), strict=True)
        name_bytes = b"".join(names)
        if HEADER_RE.search(name_bytes) or HEADER_VALUE_RE.search(b"".join(values)):
            return False
    except (TypeError, ValueError):  # not pairs of bytes
        return False
    if not name_bytes.islower():  # uvicorn writes names lower-cased
        names = tuple(map(bytes.lower, names))
    if b"transfer-encoding" in names or b"connection" in names:  # framing uvicorn reads more into
        return False
    body = message.get("body", b"")
    declared = values[names.index(b"content-length")]
    if not declared.isdigit() or int(declared) != len(body):
        return False
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    cycle.chunked_encoding = False
    cycle.transport.write(b"".join([line, *map(_HEADER_LINE.__mod__, zip(names, values, strict=True)), b"\r\n", body]))
    cycle.response_complete = True
    cycle.message_event.set()
    cycle.on_response()
    return True


_HEADER_LINE = b"%s: %s\r\n"


def _has_length(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    if type(headers) is list and headers and headers[-1][0] == b"content-length":  # send_reply puts it last
        return True
    for name, _ in headers:  # noqa: SIM110 (a loop, not any() over a generator: no generator per reply)
        if name.lower() == b"content-length":
            return True
    return False


def guarded_websocket_protocol() -> type[asyncio.Protocol] | None:
    """The server's WebSocket protocol, answering a handshake it cannot parse with 400 and a
    close (the library itself sends nothing); ``None`` without a WebSocket library, when
    uvicorn serves upgrades as plain HTTP and the app refuses them."""
    base: Any = AutoWebSocketsProtocol
    if base is None:
        return None

    class GuardedWebSocketProtocol(base):  # type: ignore[misc]
        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            conn = getattr(self, "conn", None)
            failed = getattr(conn, "handshake_exc", None) is not None
            if failed and not self.handshake_initiated and not self.transport.is_closing():
                self.transport.write(BAD_HANDSHAKE)
                self.transport.close()

        def shutdown(self) -> None:
            scope = getattr(self, "scope", None)
            extensions = scope.get("extensions") if isinstance(scope, dict) else None
            busy = extensions.get(BUSY) if isinstance(extensions, dict) else None
            if isinstance(extensions, dict) and callable(busy) and busy():
                extensions[DRAIN] = True  # the app closes the socket (1001) once its response is done
                return
            super().shutdown()

        if _sans_io(base):

            async def run_asgi(self) -> None:
                if _has_sans_io_parts(self):
                    self.scope["extensions"][SEND_MANY] = self.send_many
                await super().run_asgi()

            async def send_many(self, texts: Sequence[bytes]) -> None:
                """``texts`` as text messages, framed together, in one write; as ``send`` would
                one by one where the socket is not open (before the accept, after a close)."""
                await self.writable.wait()
                if self.disconnected:
                    raise ClientDisconnected()
                if not self.handshake_complete or self.close_sent or self.initial_response is not None:
                    for text in texts:
                        await self.send({"type": "websocket.send", "text": text.decode()})
                    return
                conn = self.conn
                if not _frames_itself(conn):
                    try:  # the library's own checks and framing
                        for text in texts:
                            conn.send_text(text)
                    except _InvalidState:
                        raise ClientDisconnected() from None
                    self.transport.write(b"".join(conn.data_to_send()))
                    return
                pending = conn.data_to_send()  # what the library queued before (a pong): first
                self.transport.write(text_frames(texts, pending))

    return GuardedWebSocketProtocol


def _frames_itself(conn: Any) -> bool:
    """Whether the app's texts may be framed here: the socket is open, no extension transforms
    frames, no fragmented message is under way (else the library frames them, with its checks)."""
    return (
        getattr(conn, "state", None) is _OPEN
        and not getattr(conn, "extensions", True)
        and getattr(conn, "expect_continuation_frame", True) is False
    )


_MEDIUM = struct.Struct("!BBH").pack
_LONG = struct.Struct("!BBQ").pack


def text_frames(texts: Sequence[bytes], before: Sequence[bytes] = ()) -> bytes:
    """``texts`` as a server's unfragmented text frames (unmasked, no extension), after the
    bytes ``before``, in one buffer: framed in one pass, not through the library's frame
    objects one message at a time."""
    parts = list(before)
    append = parts.append
    for text in texts:
        size = len(text)
        if size < 126:
            append(bytes((0x81, size)))
        elif size < 65536:
            append(_MEDIUM(0x81, 126, size))
        else:
            append(_LONG(0x81, 127, size))
        append(text)
    return b"".join(parts)


_SANS_IO_PARTS = ("writable", "disconnected", "handshake_complete", "close_sent", "initial_response", "transport")


def _has_sans_io_parts(protocol: Any) -> bool:
    """Whether the protocol still has the parts :data:`SEND_MANY` uses (uvicorn's internals: a
    release that renames one leaves the app sending one message at a time, as without it)."""
    conn = getattr(protocol, "conn", None)
    return (
        all(hasattr(protocol, part) for part in _SANS_IO_PARTS)
        and hasattr(conn, "send_text")
        and hasattr(conn, "data_to_send")
    )


def _sans_io(base: Any) -> bool:
    """uvicorn's protocol on the websockets library's sans-I/O connection (``conn``, ``writable``)."""
    return getattr(base, "__name__", "") == "WebSocketsSansIOProtocol"
