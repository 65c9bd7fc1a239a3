"""An httpx transport on aiohttp: httpx stays the client API, aiohttp moves the bytes.

httpx's own transport polls every pooled connection per request and collapses under
concurrency (encode/httpx#3215). The public ``httpx-aiohttp`` package fixes the speed but
maps refused/reset/disconnected-after-send all to ``ConnectTimeout`` (so a retry keyed on
it can send a POST twice), merges duplicate headers and keeps upstream cookies. This one:

- maps each aiohttp failure to the httpx error that says *when* it happened: ``ConnectError``
  / ``ConnectTimeout`` / ``PoolTimeout`` mean the request never left; ``ReadTimeout``,
  ``ReadError`` and ``RemoteProtocolError`` mean it may have been received;
- keeps duplicate headers and adds none of its own (no User-Agent, Accept, encoding);
- stores no cookies at all (a shared jar would hand one tenant's cookies to the next);
- never follows redirects and never decompresses: bytes pass through as sent;
- reads at most ``READ_LIMIT`` bytes of a body when the request says so (whole or streamed),
  then fails with :class:`~proxy.errors.UpstreamReplyTooLarge` and drops the connection;
- resolves host names through the egress check (:mod:`proxy.upstream.egress`): a name never
  leads to a link-local or metadata address, whatever DNS answers.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiohttp
import httpx
import yarl
from aiohttp import hdrs
from aiohttp.abc import AbstractResolver
from aiohttp.typedefs import LooseHeaders
from multidict import CIMultiDict

from proxy.errors import UpstreamReplyTooLarge
from proxy.upstream.egress import EgressResolver

__all__ = ["READ_BODY", "READ_LIMIT", "AiohttpTransport"]

READ_BODY = "loopwarden.read_body"
"""Request extension: read the whole response body before returning (not for streams)."""
READ_LIMIT = "loopwarden.read_limit"
"""Request extension: the most bytes of response body to read, whole or streamed (None: no limit)."""
_CACHE_LIMIT = 1024
_CACHED_URL_CHARS = 512
"""Longest URL kept parsed: pass-through paths and queries are the client's, and a thousand
distinct long ones would otherwise pin a hundred megabytes."""

_WS_TIMEOUT = aiohttp.ClientWSTimeout(ws_receive=None, ws_close=2.0)
"""A socket's close waits this long for the peer's answer to its close frame."""
_SKIP_AUTO_HEADERS = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})
_SKIPPED: CIMultiDict[None] = CIMultiDict((name, None) for name in sorted(_SKIP_AUTO_HEADERS))
"""The table aiohttp builds from the session's skipped headers on every request, built once
(read only: aiohttp only looks names up in it)."""


class _Request(aiohttp.ClientRequest):
    """aiohttp's request, minus its per-request auto-header step when the skipped headers are
    the session's own (:data:`_SKIP_AUTO_HEADERS`, the only session this class serves): that
    step copies the headers and builds a table of the skipped names only to add nothing (every
    auto header is skipped), so the prebuilt table is set instead; and with its headers copied
    in one step rather than one Python call per header."""

    def update_headers(self, headers: LooseHeaders | None) -> None:
        # aiohttp adds the caller's headers one by one after Host, replacing Host if one is
        # among them; without one that is Host then all of them, in order, in one C-level step.
        host = self.url.host_port_subcomponent  # None only for a URL without a host: aiohttp's own path
        if isinstance(headers, CIMultiDict) and hdrs.HOST not in headers and host is not None:
            self.headers = CIMultiDict(((hdrs.HOST, host),))
            self.headers.extend(headers)
        else:
            super().update_headers(headers)

    def update_auto_headers(self, skip_auto_headers: Iterable[str] | None) -> None:
        if skip_auto_headers is self._session.skip_auto_headers:
            self._skip_auto_headers = _SKIPPED
        else:
            super().update_auto_headers(skip_auto_headers)


_MAPPED = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    aiohttp.InvalidURL,
    aiohttp.ClientResponseError,
    TimeoutError,
)
"""The aiohttp failures :func:`_mapped` translates (every other exception passes as it is)."""


def _mapped(exc: BaseException, request: httpx.Request | None) -> httpx.TransportError:
    """The httpx error for an aiohttp one, keeping 'never sent' and 'maybe received' apart.
    Called from ``except _MAPPED`` around each await (a plain handler: a context manager per
    call would cost a generator and its frames on every request and every streamed chunk)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(str(exc) or "connect timeout", request=request)
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return httpx.ReadTimeout(str(exc) or "read timeout", request=request)
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(str(exc) or "timeout", request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(exc), request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError("server disconnected", request=request)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(str(exc) or "incomplete body", request=request)
    if isinstance(exc, aiohttp.ClientOSError | aiohttp.ClientConnectionError):
        # A reset or broken pipe once connected: the upstream may have the request.
        return httpx.ReadError(str(exc) or "connection error", request=request)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(str(exc), request=request)
    if isinstance(exc, aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(str(exc), request=request)
    return httpx.PoolTimeout("timed out waiting for a connection", request=request)


class _AiohttpStream(httpx.AsyncByteStream):
    """Response body as an httpx stream; releases the connection when closed."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request | None, limit: int | None) -> None:
        self._response = response
        self._request = request
        self._left = limit

    def __aiter__(self) -> _AiohttpStream:
        # An iterator object rather than an async generator: generators are registered with
        # the event loop's finalizer hooks on first use, a cost paid on every streamed reply.
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._response.content.readany()
        except _MAPPED as exc:
            raise _mapped(exc, self._request) from exc
        if not chunk:
            raise StopAsyncIteration
        if self._left is not None:
            self._left -= len(chunk)
            if self._left < 0:
                raise _too_large(self._response)
        return chunk

    async def aclose(self) -> None:
        self._response.release()


async def _read_at_most(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, unless it is longer than ``limit`` bytes (announced or as read)."""
    if response.content_length is not None and response.content_length > limit:
        raise _too_large(response)
    stream = response.content
    if stream.is_eof():
        # The whole body came in with the headers (a small reply): take it without awaiting.
        whole = stream.read_nowait()
        if len(whole) > limit:
            raise _too_large(response)
        return whole
    chunks: list[bytes] = []
    left = limit
    while chunk := await stream.readany():
        left -= len(chunk)
        if left < 0:
            raise _too_large(response)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(response: aiohttp.ClientResponse) -> UpstreamReplyTooLarge:
    """Stop reading: the connection goes (its unread rest with it), the caller gets a 502."""
    response.close()
    return UpstreamReplyTooLarge("The upstream model API's reply is larger than the proxy's max_reply_bytes.")


def _headers(raw: Sequence[tuple[bytes, bytes]]) -> httpx.Headers:
    """``httpx.Headers(raw)`` without its per-header normalisation calls: aiohttp's raw headers
    are bytes already, so each entry is what httpx would store (name, lower-case name, value)."""
    headers = httpx.Headers()
    headers._list = [(name, name.lower(), value) for name, value in raw]
    return headers


def _whole(response: aiohttp.ClientResponse, content: bytes, request: httpx.Request | None) -> httpx.Response:
    """The httpx response of a body read whole. ``httpx.Response(content=...)`` reads its own
    body again through its decoder chain (a tenth of a request's upstream cost); a body without
    ``Content-Encoding`` has nothing to decode, so it is handed over as it is, as that reading
    would have made it. A compressed one still goes through httpx's decoders, as before."""
    reason = {"reason_phrase": (response.reason or "").encode()}
    if response.headers.get("Content-Encoding", "identity").lower() != "identity":
        return httpx.Response(
            response.status, headers=response.raw_headers, content=content, request=request, extensions=reason
        )
    made = httpx.Response(
        response.status,
        headers=_headers(response.raw_headers),
        stream=httpx.ByteStream(content),
        request=request,
        extensions=reason,
    )
    # What read() leaves: the body stored (aread() and .content return it), the stream consumed and closed.
    made._content = content
    made.is_stream_consumed = made.is_closed = True
    return made


class AiohttpTransport(httpx.AsyncBaseTransport):
    """A pooled, cookie-less aiohttp session behind httpx's transport interface."""

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
        self._max_connections = max_connections
        self._resolver = resolver
        self._keepalive_expiry = keepalive_expiry
        # None: aiohttp's own verified default context, built once at its import (a context of
        # our own per client cost ~40 ms of CPU at every start).
        self._ssl: ssl.SSLContext | bool = ssl_context or True
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, yarl.URL] = {}
        self._timeouts: dict[tuple[float | None, float | None, float | None], aiohttp.ClientTimeout] = {}

    def _get_session(self) -> aiohttp.ClientSession:
        # Created lazily: an aiohttp session binds to the running event loop.
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                limit_per_host=0,
                keepalive_timeout=self._keepalive_expiry,
                ssl=self._ssl,
                resolver=EgressResolver(self._resolver),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                trust_env=False,
                skip_auto_headers=_SKIP_AUTO_HEADERS,
                request_class=_Request,
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = request.content if request.method not in ("GET", "HEAD") or request.content else None
        extensions = request.extensions
        return await self.exchange(
            request.method,
            str(request.url),
            request.headers.multi_items(),
            body,
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
    ) -> httpx.Response:
        """One call, from its parts: what :meth:`handle_async_request` does with an
        ``httpx.Request``, for a caller that holds the parts already (the upstream client: no
        request object built, its headers encoded and decoded again, its URL printed per call).
        ``url``: as ``str(httpx.URL(...))`` prints it (encoded); ``timeouts``: httpx's timeout
        extension; ``read_body``, ``limit``: the :data:`READ_BODY`, :data:`READ_LIMIT` extensions.
        ``request``, when there is one, is what the response and the errors refer to."""
        session = self._get_session()
        # Names lower-case, as httpx's multi_items() gives them (aiohttp would let a later
        # "X-Tag" replace an earlier "x-tag"); no Content-Length: aiohttp frames the body.
        sent = [(low, value) for name, value in headers if (low := name.lower()) != "content-length"]
        try:
            response = await session.request(
                method,
                self._yarl(url),
                headers=sent,
                data=body,
                allow_redirects=False,
                compress=None,
                timeout=self._timeout(timeouts),
            )
            if read_body:
                # The caller wants the whole body: read it here in one go instead of
                # through httpx's chunk iterator and decoders.
                try:
                    content = await (response.read() if limit is None else _read_at_most(response, limit))
                finally:
                    response.release()
                return _whole(response, content, request)
        except _MAPPED as exc:
            raise _mapped(exc, request) from exc
        return httpx.Response(
            status_code=response.status,
            headers=_headers(response.raw_headers),
            stream=_AiohttpStream(response, request, limit),
            request=request,
            extensions={"reason_phrase": (response.reason or "").encode()},
        )

    async def websocket(
        self, url: str, headers: Sequence[tuple[str, str]], *, max_size: int, heartbeat: float
    ) -> aiohttp.ClientWebSocketResponse[Any]:
        """A WebSocket on the pooled session (the same egress check, no cookies, no headers of its
        own); text arrives as bytes, as a body does. Fails with aiohttp's errors (a handshake
        refused: ``WSServerHandshakeError`` with the status)."""
        return await self._get_session().ws_connect(
            url,
            headers=CIMultiDict(headers),
            max_msg_size=max_size,
            heartbeat=heartbeat,
            decode_text=False,
            timeout=_WS_TIMEOUT,
        )

    def _yarl(self, text: str) -> yarl.URL:
        """httpx already parsed the URL; keep its exact encoding and parse it once per URL."""
        if len(text) > _CACHED_URL_CHARS:
            return yarl.URL(text, encoded=True)
        parsed = self._urls.get(text)
        if parsed is None:
            if len(self._urls) >= _CACHE_LIMIT:
                self._urls.clear()
            parsed = self._urls[text] = yarl.URL(text, encoded=True)
        return parsed

    def _timeout(self, timeout: Mapping[str, float | None]) -> aiohttp.ClientTimeout:
        key = (timeout.get("pool"), timeout.get("connect"), timeout.get("read"))
        cached = self._timeouts.get(key)
        if cached is None:
            if len(self._timeouts) >= _CACHE_LIMIT:
                self._timeouts.clear()
            cached = self._timeouts[key] = aiohttp.ClientTimeout(
                total=None, connect=key[0], sock_connect=key[1], sock_read=key[2]
            )
        return cached

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
