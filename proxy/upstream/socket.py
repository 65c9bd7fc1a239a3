"""One upstream Responses WebSocket per client socket, so the upstream's ``store=false`` chains live.

A client socket's calls (its turns' attempts, a nudge, the summary of an ending, the judge where
it asks the agent's own upstream) go as ``response.create`` events on a socket of its own to the
upstream, opened at the first call (``ws(s)://`` of the tenant's upstream base + ``/responses``,
with that call's headers: the same key as over HTTP) and kept for every later call to that URL
with those credentials. A call to anywhere else, or one while another is on the socket, goes
over HTTP. What the socket remembers (``store=false``: its most recent response) is followed by
:class:`~proxy.upstream.socket_chain.SocketChain`, which turns a whole call back into a
continuation where the upstream can go on from its memory.

An upstream that refuses the upgrade (any answer but 101: 426, 404, 400…) or cannot be reached
serves that client socket over HTTP: the pipeline sends whole conversations, nothing is lost. A
refusal that says "no WebSocket here" is remembered for the upstream (later sockets go straight
to HTTP); either is logged once per upstream (``upstream_websocket_unavailable``) and counted per
socket (``loopwarden_upstream_websockets_total{outcome}``).

Events come back as the stream an HTTP call gives (``text/event-stream``, one ``data:`` per
message, ended by the terminal event); a call not streamed (a summary, the judge) gets the
terminal response as its JSON body, and an ``error`` event before any other its ``status`` and
``{"error": …}``: retries and relayed errors work as over HTTP. Bounds: the connect by
``connect_timeout``; each message's wait by ``read_timeout``; a message, and a reply's messages
together, by ``max_reply_bytes``; pings every :data:`PING_SECS` (a peer that does not answer is
closed). A socket that breaks before a call's first event is reopened once and the call sent
again whole; one that breaks mid-response fails the call like a cut stream (:attr:`UpstreamSocket.lost`
keeps its close code for the client's socket). A response the proxy stops reading (the client
left) closes the socket: its rest would otherwise come first on the next call."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

import httpx
import msgspec

from proxy.errors import UpstreamReplyTooLarge
from proxy.observe.logs import log_event
from proxy.observe.metrics import Metrics
from proxy.settings import Settings
from proxy.upstream.socket_chain import SocketChain
from proxy.upstream.socket_events import (
    ENDINGS,
    TERMINAL,
    TYPE_FIRST,
    ended_response,
    error_fields,
    event_type,
    is_terminal,
)
from proxy.upstream.socket_events import ErrorEvent as _Error
from proxy.upstream.socket_events import error_response as _error_response
from proxy.upstream.socket_events import sse_event as _frame
from proxy.upstream.socket_events import sse_events as _frames
from proxy.upstream.transport import READ_BODY, READ_LIMIT, UpstreamTransport, headers_from_raw
from proxy.upstream.websocket import Closed, HandshakeRefused, MessageTooBig, UpstreamWebSocket, open_websocket

__all__ = [
    "PING_SECS",
    "TERMINAL",
    "UpstreamSocket",
    "UpstreamSockets",
    "current",
    "event_type",
    "is_terminal",
    "through",
]

PING_SECS = 30.0
"""Seconds between the proxy's pings on an upstream socket (the pong is awaited half as long)."""
_RETRIED_CODES = frozenset({"websocket_connection_limit_reached"})
"""Error events that say the socket, not the call, is done: reopened and sent again."""
_NOT_HANDSHAKE = frozenset(
    {"content-length", "content-type", "transfer-encoding", "connection", "upgrade", "keep-alive", "host", "te"}
)
_CREDENTIALS = frozenset({b"authorization", b"api-key", b"x-api-key", b"x-goog-api-key"})
_EVENT_STREAM, _JSON = [(b"content-type", b"text/event-stream")], [(b"content-type", b"application/json")]
_REMEMBERED = 256
"""Upstreams whose refusal is remembered (and logged), at most (a tenants file names a handful)."""
_NO_WEBSOCKET = frozenset({200, 404, 405, 426, 501, 505})
"""Handshake refusals that say the route has no WebSocket (a 400 may be one client's bad header)."""


_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode
_current: ContextVar[UpstreamSocket | None] = ContextVar("loopwarden_upstream_socket", default=None)


