"""The proxy's upstream transport: httpx stays the client API, :mod:`proxy.upstream.http1`
moves the bytes over the keep-alive connections of :mod:`proxy.upstream.pool`.

httpx's own transport polls every pooled connection per request and collapses under
concurrency (encode/httpx#3215), and aiohttp's client, which served here before, spent a fifth
of a guarded request's CPU on features a proxy must not have. This one:

- maps each failure to the httpx error that says *when* it happened: ``ConnectError`` /
  ``ConnectTimeout`` / ``PoolTimeout`` mean the request never left; ``ReadTimeout``,
  ``ReadError`` and ``RemoteProtocolError`` mean it may have been received;
- keeps duplicate headers and adds none of its own but Host and the body's length (no
  User-Agent, Accept, encoding);
- stores no cookies at all (a shared jar would hand one tenant's cookies to the next);
- never follows redirects and never decompresses: bytes pass through as sent;
- reads at most ``READ_LIMIT`` bytes of a body when the request says so (whole or streamed),
  then fails with :class:`~proxy.errors.UpstreamReplyTooLarge` and drops the connection;
- resolves host names through the egress check (:mod:`proxy.upstream.egress`): a name never
  leads to a link-local or metadata address, whatever DNS answers.

Upstream WebSockets (:mod:`proxy.upstream.websocket`) open connections of the same pool, behind
the same egress check.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

import httpx
from aiohttp.abc import AbstractResolver

from proxy.upstream.http1 import Http1Connection, too_large
from proxy.upstream.pool import ConnectionPool, Origin

__all__ = ["READ_BODY", "READ_LIMIT", "UpstreamTransport", "headers_from_raw", "request_head"]

READ_BODY = "loopwarden.read_body"
"""Request extension: read the whole response body before returning (not for streams)."""
READ_LIMIT = "loopwarden.read_limit"
"""Request extension: the most bytes of response body to read, whole or streamed (None: no limit)."""
_CACHE_LIMIT = 1024
_CACHED_URL_CHARS = 512
"""Longest URL kept parsed: pass-through paths and queries are the client's, and a thousand
distinct long ones would otherwise pin a hundred megabytes."""
_DEFAULT_PORTS = {"http": 80, "https": 443}
_BODILESS = frozenset({"GET", "HEAD"})
"""Methods whose empty body is no body at all: sent without a length (every other one says ``0``)."""


class _ReplyStream(httpx.AsyncByteStream):
    """A reply's body as an httpx stream; gives the connection back (or closes it) when closed."""

    __slots__ = ("_connection", "_left", "_open", "_origin", "_pool", "_timeout")

    def __init__(
        self,
        connection: Http1Connection,
        pool: ConnectionPool,
        origin: Origin,
        timeout: float | None,
        limit: int | None,
    ) -> None:
        self._connection = connection
        self._pool = pool
        self._origin = origin
        self._timeout = timeout
        self._left = limit
        self._open = True

    def __aiter__(self) -> _ReplyStream:
        # An iterator object rather than an async generator: generators are registered with
        # the event loop's finalizer hooks on first use, a cost paid on every streamed reply.
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._connection.chunk(self._timeout)
        except BaseException:
            self._close(False)
            raise
        if not chunk:
            self._close(True)
            raise StopAsyncIteration
        if self._left is not None:
            self._left -= len(chunk)
            if self._left < 0:
                self._close(False)
                raise too_large()
        return chunk

    async def aclose(self) -> None:
        self._close(True)

    def _close(self, keep: bool) -> None:
        if self._open:
            self._open = False
            if keep:
                self._pool.release(self._connection, self._origin)
            else:
                self._pool.discard(self._connection)


def headers_from_raw(raw: list[tuple[bytes, bytes]]) -> httpx.Headers:
    """``httpx.Headers(raw)`` without its per-header normalisation calls: the raw headers are
    bytes already, so each entry is what httpx would store (name, lower-case name, value)."""
    headers = httpx.Headers()
    headers._list = [(name, name.lower(), value) for name, value in raw]
    return headers


def _whole(connection: Http1Connection, content: bytes, request: httpx.Request | None) -> httpx.Response:
    """The httpx response of a body read whole. ``httpx.Response(content=...)`` reads its own
    body again through its decoder chain (a tenth of a request's upstream cost); a body without
    ``Content-Encoding`` has nothing to decode, so it is handed over as it is, as that reading
    would have made it. A compressed one still goes through httpx's decoders."""
    reason = {"reason_phrase": connection.reason}
    headers = headers_from_raw(connection.headers)
    if any(low == b"content-encoding" and value.lower() != b"identity" for _, low, value in headers._list):
        return httpx.Response(
            connection.status, headers=connection.headers, content=content, request=request, extensions=reason
        )
    made = httpx.Response(
        connection.status, headers=headers, stream=httpx.ByteStream(content), request=request, extensions=reason
    )
    # What read() leaves: the body stored (aread() and .content return it), the stream consumed and closed.
    made._content = content
    made.is_stream_consumed = made.is_closed = True
    return made


