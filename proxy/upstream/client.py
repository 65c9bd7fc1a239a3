"""The one pooled upstream client of a process, with invisible retries of transient faults.

It speaks httpx (requests, responses, transports) but drives the transport directly: the
``httpx.AsyncClient`` layer adds cookie persistence, redirects and auth flows that a proxy
must not have, and costs time on every call. Tests inject an ``httpx.MockTransport`` or
point it at the scripted fake upstream; production uses :class:`UpstreamTransport`.

Retries happen only before any byte reached the client: for a stream, until the upstream
answered with headers. The deadline covers every attempt and every wait. Waits are
``asyncio`` sleeps: they block nothing else, and a client that leaves cancels them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import httpx

from proxy.errors import (
    ProxyError,
    ServiceUnavailable,
    UpstreamDisconnected,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from proxy.observe.logs import log_event
from proxy.observe.metrics import Metrics
from proxy.observe.timing import waiting
from proxy.settings import Settings
from proxy.upstream.egress import EgressBlocked
from proxy.upstream.retry import RETRYABLE_STATUSES, RetryBudget, RetryPolicy, SharedAttempts, parse_retry_after
from proxy.upstream.socket import UpstreamSockets, current
from proxy.upstream.transport import READ_BODY, READ_LIMIT, UpstreamTransport

__all__ = ["ATTEMPTS_HEADER", "UpstreamClient", "UpstreamReply"]

ATTEMPTS_HEADER = "x-loopwarden-upstream-attempts"
"""How many times the proxy asked the upstream for the answer the client gets."""
SHARED_FACTOR = 2
"""A request and the client's retries of it may use this many times ``retry_attempts``."""
_CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})
_CACHED_URL_CHARS = 512
"""Longest upstream URL kept parsed (a tenant's base, a route, ``?beta=true`` fit easily)."""


@dataclass(slots=True)
class UpstreamReply:
    """The upstream's final answer and how many attempts it took to get it."""

    response: httpx.Response
    attempts: int
    waited: float
    budget_left: bool = False
    """Attempts are left in the budget this request shares with the client's retries of it."""
    """Seconds spent in backoff sleeps, so callers can tell proxy time from waiting."""

    @property
    def retries_spent(self) -> bool:
        """An error the proxy already retried with backoff, which a client should not retry
        again at once (the attempts would multiply). Not a 429 nor an answer that says when to
        come back (``Retry-After``): the proxy waited as long as it may, and the client's own
        backoff, paced by that header, is what should follow."""
        response = self.response
        return (
            self.attempts > 1
            and not self.budget_left
            and response.status_code >= 400
            and response.status_code != 429
            and parse_retry_after(response.headers) is None
        )


