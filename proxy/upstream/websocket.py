"""A client WebSocket (RFC 6455) to an upstream, on a connection the proxy opens itself.

aiohttp's WebSocket client, which served here before, cost a coroutine, a message object and
a queue hop per event and a heartbeat reschedule per read. Here the connection is a dedicated
one of the pool (:mod:`proxy.upstream.pool`: the egress check, TLS, ``TCP_NODELAY``, at most
its limit open at once), its protocol swapped for this one; the handshake is one write; the
frames of a read are parsed in one pass into a queue of messages, and every message already
received is taken without waiting (one wake-up of the reader per read, not per message).

What it does as aiohttp's client did, for :mod:`proxy.upstream.socket`: text and binary
messages arrive as bytes, fragments joined; a message as large as ``max_size`` or larger
fails the read with :class:`MessageTooBig` (and the socket is closed with 1009); a protocol
error closes it with 1002; a close from the peer is answered and ends the reads with
:class:`Closed` and its code (1005 when it gave none, 1006 when the connection was lost);
pings are answered; one is sent after ``heartbeat`` seconds without a byte received, and a
peer that sends nothing within half that again is closed (1006). No extension and no
subprotocol are offered; nothing is compressed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from collections import deque
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

import httpx

from proxy.upstream.http1 import wake
from proxy.upstream.pool import ConnectionPool, Origin
from proxy.upstream.transport import request_head
from proxy.upstream.websocket_frames import (
    CLOSE_CODES,
    HandshakeRefused,
    check_answer,
    client_frame,
    mask,
)

__all__ = ["Closed", "HandshakeRefused", "MessageTooBig", "UpstreamWebSocket", "open_websocket"]

CLOSE_WAIT = 2.0
"""Seconds a close waits for the peer's answer to its close frame (aiohttp's, kept)."""
_HEAD_LIMIT = 65536
_HIGH_WATER = 1 << 18
"""Message bytes held unread before the connection stops reading (a slow reader)."""
_LOW_WATER = 1 << 16
_DEFAULT_PORTS = {"ws": ("http", 80), "wss": ("https", 443)}
_UPGRADE = (("upgrade", "websocket"), ("connection", "Upgrade"), ("sec-websocket-version", "13"))
_TEXT, _CLOSE, _PING, _PONG = 0x1, 0x8, 0x9, 0xA
PROTOCOL_ERROR, INVALID_TEXT, TOO_BIG, LOST, NO_CODE = 1002, 1007, 1009, 1006, 1005


class Closed(Exception):
    """The socket is closed; ``code`` is why (the peer's close code, else 1006 or an error's)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class MessageTooBig(Exception):
    """A message of ``max_size`` bytes or more arrived (the socket was closed with 1009)."""


async def open_websocket(
    pool: ConnectionPool,
    url: str,
    headers: Sequence[tuple[str, str]],
    *,
    max_size: int,
    heartbeat: float,
    connect_timeout: float | None = None,
) -> UpstreamWebSocket:
    """A WebSocket to ``url`` (``ws://`` or ``wss://``) on a new connection of ``pool``, its
    handshake carrying ``headers``. Fails with :class:`HandshakeRefused`, or the pool's
    ``httpx.ConnectError`` / ``ConnectTimeout``, or ``OSError`` (the connection lost)."""
    origin, target = _origin(url)
    connection = await pool.dedicated(origin, connect_timeout, connect_timeout)  # an upgrade is never pooled
    transport = connection.transport
    if transport is None:  # pragma: no cover - a connection is made with its transport
        pool.free_dedicated()
        raise ConnectionResetError("the connection closed as it opened")
    socket = UpstreamWebSocket(max_size, heartbeat, on_lost=pool.free_dedicated)
    transport.set_protocol(socket)
    socket.connection_made(transport)
    try:
        await socket.handshake(target, origin.host_header, headers)
    except BaseException:
        socket.abort()
        raise
    return socket


def _origin(url: str) -> tuple[Origin, str]:
    parts = urlsplit(url)
    scheme, default = _DEFAULT_PORTS.get(parts.scheme.lower(), ("", 0))
    if not scheme or not parts.hostname:
        raise httpx.UnsupportedProtocol(f"not a WebSocket URL: {url!r}")
    host, port = parts.hostname, parts.port or default
    shown = f"[{host}]" if ":" in host else host
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(scheme, host, port, shown if port == default else f"{shown}:{port}"), target