def _parse(url: str) -> tuple[Origin, str]:
    """The origin a URL names and the request target sent to it (path and query, as encoded)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    default = _DEFAULT_PORTS.get(scheme)
    if default is None:
        raise httpx.UnsupportedProtocol(f"the upstream URL's scheme must be http or https, not {scheme!r}")
    host = parts.hostname
    if not host:
        raise httpx.UnsupportedProtocol("the upstream URL names no host")
    port = parts.port or default
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default else f"{shown}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(scheme, host, port, host_header), target


def request_head(method: str, target: str, host: str, headers: Sequence[tuple[str, str]], body: bytes | None) -> bytes:
    """The request's head as it goes out: Host, the caller's headers in order (names lower-case,
    as httpx's ``multi_items()`` gives them; any length of the caller's dropped: the body is
    framed here), then the body's length. Text is sent as UTF-8."""
    lines = [f"{method} {target} HTTP/1.1\r\nhost: {host}\r\n"]
    for name, value in headers:
        low = name.lower()
        if low != "content-length" and low != "host":
            lines.append(f"{low}: {value}\r\n")
        elif low == "host":
            lines[0] = f"{method} {target} HTTP/1.1\r\nhost: {value}\r\n"
    if body or method not in _BODILESS:
        lines.append(f"content-length: {len(body) if body else 0}\r\n")
    head = "".join(lines)
    if head.count("\n") != len(lines) + 1 or head.count("\r") != len(lines) + 1:  # a line break inside a value
        raise ValueError("Newline or carriage return character detected in an upstream request's header.")
    head += "\r\n"
    return head.encode()


class UpstreamTransport(httpx.AsyncBaseTransport):
    """Pooled keep-alive HTTP/1.1 connections behind httpx's transport interface."""

    def __init__(
        self,
        *,
        max_connections: int = 256,
        keepalive_expiry: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        """``resolver`` answers DNS (aiohttp's default unless given; tests inject one); the
        egress check always wraps it."""
        self._pool = ConnectionPool(
            limit=max_connections, keepalive_expiry=keepalive_expiry, resolver=resolver, ssl_context=ssl_context
        )
        self._urls: dict[str, tuple[Origin, str]] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        extensions = request.extensions
        return await self.exchange(
            request.method,
            str(request.url),
            request.headers.multi_items(),
            request.content,
            extensions.get("timeout", {}),
            read_body=bool(extensions.get(READ_BODY)),
            limit=extensions.get(READ_LIMIT),
            request=request,
        )

    async def exchange(
        self,
        method: str,
        url: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | None,
        timeouts: Mapping[str, float | None],
        *,
        read_body: bool,
        limit: int | None,
        request: httpx.Request | None = None,
        deadline: float | None = None,
    ) -> httpx.Response:
        """One call, from its parts: what :meth:`handle_async_request` does with an
        ``httpx.Request``, for a caller that holds the parts already (the upstream client: no
        request object built, its headers encoded and decoded again, its URL printed per call).
        ``url``: as ``str(httpx.URL(...))`` prints it (encoded); ``timeouts``: httpx's timeout
        extension; ``read_body``, ``limit``: the :data:`READ_BODY`, :data:`READ_LIMIT` extensions.
        ``request``, when there is one, is what the response and the errors refer to. Past
        ``deadline`` (the loop's clock), a call still connecting, waiting for the reply's head
        or reading its whole body fails with ``TimeoutError``, as under ``asyncio.timeout_at``
        (a streamed body's reading is the caller's, outside it)."""
        try:
            origin, target = self._parsed(url)
            head = request_head(method, target, origin.host_header, headers, body)
            pool = self._pool
            connection = await pool.acquire(origin, timeouts.get("connect"), timeouts.get("pool"), deadline)
        except httpx.TransportError as exc:
            exc.request = request  # type: ignore[assignment]
            raise
        read_timeout = timeouts.get("read")
        try:
            connection.send(head + body if body else head, limit if read_body else None, method == "HEAD")
            await connection.head(read_timeout, deadline)
            if read_body:
                content = await connection.whole(read_timeout, deadline)
                pool.release(connection, origin)
                return _whole(connection, content, request)
        except httpx.TransportError as exc:
            pool.discard(connection)
            exc.request = request  # type: ignore[assignment]
            raise
        except BaseException:  # cancelled, too large: what is left of the reply goes with the connection
            pool.discard(connection)
            raise
        return httpx.Response(
            status_code=connection.status,
            headers=headers_from_raw(connection.headers),
            stream=_ReplyStream(connection, pool, origin, read_timeout, limit),
            request=request,
            extensions={"reason_phrase": connection.reason},
        )

    @property
    def connections(self) -> ConnectionPool:
        """The connections it calls over (an upstream WebSocket opens its own there: the same
        egress check and TLS)."""
        return self._pool

    def _parsed(self, url: str) -> tuple[Origin, str]:
        """httpx already encoded the URL; keep its exact encoding and parse it once per URL."""
        if len(url) > _CACHED_URL_CHARS:
            return _parse(url)
        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= _CACHE_LIMIT:
                self._urls.clear()
            parsed = self._urls[url] = _parse(url)
        return parsed

    async def aclose(self) -> None:
        await self._pool.close()
