"""One keep-alive HTTP/1.1 connection to an upstream: a request goes out in one write, the
reply is parsed by httptools (the C parser uvicorn serves the proxy's own side with).

Why not aiohttp's client: on a guarded agent step it cost a fifth of the proxy's CPU (request
and response objects, header multidicts, a payload writer and a stream reader per call, a
timer per read), for a proxy that needs none of it: no cookies, redirects, decompression or
auto headers. Here a call costs the head's bytes, one write, the parser's callbacks and one
future per wait.

What each failure means is kept apart as the retry logic needs it (see
:mod:`proxy.upstream.transport`): the connection closed before any reply byte, a reset, a body
cut short, a reply that does not parse, a read that waited past its read_timeout.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable

import httptools
import httpx

from proxy.errors import UpstreamReplyTooLarge

__all__ = ["Http1Connection", "too_large", "wake"]

_HIGH_WATER = 1 << 18
"""Body bytes held unread before the connection stops reading (a slow reader of a stream)."""
_LOW_WATER = 1 << 16


def too_large() -> UpstreamReplyTooLarge:
    return UpstreamReplyTooLarge("The upstream model API's reply is larger than the proxy's max_reply_bytes.")


class Http1Connection(asyncio.Protocol):
    """A connection and the one exchange in flight on it (HTTP/1.1 has no more)."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_complete",
        "_error",
        "_head_done",
        "_head_only",
        "_in_flight",
        "_informational",
        "_keep_alive",
        "_last_read",
        "_limit",
        "_loop",
        "_on_lost",
        "_parser",
        "_paused",
        "_received",
        "_waiter",
        "_whole",
        "closed",
        "headers",
        "idle_since",
        "reason",
        "status",
        "transport",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, on_lost: Callable[[Http1Connection], None] | None = None
    ) -> None:
        """``on_lost``: called with the connection when it closes (the pool forgets it)."""
        self._loop = loop
        self._on_lost = on_lost
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._in_flight = False
        self._reset(None, False)

    def _reset(self, limit: int | None, head_only: bool) -> None:
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._received = 0
        self._limit = limit
        self._waiter: asyncio.Future[None] | None = None
        self._head_done = False
        self._complete = False
        self._keep_alive = False
        self._informational = False
        self._error: Exception | None = None
        self._paused = False
        self._whole = False
        self._last_read = 0.0
        self._head_only = head_only

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self._in_flight:  # bytes nobody asked for: the connection cannot be trusted again
            self.abort()
            return
        self._last_read = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed reply: {exc}"))
            self.abort()

    def eof_received(self) -> bool:
        return False  # close our side too: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._in_flight and not self._complete and self._error is None:
            if self._head_done and _close_delimited(self.status, self.headers):
                self._complete = True  # a body that ends with the connection has ended
                self._wake()
            elif self._head_done:
                self._fail(httpx.RemoteProtocolError("incomplete body: the connection closed mid-reply"))
            elif isinstance(exc, OSError):
                reset = httpx.ReadError(str(exc) or "connection reset")
                reset.__cause__ = exc  # what the client tells: "connection reset"
                self._fail(reset)
            else:
                self._fail(httpx.RemoteProtocolError("server disconnected"))
        if self._on_lost is not None:
            self._on_lost(self)

    # -- httptools' callbacks

    def on_message_begin(self) -> None:
        if self._complete:  # a second reply to one request: the connection cannot be trusted again
            raise httpx.RemoteProtocolError("a reply nobody asked for")

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # "100 Continue" and the like: the reply follows
            self._informational = True
            self.reason, self.headers = b"", []
            return
        self.status = status
        self._head_done = True
        if self._head_only:  # a HEAD's reply has no body whatever it announces
            self._complete = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._complete:
            return
        if self._limit is not None:
            self._received += len(body)
            if self._received > self._limit:
                self._fail(too_large())
                self.abort()
                return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and not self._whole and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self._error is not None:  # given up on (too large): never complete
            return
        self._keep_alive = self._parser.should_keep_alive()  # the parser forgets it once the reply is done
        self._complete = True
        self._wake()

    # -- the exchange

    def send(self, data: bytes, limit: int | None, head_only: bool) -> None:
        """Write one whole request (head and body); its reply is read with :meth:`head`."""
        self._reset(limit, head_only)
        self._in_flight = True
        if self.transport is not None:
            self.transport.write(data)

    async def head(self, read_timeout: float | None, deadline: float | None = None) -> None:
        """Until the reply's status and headers are in; past ``deadline`` (the loop's clock) a
        ``TimeoutError``, as ``asyncio.timeout_at`` would raise (one timer for both limits)."""
        while not self._head_done:
            await self._wait(read_timeout, deadline)

    async def whole(self, read_timeout: float | None, deadline: float | None = None) -> bytes:
        """The reply's whole body (after :meth:`head`), within ``deadline`` as there. Read
        without pausing: a whole body is held whatever its size (a read limit bounds it)."""
        self._whole = True
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        while not self._complete:
            await self._wait(read_timeout, deadline)
        chunks = self._chunks
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def chunk(self, read_timeout: float | None) -> bytes:
        """The next piece of the body, ``b""`` once it has all been read."""
        chunks = self._chunks
        while not chunks:
            if self._complete:
                return b""
            await self._wait(read_timeout, None)
        chunk = chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered < _LOW_WATER and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    @property
    def reusable(self) -> bool:
        """The reply is read to its end and both sides keep the connection for the next."""
        return self._complete and self._error is None and not self.closed and not self._head_only and self._keep_alive

    def done(self) -> None:
        """The exchange is over (read or given up): bytes arriving now are a fault."""
        self._in_flight = False
        self.idle_since = self._loop.time()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    async def _wait(self, read_timeout: float | None, deadline: float | None) -> None:
        """Until the parser or the connection has news; a ``read_timeout`` counts from the last byte.
        A failure after the reply was complete (bytes nobody asked for) is the connection's, not the reply's."""
        if self._error is not None and not self._complete:
            raise self._error
        waiter = self._waiter = self._loop.create_future()
        if read_timeout is None and deadline is None:
            await waiter
        else:
            self._last_read = self._loop.time()
            due = self._due(read_timeout, deadline)
            timer = self._loop.call_at(due, self._timer, waiter, read_timeout, deadline)
            try:
                await waiter
            finally:
                timer.cancel()
        if self._error is not None and not self._complete:
            raise self._error

    def _due(self, read_timeout: float | None, deadline: float | None) -> float:
        read_due = math.inf if read_timeout is None else self._last_read + read_timeout
        return min(read_due, math.inf if deadline is None else deadline)

    def _timer(self, waiter: asyncio.Future[None], read_timeout: float | None, deadline: float | None) -> None:
        if waiter.done():
            return
        now = self._loop.time()
        if deadline is not None and now >= deadline:
            self._fail(TimeoutError())
        elif read_timeout is not None and now >= self._last_read + read_timeout:
            self._fail(httpx.ReadTimeout("read timeout"))
        else:  # bytes came meanwhile: wait the rest
            self._loop.call_at(self._due(read_timeout, deadline), self._timer, waiter, read_timeout, deadline)
            return
        self.abort()

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        wake(waiter)


def wake(waiter: asyncio.Future[None] | None) -> None:
    """Let the one waiting on ``waiter`` go on (nothing when none waits or it already went on)."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


_NO_BODY = frozenset({204, 304})


def _close_delimited(status: int, headers: list[tuple[bytes, bytes]]) -> bool:
    """A reply framed by neither a length nor chunks: its body is whatever came before the close."""
    if status in _NO_BODY:
        return True
    for name, _ in headers:
        low = name.lower()
        if low == b"content-length" or low == b"transfer-encoding":
            return False
    return True