class UpstreamWebSocket(asyncio.Protocol):
    """One client WebSocket: its handshake, then frames in, messages out."""

    def __init__(self, max_size: int, heartbeat: float, on_lost: Callable[[], None] | None = None) -> None:
        """``on_lost``: called once, when the connection is gone (its place in the pool freed)."""
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self._max_size = max_size
        self._heartbeat = heartbeat
        self.transport: asyncio.Transport | None = None
        self.closed = False
        """No more messages can be sent: a close was received or sent, or the connection lost."""
        self.close_code: int | None = None
        self._head: bytearray | None = bytearray()
        """The handshake's answer as it arrives (None once the socket is open)."""
        self._key = b""
        self._opened: asyncio.Future[None] | None = None
        self._buffer = bytearray()
        self._fragments: list[bytes] | None = None
        self._fragment_size = 0
        self._messages: deque[bytes] = deque()
        self._queued = 0
        self._paused = False
        self._end: Exception | None = None
        """What a read gets once the messages received before it are taken."""
        self._waiter: asyncio.Future[None] | None = None
        self._close_answered: asyncio.Future[None] | None = None
        self._last_read = self._loop.time()
        self._pinged_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    # -- the handshake

    async def handshake(self, target: str, host: str, headers: Sequence[tuple[str, str]]) -> None:
        """Ask for the upgrade and wait for the upstream's 101 (RFC 6455, 4.1)."""
        self._key = base64.b64encode(os.urandom(16))
        asked = [(name, value) for name, value in headers if name.lower() != "sec-websocket-key"]
        names = {name.lower() for name, _ in asked}
        asked += [pair for pair in _UPGRADE if pair[0] not in names]  # the caller's own win, as in aiohttp
        asked.append(("sec-websocket-key", self._key.decode()))
        self._opened = self._loop.create_future()
        self._write(request_head("GET", target, host, asked, None))
        await self._opened
        self._beat_later(self._heartbeat)

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._last_read = self._loop.time()
        head = self._head
        if head is not None:
            head += data
            end = head.find(b"\r\n\r\n")
            if end < 0:
                if len(head) > _HEAD_LIMIT:
                    self._handshake_failed(HandshakeRefused(None, "the upstream's answer to the upgrade is too long"))
                return
            rest = bytes(head[end + 4 :])
            self._head = None
            try:
                check_answer(bytes(head[:end]), self._key)
            except HandshakeRefused as refused:
                self._handshake_failed(refused)
                return
            if self._opened is not None and not self._opened.done():
                self._opened.set_result(None)
            if not rest:
                return
            data = rest
        buffer = self._buffer
        if buffer:
            buffer += data
            used = self._frames(buffer)
            del buffer[:used]
        else:
            used = self._frames(data)
            if used < len(data):
                buffer += data[used:]
        if self._messages:
            self._wake()

    def _frames(self, data: bytes | bytearray) -> int:
        """Parse the whole frames at the start of ``data``; how many bytes they took."""
        pos, end = 0, len(data)
        while end - pos >= 2 and self._end is None:
            first, second = data[pos], data[pos + 1]
            size, start = second & 0x7F, pos + 2
            if size == 126:
                if end - start < 2:
                    break
                size, start = (data[start] << 8) | data[start + 1], start + 2
            elif size == 127:
                if end - start < 8:
                    break
                size, start = int.from_bytes(data[start : start + 8], "big"), start + 8
            opcode = first & 0x0F
            if opcode < 3 and self._max_size and size >= self._max_size - self._fragment_size:
                self._fail(TOO_BIG, MessageTooBig("An upstream WebSocket message is larger than max_reply_bytes."))
                break
            masked = second & 0x80
            if end - start < size + (4 if masked else 0):
                break
            if masked:  # a server must not mask: taken anyway, as aiohttp took it
                key, start = bytes(data[start : start + 4]), start + 4
                payload = mask(bytes(data[start : start + size]), key)
            else:
                piece = data[start : start + size]
                payload = piece if type(piece) is bytes else bytes(piece)
            pos = start + size
            if first == 0x81 and not masked and self._fragments is None and not self.closed:
                self._messages.append(payload)  # the common frame, a whole text message: queued here
                self._queued += size
            else:
                self._frame(first, opcode, payload)
        if self._queued > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        return pos

    def _frame(self, first: int, opcode: int, payload: bytes) -> None:
        fin = first & 0x80
        if first & 0x70:  # no extension was negotiated: no reserved bit may be set
            self._fail(PROTOCOL_ERROR)
        elif opcode == _TEXT or opcode == 0x2:
            if self._fragments is not None:
                self._fail(PROTOCOL_ERROR)
            elif fin:
                self._queue(payload)
            else:
                self._fragments, self._fragment_size = [payload], len(payload)
        elif opcode == 0x0:
            if self._fragments is None:
                self._fail(PROTOCOL_ERROR)
                return
            self._fragments.append(payload)
            self._fragment_size += len(payload)
            if fin:
                message = b"".join(self._fragments)
                self._fragments, self._fragment_size = None, 0
                self._queue(message)
        elif opcode < _CLOSE or opcode > _PONG or not fin or len(payload) > 125:
            self._fail(PROTOCOL_ERROR)
        elif opcode == _CLOSE:
            self._peer_closed(payload)
        elif opcode == _PING:
            self._write(client_frame(_PONG, payload))

    def _queue(self, message: bytes) -> None:
        if self.closed:  # after a close of ours: nobody reads it
            return
        self._messages.append(message)
        self._queued += len(message)
        if self._queued > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def _peer_closed(self, payload: bytes) -> None:
        """A close frame: answered (unless it answers ours), then the connection is let go."""
        code = NO_CODE
        if len(payload) == 1:
            self._fail(PROTOCOL_ERROR)
            return
        if payload:
            code = int.from_bytes(payload[:2], "big")
            if code < 3000 and code not in CLOSE_CODES:
                self._fail(PROTOCOL_ERROR)
                return
            try:
                payload[2:].decode()
            except UnicodeDecodeError:
                self._fail(INVALID_TEXT)
                return
        if not self.closed:
            self._write(client_frame(_CLOSE, (1000).to_bytes(2, "big")))
        self._ended(code, Closed(code))
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        on_lost, self._on_lost = self._on_lost, None
        if on_lost is not None:
            on_lost()
        self._ended(LOST, Closed(LOST))
        if self._head is not None:
            self._handshake_failed(ConnectionResetError("the upstream closed the connection during the handshake"))

    # -- reading

    def ready(self) -> bool:
        """A message already received waits to be read (reading it waits for nothing)."""
        return bool(self._messages)

    def take(self) -> bytes:
        """The oldest message already received (:meth:`ready` said there is one)."""
        message = self._messages.popleft()
        self._queued -= len(message)
        if self._paused and self._queued < _LOW_WATER and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return message

    def take_all(self) -> list[bytes]:
        """Every message already received, oldest first (none left queued)."""
        messages = list(self._messages)
        self._messages.clear()
        self._queued = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return messages

    def give_back(self, messages: list[bytes]) -> None:
        """Messages taken but not read: first again, in their order."""
        self._messages.extendleft(reversed(messages))
        self._queued += sum(map(len, messages))

    async def receive(self, wait: float | None) -> bytes:
        """The next message, waited ``wait`` seconds at most (``TimeoutError``); once none is
        left, the socket's end: :class:`Closed` or :class:`MessageTooBig`."""
        if not self._messages:
            if self._end is None:
                waiter = self._waiter = self._loop.create_future()
                if wait is None:
                    await waiter
                else:
                    timer = self._loop.call_later(wait, _expire, waiter)
                    try:
                        await waiter
                    finally:
                        timer.cancel()
            if not self._messages:
                raise self._end or Closed(LOST)
        return self.take()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        wake(waiter)

    # -- writing and closing

    def send(self, text: bytes) -> None:
        """One text message; ``ConnectionResetError`` once the socket is closed."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the upstream WebSocket is closed")
        self.transport.write(client_frame(_TEXT, text))

    async def close(self, code: int = 1000) -> None:
        """Send a close frame and wait :data:`CLOSE_WAIT` seconds at most for the peer's answer."""
        if self.closed:
            self.abort()
            return
        self._write(client_frame(_CLOSE, code.to_bytes(2, "big")))
        self.closed = True
        self.close_code = code
        answered = self._close_answered = self._loop.create_future()
        self._messages.clear()
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT):
                await answered
        self.abort()

    def abort(self) -> None:
        self._stop_beating()
        if self.transport is not None:
            self.transport.close()

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _fail(self, code: int, error: Exception | None = None) -> None:
        """A fault in what the peer sent: closed with ``code``; reads end with ``error``."""
        if not self.closed:
            self._write(client_frame(_CLOSE, code.to_bytes(2, "big")))
        self._ended(code, error or Closed(code))
        if self.transport is not None:
            self.transport.close()

    def _ended(self, code: int, error: Exception) -> None:
        if self._end is None:
            self._end = error
        if self.close_code is None:
            self.close_code = code
        self.closed = True
        self._stop_beating()
        self._wake()
        answered = self._close_answered
        if answered is not None and not answered.done():
            answered.set_result(None)

    def _handshake_failed(self, error: Exception) -> None:
        self._head = None
        opened = self._opened
        if opened is not None and not opened.done():
            opened.set_exception(error)
        if self.transport is not None:
            self.transport.close()

    # -- the heartbeat

    def _beat_later(self, delay: float) -> None:
        if self._heartbeat > 0 and not self.closed:
            self._timer = self._loop.call_later(delay, self._beat)

    def _beat(self) -> None:
        """Ping a socket silent for ``heartbeat`` seconds; close one silent since the last ping."""
        self._timer = None
        now = self._loop.time()
        pinged, self._pinged_at = self._pinged_at, None
        if pinged is not None and self._last_read < pinged:  # no pong, nor any other byte: the peer is gone
            self._ended(LOST, Closed(LOST))
            if self.transport is not None:
                self.transport.abort()
            return
        quiet = now - self._last_read
        if quiet < self._heartbeat:
            self._beat_later(self._heartbeat - quiet)
            return
        self._pinged_at = now
        self._write(client_frame(_PING, b""))
        self._beat_later(self._heartbeat / 2)

    def _stop_beating(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())