class UpstreamClient:
    """Sends requests upstream; transient faults are retried with backoff inside the deadline."""

    def __init__(
        self,
        settings: Settings,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        draw: Callable[[], float] = random.random,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: how long a failed attempt took (a fault that came back fast backs off longer)."""
        self._metrics = metrics
        self._clock = clock
        self._transport = transport or UpstreamTransport(max_connections=settings.max_upstream_connections)
        self._direct = self._transport if isinstance(self._transport, UpstreamTransport) else None
        """The transport when it is the proxy's own: called with a request's parts, not an httpx request."""
        self.sockets = UpstreamSockets(settings, self._transport, metrics)
        """Client sockets' upstream WebSockets (a call inside :func:`~proxy.upstream.socket.through` goes over one)."""
        self._policy = RetryPolicy(
            attempts=settings.retry_attempts,
            base_delay=settings.retry_base_delay,
            max_delay=settings.retry_max_delay,
            retry_after_cap=settings.retry_after_cap,
            paced_attempts=settings.retry_after_attempts,
        )
        self._retry_after_send = settings.retry_after_send
        self._max_reply_bytes = settings.max_reply_bytes
        self._budget = RetryBudget(settings.retry_budget)
        # A request and the client's retries of it share twice the proxy's own attempts.
        attempts = settings.retry_attempts
        self._shared = SharedAttempts(SHARED_FACTOR * attempts) if attempts > 1 else None
        self._total_timeout = settings.total_timeout
        self._timeouts = {
            "connect": settings.connect_timeout,
            "read": settings.read_timeout,
            "write": settings.read_timeout,
            "pool": settings.pool_timeout,
        }
        self._longest_timeout = max(self._timeouts.values())
        """With at least this long left, an attempt's timeouts are the settings' own (one shared dict)."""
        self._sleep = sleep
        self._draw = draw
        self._urls: dict[str, tuple[httpx.URL, str]] = {}

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def send(
        self,
        method: str,
        url: str | httpx.URL,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        stream: bool = False,
        bounded: bool = True,
    ) -> UpstreamReply:
        """Send until a non-retryable answer, the attempts or the deadline run out.

        With ``stream=False`` the body is read inside the deadline; with ``stream=True`` the
        caller reads it and must close the response. The time is booked as waiting, not as
        proxy overhead. A ``bounded`` reply longer than ``max_reply_bytes`` fails with
        :class:`~proxy.errors.UpstreamReplyTooLarge` (whole: here; streamed: while it is read);
        only a relay that holds nothing of what it passes on may be unbounded.
        """
        started = time.perf_counter()
        self._budget.deposit()
        with waiting():
            try:
                limit = self._max_reply_bytes if bounded else None
                reply = await self._send(method, url, headers, body, stream, limit)
            except ProxyError:
                self._count("failed")
                raise
        if self._metrics is not None:
            self._metrics.upstream_latency.observe(time.perf_counter() - started)
        self._count("ok")
        return reply

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.of(self._metrics.upstream_attempts, outcome).inc()

    async def _send(
        self,
        method: str,
        url: str | httpx.URL,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        stream: bool,
        limit: int | None,
    ) -> UpstreamReply:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._total_timeout
        waited = 0.0
        paced = 0.0  # of ``waited``: the waits the upstream asked for
        attempt = 0
        key = _request_key(url, headers, body) if self._shared is not None else 0
        while True:
            attempt += 1
            if self._shared is not None:
                self._shared.spend(key)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _spent(UpstreamTimeout("The upstream model API did not answer before the deadline."), attempt - 1)
            timeouts = self._timeouts if remaining >= self._longest_timeout else self._attempt_timeouts(remaining)
            parsed, text = self._url(url)
            transport = current() or self._transport
            sent = self._clock()
            try:
                if transport is self._direct:
                    # The pool's own transport takes the call's parts as they are (no httpx
                    # request) and keeps the deadline on its own read timer (no timeout scope
                    # per call); a whole body comes back read.
                    response = await self._direct.exchange(
                        method, text, headers, body, timeouts, read_body=not stream, limit=limit, deadline=deadline
                    )
                else:
                    async with asyncio.timeout(remaining):
                        request = _request(method, parsed, headers, body, timeouts, stream, limit)
                        response = await transport.handle_async_request(request)
                        if not stream:
                            await response.aread()
            except TimeoutError:
                raise _spent(
                    UpstreamTimeout("The upstream model API did not answer before the deadline."), attempt
                ) from None
            except httpx.TransportError as exc:
                error = _as_proxy_error(exc)
                retryable = _never_sent(exc) or self._retry_after_send
                delay = self._next_delay(attempt, None, paced, key, self._clock() - sent) if retryable else None
                if delay is None or loop.time() + delay >= deadline or not self._budget.withdraw():
                    left = self._gave_up(key, attempt, type(exc).__name__) if retryable else False
                    raise _spent(error, attempt, left) from None
                self._count("retried")
                await self._sleep(delay)
                waited += delay
                continue

            if response.status_code not in RETRYABLE_STATUSES:
                return UpstreamReply(response, attempt, waited)
            retry_after = parse_retry_after(response.headers)
            delay = self._next_delay(attempt, retry_after, paced, key, self._clock() - sent)
            if delay is None or loop.time() + delay >= deadline or not self._budget.withdraw():
                left = self._gave_up(key, attempt, str(response.status_code))
                return UpstreamReply(response, attempt, waited, left)
            self._count("retried")
            await response.aclose()
            await self._sleep(delay)
            waited += delay
            if retry_after is not None:
                paced += delay

    def _next_delay(
        self, attempt: int, retry_after: float | None, paced: float, key: int, fault_seconds: float
    ) -> float | None:
        """The wait before the next attempt, None to stop. Without a wait the upstream named,
        the shared budget bounds the attempts too, and the backoff grows with every attempt
        spent on the request, the client's retries included, and more after a fault that
        came back fast (``fault_seconds``: how long the failed attempt took)."""
        shared = self._shared
        if retry_after is not None or shared is None:
            return self._policy.delay(attempt, retry_after, self._draw, paced, fault_seconds)
        used = shared.used(key)
        if attempt >= self._policy.attempts or used >= shared.limit:
            return None
        return self._policy.backoff(used, self._draw, fault_seconds)

    def _gave_up(self, key: int, attempt: int, fault: str) -> bool:
        """The retryable fault goes to the client: True while the shared budget has attempts
        left (the client may retry); else the budget ran out, which is logged and counted."""
        shared = self._shared
        left = shared.left(key) if shared is not None else 0
        if left:
            return True
        used = shared.used(key) if shared is not None else attempt
        if used > 1:
            self._count("exhausted")
            log_event(
                "upstream_retries_exhausted", {"attempts": attempt, "shared": used, "fault": fault}, logging.WARNING
            )
        return False

    def _url(self, url: str | httpx.URL) -> tuple[httpx.URL, str]:
        """Parse each distinct upstream URL once; model calls reuse a handful of them. A
        long one (a client's query string rides along on model calls) is parsed and let go: a
        thousand distinct 60 kB queries would otherwise pin over 100 MB. With the parsed URL,
        its text as httpx prints it (encoded), which is what the transport sends."""
        if isinstance(url, httpx.URL):
            return url, str(url)
        if len(url) > _CACHED_URL_CHARS:
            parsed = httpx.URL(url)
            return parsed, str(parsed)
        known = self._urls.get(url)
        if known is None:
            if len(self._urls) >= 1024:
                self._urls.clear()
            parsed = httpx.URL(url)
            known = self._urls[url] = (parsed, str(parsed))
        return known

    def _attempt_timeouts(self, remaining: float) -> dict[str, float]:
        return {name: min(value, remaining) for name, value in self._timeouts.items()}


def _request(
    method: str,
    url: httpx.URL,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    timeouts: dict[str, float],
    stream: bool,
    limit: int | None,
) -> httpx.Request:
    """The attempt's request. ``stream=`` skips httpx's body encoding and auto headers (the
    transport frames the body itself); the body is then stored as ``read()`` would store it, so
    ``request.content`` answers without joining the one-chunk stream again."""
    extensions = {"timeout": timeouts, READ_BODY: not stream, READ_LIMIT: limit}
    try:
        request = httpx.Request(method, url, headers=headers, stream=httpx.ByteStream(body), extensions=extensions)
    except UnicodeEncodeError:
        # httpx encodes header text as ASCII; a client's non-ASCII value (an id, a title) goes
        # on as the UTF-8 it arrived in. Rare, so the common case pays nothing for it.
        encoded = httpx.Headers(headers, encoding="utf-8")
        request = httpx.Request(method, url, headers=encoded, stream=httpx.ByteStream(body), extensions=extensions)
    request._content = body
    return request


def _request_key(url: str | httpx.URL, headers: Sequence[tuple[str, str]], body: bytes) -> int:
    """What makes a client's retry "the same request": the URL, its credentials, the body.
    Python's own (randomly keyed, per process) hash: the key only lives in this process's
    :class:`SharedAttempts`, and a cryptographic digest of the body cost several times more."""
    credentials = tuple([v for k, v in headers if k.lower() in _CREDENTIAL_HEADERS])
    return hash((str(url), credentials, body))


def _spent(error: ProxyError, attempts: int, budget_left: bool = False) -> ProxyError:
    """An error the proxy answers with once its own attempts are over: it says how many there
    were and, when the proxy already retried and the budget it shares with the client's
    retries is spent, asks SDKs (openai's honors ``x-should-retry``) not to multiply them by
    their own (3 by 3 attempts per call during an outage otherwise)."""
    error.headers[ATTEMPTS_HEADER] = str(attempts)
    if attempts > 1 and not budget_left:
        error.headers["x-should-retry"] = "false"
    return error


def _never_sent(exc: httpx.TransportError) -> bool:
    """True when the request certainly did not reach the upstream, so a retry is safe."""
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


def _as_proxy_error(exc: httpx.TransportError) -> ProxyError:
    if isinstance(exc, httpx.PoolTimeout):
        return ServiceUnavailable("All upstream connections are busy; try again shortly.")
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"The upstream model API timed out ({type(exc).__name__}).")
    if isinstance(exc, httpx.ConnectError | httpx.UnsupportedProtocol):
        return UpstreamUnreachable(f"The upstream model API could not be reached: {_reason(exc)}.")
    return UpstreamDisconnected(f"The upstream model API closed the connection: {_reason(exc)}.")


def _reason(exc: Exception) -> str:
    """A short cause for the client; aiohttp's own messages name hosts and ports, so not those."""
    cause = exc.__cause__
    os_error = getattr(cause, "os_error", cause)
    if isinstance(os_error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(os_error, ConnectionResetError) or getattr(os_error, "errno", None) == errno.ECONNRESET:
        return "connection reset"
    if isinstance(os_error, EgressBlocked):
        return "its address is one the proxy must not call (link-local, multicast or a cloud metadata endpoint)"
    if (isinstance(cause, OSError) and "Name or service not known" in str(cause)) or "DNS" in type(cause).__name__:
        return "host name not resolved"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "connection closed before a complete response"
    return type(exc).__name__