class through:
    """The calls made inside go over ``socket`` where it takes them (a context variable carries
    it, so the upstream client finds it without every caller threading it through). A class,
    not a generator-based context manager: no generator per turn."""

    __slots__ = ("_socket", "_token")

    def __init__(self, socket: UpstreamSocket | None) -> None:
        self._socket = socket

    def __enter__(self) -> None:
        self._token = _current.set(self._socket)

    def __exit__(self, *_: object) -> None:
        _current.reset(self._token)


def current() -> UpstreamSocket | None:
    return _current.get()


class _Broken(Exception):
    """The upstream socket closed or failed while a call waited on it."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class UpstreamSockets:
    """Opens the upstream sockets of one upstream client; remembers upstreams that refused."""

    def __init__(self, settings: Settings, transport: httpx.AsyncBaseTransport, metrics: Metrics | None) -> None:
        self.http = transport
        self._pool = transport if isinstance(transport, UpstreamTransport) else None
        self._on = settings.upstream_websocket == "auto" and self._pool is not None
        self.connect_timeout = settings.connect_timeout
        self.max_size = settings.max_reply_bytes
        self._metrics = metrics
        self._refused: dict[str, int] = {}
        self._said: set[str] = set()

    def open(self, headers: Sequence[tuple[str, str]] = ()) -> UpstreamSocket | None:
        """A client socket's upstream socket (connected at its first call; None when off), its
        handshake carrying ``headers`` (the client's) too."""
        return UpstreamSocket(self, headers) if self._on else None

    def refused(self, url: str) -> bool:
        return url.partition("?")[0] in self._refused

    async def connect(self, url: str, headers: Sequence[tuple[str, str]]) -> UpstreamWebSocket:
        if self._pool is None:  # open() hands out no socket then: a caller that skipped it is a bug
            raise RuntimeError("upstream WebSockets need the proxy's own transport")
        pool = self._pool.connections  # the egress check, TLS
        async with asyncio.timeout(self.connect_timeout):
            return await open_websocket(
                pool, url, headers, max_size=self.max_size, heartbeat=PING_SECS, connect_timeout=self.connect_timeout
            )

    def unavailable(self, url: str, status: int | None) -> None:
        """A socket served over HTTP: counted; logged once per upstream; a "no WebSocket here" remembered."""
        outcome = "unreachable" if status is None else "refused"
        self.count(outcome)
        upstream = url.partition("?")[0]  # the client writes the query: one entry per upstream
        if status in _NO_WEBSOCKET and len(self._refused) < _REMEMBERED:
            self._refused[upstream] = status
        if upstream in self._said or len(self._said) >= _REMEMBERED:
            return
        self._said.add(upstream)
        fields = {"upstream": upstream, "reason": outcome, "status": status, "served_over": "http"}
        log_event("upstream_websocket_unavailable", fields, logging.WARNING)

    def count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.of(self._metrics.upstream_websockets, outcome).inc()


class UpstreamSocket(httpx.AsyncBaseTransport):
    """A client socket's calls upstream: over its own WebSocket where it takes them, else HTTP."""

    def __init__(self, owner: UpstreamSockets, headers: Sequence[tuple[str, str]]) -> None:
        self._owner = owner
        self._extra = [(name.lower(), value) for name, value in headers]
        self._ws: UpstreamWebSocket | None = None
        self._url: str | None = None
        self._credentials: tuple[tuple[bytes, bytes], ...] = ()
        self._busy = False
        self.chain = SocketChain()
        self.over = ""
        """How the calls went: "websocket", "http" (the upstream refused), "" (none yet)."""
        self.lost: int | None = None
        """The close code of an upstream socket that broke mid-response."""
        self._expected: tuple[bytes, dict[str, Any]] | None = None

    def expect(self, body: bytes, payload: dict[str, Any]) -> None:
        """A turn's body and that body decoded: a call of exactly these bytes is not decoded again."""
        self._expected = (body, payload)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        payload = self._payload(request.content) if self._takes(request) else None
        if not isinstance(payload, dict):
            return await self._owner.http.handle_async_request(request)
        self._busy = True
        try:
            response = await self._call(request, payload)
        except BaseException:  # cancelled too (a deadline): its response must not answer the next call
            await self.abandon()
            raise
        if not isinstance(response.stream, _Events):
            self._busy = False
        return response

    def _payload(self, content: bytes) -> Any:
        expected = self._expected
        if expected is not None and content == expected[0]:
            return expected[1]
        return _decode(content)

    def _takes(self, request: httpx.Request) -> bool:
        if self.over == "http" or self._busy or request.method != "POST":
            return False
        credentials = tuple([(k.lower(), v) for k, v in request.headers.raw if k.lower() in _CREDENTIALS])
        url = str(request.url)
        if self._url is None:
            if not request.url.path.endswith("/responses"):
                return False
            self._url, self._credentials = url, credentials
        return url == self._url and credentials == self._credentials

    async def _call(self, request: httpx.Request, payload: dict[str, Any]) -> httpx.Response:
        timeout = request.extensions.get("timeout", {}).get("read")
        for attempt in (1, 2):
            ws = await self._connected(request)
            if ws is None:
                return await self._owner.http.handle_async_request(request)
            frame, whole, chained = self.chain.event(payload)
            try:
                ws.send(frame)
                first = await self._message(ws, timeout)
            except (_Broken, OSError):  # nothing came back: a fresh socket takes it whole
                await self._close()
                if attempt == 2:
                    raise httpx.RemoteProtocolError("The upstream closed its WebSocket.", request=request) from None
                continue
            if event_type(first) == b"error":
                self.chain.forget()  # as the API: an error empties the socket's memory
                try:
                    error = msgspec.json.decode(first, type=_Error)
                except msgspec.MsgspecError:
                    raise httpx.RemoteProtocolError("A malformed upstream error event.", request=request) from None
                code = error_fields(error).get("code")
                if attempt == 1 and (code in _RETRIED_CODES or (chained and code == "previous_response_not_found")):
                    if code in _RETRIED_CODES:
                        await self._close()
                    continue
                return _error_response(error, request)
            if request.extensions.get(READ_BODY):
                return await self._whole(request, ws, first, whole, timeout)
            events = _Events(self, ws, first, whole, timeout, request.extensions.get(READ_LIMIT))
            return httpx.Response(200, headers=headers_from_raw(_EVENT_STREAM), stream=events, request=request)
        raise AssertionError("unreachable")

    async def _connected(self, request: httpx.Request) -> UpstreamWebSocket | None:
        """The open socket, or a new one; None once the upstream refused (served over HTTP)."""
        if self._ws is not None and not self._ws.closed:
            return self._ws
        self._ws = None
        url = _socket_url(request.url)
        if self._owner.refused(url):
            self.over = "http"
            self._owner.count("refused")
            return None
        headers = [(k, v) for k, v in request.headers.multi_items() if k not in _NOT_HANDSHAKE]
        headers += [(k, v) for k, v in self._extra if k not in request.headers]
        try:
            self._ws = await self._owner.connect(url, headers)
        except HandshakeRefused as exc:
            self._owner.unavailable(url, exc.status)
        except (httpx.TransportError, OSError, TimeoutError):
            self._owner.unavailable(url, None)
        if self._ws is None:
            self.over = "http"
            return None
        self.over = "websocket"
        self.chain.forget()
        self._owner.count("opened")
        return self._ws

    async def _message(self, ws: UpstreamWebSocket, wait: float | None) -> bytes:
        """The next message's bytes, waited ``wait`` seconds at most; :class:`_Broken` if the socket ends."""
        if ws.ready():
            return ws.take()
        try:
            return await ws.receive(wait)
        except TimeoutError:
            await self._close()
            raise httpx.ReadTimeout("The upstream's WebSocket sent nothing in time.") from None
        except MessageTooBig:
            await self._close()
            raise UpstreamReplyTooLarge("An upstream WebSocket message is larger than max_reply_bytes.") from None
        except Closed as closed:
            await self._close()
            raise _Broken(closed.code) from None

    async def _whole(
        self,
        request: httpx.Request,
        ws: UpstreamWebSocket,
        first: bytes,
        whole: list[Any] | None,
        wait: float | None,
    ) -> httpx.Response:
        """A call not streamed: its events read to the terminal one, whose response is the body."""
        events = _Events(self, ws, first, whole, wait, request.extensions.get(READ_LIMIT))
        try:
            async for _ in events:
                pass
        finally:
            await events.aclose()
        event: Any = _decode(events.last)
        if not isinstance(event, dict):
            event = {}
        if event.get("type") == "error":
            return _error_response(msgspec.convert(event, _Error), request)
        return httpx.Response(200, headers=_JSON, content=_encode(event.get("response") or {}), request=request)

    def answered(self, whole: list[Any] | None, terminal: bytes) -> None:
        """A response ended on the socket: it is the one a later call may go on from."""
        try:
            response = ended_response(terminal)
        except msgspec.DecodeError:
            response = None
        if response is not None:
            self.chain.answered(whole, response)
        else:
            self.chain.forget()

    def finished(self, lost: int | None = None) -> None:
        """A call's events ended; ``lost``: the close code of a socket that broke mid-response."""
        self._busy = False
        if lost is not None:
            self.lost = lost

    async def _close(self) -> None:
        """Let the socket go (the next call opens another, with nothing to go on from)."""
        ws, self._ws = self._ws, None
        self.chain.forget()
        if ws is not None and not ws.closed:
            with contextlib.suppress(Exception):
                await ws.close()

    async def abandon(self) -> None:
        """A response left unread: the socket goes with it."""
        await self._close()
        self._busy = False

    aclose = _close


class _Events(httpx.AsyncByteStream):
    """A call's messages as the SSE stream of an HTTP call, to its terminal event."""

    def __init__(
        self,
        owner: UpstreamSocket,
        ws: UpstreamWebSocket,
        first: bytes,
        whole: list[Any] | None,
        timeout: float | None,
        limit: int | None,
    ) -> None:
        self._owner = owner
        self._ws = ws
        self._pending: bytes | None = first
        self._whole = whole
        self._timeout = timeout
        self._left = limit
        self._done = False
        self.last = b""
        """The latest message (the terminal event, once the stream ended)."""

    def __aiter__(self) -> _Events:
        return self

    async def __anext__(self) -> bytes:
        """The next message as an SSE event, with every message already received after it: the
        reader then takes them in one go, as it takes an HTTP stream's chunk of many events
        (one wake-up of the whole call chain per batch, not per event)."""
        if self._done:
            raise StopAsyncIteration
        data = self._pending
        self._pending = None
        if data is None:
            data = await self._next(self._timeout)
        self._take(data)
        ws = self._ws
        if self._done or not ws.ready():
            return _frame(data)
        messages = [data]
        batch = ws.take_all()  # taken as they are: no wait, no call per message but for an ending
        for position, data in enumerate(batch):
            if self._over(data):
                await self._too_large()
            messages.append(data)
            if data.startswith(ENDINGS) or not data.startswith(TYPE_FIRST):
                self._take(data)
                if self._done:  # what follows the call's end is the next call's
                    if position + 1 < len(batch):
                        ws.give_back(batch[position + 1 :])
                    break
        self.last = messages[-1]
        return _frames(messages)

    async def _next(self, wait: float | None) -> bytes:
        try:
            data = await self._owner._message(self._ws, wait)
        except _Broken as broken:
            self._done = True
            self._owner.finished(broken.code)
            raise httpx.RemoteProtocolError("The upstream closed its WebSocket mid-response.") from None
        if self._over(data):
            await self._too_large()
        return data

    def _over(self, data: bytes) -> bool:
        """Whether ``data`` takes the reply past its read limit."""
        if self._left is None:
            return False
        self._left -= len(data)
        return self._left < 0

    async def _too_large(self) -> None:
        await self.aclose()
        raise UpstreamReplyTooLarge("The upstream model API's reply is larger than max_reply_bytes.")

    def _take(self, data: bytes) -> None:
        """One message of the call's; the terminal one (or an error) ends the call."""
        self.last = data
        if not data.startswith(ENDINGS) and data.startswith(TYPE_FIRST):
            return  # a type read off the opening, and not an ending one: no slice, no call
        kind = event_type(data)
        if kind in TERMINAL or kind == b"error":
            self._done = True
            if kind == b"error":
                self._owner.chain.forget()
            else:
                self._owner.answered(self._whole, data)
            self._owner.finished()

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            await self._owner.abandon()


def _socket_url(url: httpx.URL) -> str:
    """The WebSocket URL of an HTTP one (``https`` → ``wss``, ``http`` → ``ws``)."""
    return str(url.copy_with(scheme="wss" if url.scheme == "https" else "ws"))
