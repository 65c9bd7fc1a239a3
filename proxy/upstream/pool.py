"""The upstream connections of a process: kept alive per origin, bounded in number, each new
one resolved through the egress check.

A call takes an idle connection of its origin (the most recently used, so the others can
expire), or opens one while fewer than ``limit`` are open, or waits for one up to the pool
timeout (``httpx.PoolTimeout``: the request never left). A connection idle longer than
``keepalive_expiry`` is closed, not reused (an upstream drops idle ones on its own schedule).
Host names are resolved through :class:`~proxy.upstream.egress.EgressResolver` and the answer
kept ``DNS_TTL`` seconds, so a name is checked again as often as it is looked up again.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from functools import cache
from typing import NamedTuple

import httpx
from aiohttp.abc import AbstractResolver, ResolveResult

from proxy.upstream.egress import EgressResolver
from proxy.upstream.http1 import Http1Connection

__all__ = ["DNS_TTL", "ConnectFailed", "ConnectionPool", "Origin"]

DNS_TTL = 10.0
"""Seconds a host name's checked addresses are reused (aiohttp's default, kept)."""


class Origin(NamedTuple):
    """Where a call goes: what the pool keys connections by (a tuple: hashed in C on every
    call), and the Host header it sends."""

    scheme: str
    host: str
    port: int
    host_header: str

    @property
    def tls(self) -> bool:
        return self.scheme == "https"


class ConnectFailed(OSError):
    """No connection could be opened; ``os_error`` is why (refused, unresolved, blocked)."""

    def __init__(self, os_error: OSError) -> None:
        super().__init__(os_error.errno, str(os_error))
        self.os_error = os_error

    def __str__(self) -> str:
        return str(self.os_error)


@cache
def default_tls() -> ssl.SSLContext:
    """The system's verified context, built once per process and only when an https upstream is called."""
    return ssl.create_default_context()


class ConnectionPool:
    """Idle connections by origin, at most ``limit`` open in all."""

    def __init__(
        self,
        *,
        limit: int,
        keepalive_expiry: float,
        resolver: AbstractResolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._limit = limit
        self._expiry = keepalive_expiry
        self._inner_resolver = resolver
        self._resolver: EgressResolver | None = None
        """Made at the first lookup: aiohttp's default resolver binds to the running loop."""
        self._ssl = ssl_context
        self._idle: dict[Origin, deque[Http1Connection]] = {}
        self._open: set[Http1Connection] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._dedicated = 0
        self._dedicated_waiters: deque[asyncio.Future[None]] = deque()
        self._addresses: dict[tuple[str, int], tuple[float, list[ResolveResult]]] = {}
        self._closed = False

    async def acquire(
        self,
        origin: Origin,
        connect_timeout: float | None,
        pool_timeout: float | None,
        deadline: float | None = None,
    ) -> Http1Connection:
        """A connection to ``origin``: an idle one, a new one, or the next freed within
        ``pool_timeout``; a wait or connect still going at ``deadline`` (the loop's clock) is a
        ``TimeoutError``."""
        idle = self._idle.get(origin)
        if idle:
            oldest = asyncio.get_running_loop().time() - self._expiry
            while idle:
                connection = idle.pop()
                if not connection.closed and connection.idle_since > oldest:
                    return connection
                self.discard(connection)
        if deadline is None:
            return await self._open_one(origin, connect_timeout, pool_timeout)
        async with asyncio.timeout_at(deadline):
            return await self._open_one(origin, connect_timeout, pool_timeout)

    async def _open_one(
        self, origin: Origin, connect_timeout: float | None, pool_timeout: float | None
    ) -> Http1Connection:
        while len(self._open) + self._opening >= self._limit:
            await self._wait_for_slot(pool_timeout, self._waiters)
            if self._idle.get(origin):
                return await self.acquire(origin, connect_timeout, pool_timeout)
        self._opening += 1
        try:
            connection = await self._connect(origin, connect_timeout)
        finally:
            self._opening -= 1
            self._wake_one(self._waiters)
        self._open.add(connection)
        return connection

    async def dedicated(
        self, origin: Origin, connect_timeout: float | None, pool_timeout: float | None
    ) -> Http1Connection:
        """A new connection to ``origin`` that is never pooled (an upgrade hands it to another
        protocol): at most ``limit`` of them open at once, beside the pooled ones (an upstream
        WebSocket lives as long as its client's); the next freed is waited for ``pool_timeout``
        seconds at most (``httpx.PoolTimeout``). Its place is freed by :meth:`free_dedicated`."""
        while self._dedicated >= self._limit:
            await self._wait_for_slot(pool_timeout, self._dedicated_waiters)
        self._dedicated += 1
        try:
            return await self._connect(origin, connect_timeout)
        except BaseException:
            self.free_dedicated()
            raise

    def free_dedicated(self) -> None:
        """A connection :meth:`dedicated` gave closed: its place goes to the next waiting."""
        self._dedicated -= 1
        self._wake_one(self._dedicated_waiters)

    def release(self, connection: Http1Connection, origin: Origin) -> None:
        """The exchange on ``connection`` is over: kept for the next call when it may be, else closed."""
        reusable = connection.reusable
        connection.done()
        if reusable and not self._closed and connection in self._open:
            idle = self._idle.get(origin)
            if idle is None:
                idle = self._idle[origin] = deque()
            idle.append(connection)
            self._wake_one(self._waiters)
        else:
            self.discard(connection)

    def discard(self, connection: Http1Connection) -> None:
        """Close ``connection`` and free its place."""
        connection.done()
        if not connection.closed:
            connection.abort()
        self._forget(connection)

    def _forget(self, connection: Http1Connection) -> None:
        if connection in self._open:
            self._open.discard(connection)
            self._wake_one(self._waiters)

    @staticmethod
    async def _wait_for_slot(within: float | None, waiters: deque[asyncio.Future[None]]) -> None:
        waiter = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        try:
            async with asyncio.timeout(within):
                await waiter
        except TimeoutError:
            raise httpx.PoolTimeout("timed out waiting for a connection") from None
        finally:
            if waiter in waiters:
                waiters.remove(waiter)

    @staticmethod
    def _wake_one(waiters: deque[asyncio.Future[None]]) -> None:
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(self, origin: Origin, within: float | None) -> Http1Connection:
        loop = asyncio.get_running_loop()
        try:
            addresses = await self._resolve(origin.host, origin.port)
        except OSError as exc:
            raise httpx.ConnectError(str(exc)) from ConnectFailed(exc)
        tls = (self._ssl or default_tls()) if origin.tls else None
        failure: OSError | None = None
        for address in addresses:
            try:
                async with asyncio.timeout(within):
                    _, connection = await loop.create_connection(
                        lambda: Http1Connection(loop, self._forget),
                        address["host"],
                        address["port"],
                        ssl=tls,
                        server_hostname=origin.host if tls is not None else None,
                        family=address["family"],
                        proto=address["proto"],
                        flags=address["flags"],
                    )
            except TimeoutError:
                raise httpx.ConnectTimeout("connect timeout") from None
            except OSError as exc:  # refused, unreachable, a TLS handshake that failed: try the next address
                failure = exc
                continue
            sock = connection.transport.get_extra_info("socket") if connection.transport is not None else None
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return connection
        error = failure or OSError("no address to connect to")
        raise httpx.ConnectError(str(error)) from ConnectFailed(error)

    async def _resolve(self, host: str, port: int) -> list[ResolveResult]:
        now = asyncio.get_running_loop().time()
        known = self._addresses.get((host, port))
        if known is not None and known[0] > now:
            return known[1]
        if self._resolver is None:
            self._resolver = EgressResolver(self._inner_resolver)
        addresses = await self._resolver.resolve(host, port, socket.AF_UNSPEC)
        if len(self._addresses) >= 1024:
            self._addresses.clear()
        self._addresses[(host, port)] = (now + DNS_TTL, addresses)
        return addresses

    async def close(self) -> None:
        """Close every connection, idle or not, and the resolver."""
        self._closed = True
        for connection in list(self._open):
            self.discard(connection)
        self._idle.clear()
        if self._resolver is not None:
            await self._resolver.close()
