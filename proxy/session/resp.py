"""A lean Redis connection for the store's scripts: RESP written by hand, read by hiredis.

redis-py's asyncio client spends about 230 k instructions on every command, even a ``PING``
(a pool, a retry object, observability hooks, a task per send): two commands per request made
Redis state cost 1.4x memory state. The store's hot path is a handful of ``EVALSHA`` calls to
one server, so it goes through this instead: one connection, commands pipelined back to back,
replies matched to callers in order, each command with its own deadline (watched by one timer
per connection, on the oldest command still waiting: replies come in order, so no later command
can be overdue before it). Under load, commands whose callers wait for the reply anyway are
written together at the end of the event loop's turn: one system call for all that the requests
of one turn send (alone, a command is written at once: waiting for the turn's end would cost
a turn of the loop, more than the system call).

Failure semantics match redis-py's as the store uses it: a command that outlives its deadline
raises :class:`TimeoutError` (and so does every command in flight on that connection, which is
closed: its replies can no longer be trusted to arrive); a connection that breaks fails what is
in flight with :class:`redis.exceptions.ConnectionError`, and the next command opens a new
one. Only plain ``redis://`` URLs are served here (TLS, unix sockets and URL options stay with
redis-py, see :func:`lean_url`).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

__all__ = ["LeanConnection", "LeanScript", "RedisAddress", "lean_url", "once_more", "redis_target"]

_NOSCRIPT_RETRIES = 3


@dataclass(frozen=True, slots=True)
class RedisAddress:
    host: str
    port: int
    db: int
    username: str | None
    password: str | None


def lean_url(url: str) -> RedisAddress | None:
    """The address of a plain ``redis://host:port/db`` URL (credentials allowed); None for
    anything else (``rediss://``, ``unix://``, query options), which redis-py keeps serving."""
    parts = urlsplit(url)
    if parts.scheme != "redis" or parts.query or parts.fragment or not parts.hostname:
        return None
    path = parts.path.strip("/")
    if path and not path.isdigit():
        return None
    return RedisAddress(
        parts.hostname,
        parts.port or 6379,
        int(path or 0),
        unquote(parts.username) if parts.username else None,
        unquote(parts.password) if parts.password else None,
    )


def redis_target(url: str, *, cluster: bool = False) -> str:
    """Where a Redis URL points, as an error or a log line may name it: ``Redis at
    10.0.0.5:6379/0``, ``Redis Cluster at node-1:7000``, ``Redis at unix:/run/redis.sock``;
    never the credentials the URL carries."""
    parts = urlsplit(url)
    kind = "Redis Cluster" if cluster else "Redis"
    if parts.scheme == "unix":
        return f"{kind} at unix:{parts.path}"
    try:
        port = parts.port or 6379
    except ValueError:  # a port that is no number: the URL cannot be reached anyway
        return f"{kind} at {parts.hostname or '?'} (the URL's port is not a number)"
    host = parts.hostname or "localhost"
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    database = parts.path.strip("/")
    tls = " over TLS" if parts.scheme == "rediss" else ""
    return f"{kind} at {where}" + (f"/{database}" if database and not cluster else "") + tls


def _command(*args: str | bytes | int | float) -> bytes:
    """One command in RESP: an array of bulk strings, packed by hiredis in C (the same bytes as
    :func:`_bulks` writes them); what it refuses (a ``bool``, a text it cannot encode) by
    :func:`_bulks`, which writes it or raises as ever."""
    try:
        return _pack(args)
    except (TypeError, ValueError):
        return b"*%d\r\n%s" % (len(args), _bulks(args))


_pack: Callable[[tuple[Any, ...]], bytes] = hiredis.pack_command


def _bulks(args: Sequence[str | bytes | int | float]) -> bytes:
    """The arguments of a command as RESP bulk strings (a command's body, after its length)."""
    out = []
    for arg in args:
        raw = arg.encode() if type(arg) is str else arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


class _Protocol(asyncio.Protocol):
    """Replies, in order, to the futures of the commands that asked for them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        """The loop the connection runs on: kept, as ``asyncio.get_running_loop()`` costs a
        system call (``getpid``) on every call in Python 3.11."""
        self._reader = hiredis.Reader(replyError=ResponseError, encoding="utf-8")
        self._waiting: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        """Each command's future and deadline (loop time; inf: none), oldest first."""
        self._watchdog: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.broken = False
        self._unsent: list[bytes] = []
        """Commands sent with ``at_once=False`` this turn of the event loop while others were
        in flight, written together at its end (or with the next command sent at once)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            if not self._waiting:  # a reply nobody asked for: the stream is out of step
                self.fail(RedisConnectionError("unexpected reply from Redis"))
                return
            waiter, _ = self._waiting.popleft()
            if waiter.done():  # its caller gave up (deadline, cancellation): drop the reply
                continue
            if isinstance(reply, ResponseError):
                waiter.set_exception(reply)
            else:
                waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.broken = True
        self._fail_waiting(RedisConnectionError(f"Redis connection lost: {exc or 'closed'}"))

    def send(
        self, payload: bytes, loop: asyncio.AbstractEventLoop, deadline: float = math.inf, *, at_once: bool = True
    ) -> asyncio.Future[Any]:
        """Write one command; its future fails (and the connection with it) if no reply came
        by ``deadline`` (loop time). Not ``at_once``, while other commands are in flight (under
        load): at the end of this turn of the event loop, with every other command sent so
        meanwhile, in order (a command sent at once later writes those before it)."""
        waiter: asyncio.Future[Any] = loop.create_future()
        transport = self.transport
        if transport is None:  # not connected yet: nothing can be sent
            raise RedisConnectionError("Redis connection not open")
        unsent = self._unsent
        if not at_once and (unsent or self._waiting):
            if not unsent:
                loop.call_soon(self._write_unsent)
            unsent.append(payload)
        elif unsent:
            unsent.append(payload)
            self._write_unsent()
        else:
            transport.write(payload)
        self._waiting.append((waiter, deadline))
        if self._watchdog is None and deadline != math.inf:
            self._watchdog = loop.call_at(deadline, self._watch, loop)
        return waiter

    def _write_unsent(self) -> None:
        """Write the commands held for this turn of the loop (none when it broke meanwhile)."""
        unsent = self._unsent
        if not unsent:
            return
        payload = unsent[0] if len(unsent) == 1 else b"".join(unsent)
        unsent.clear()
        if not self.broken and self.transport is not None:
            self.transport.write(payload)

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """The oldest command still waiting is overdue: the server is frozen or the network
        dropped, and this connection is done. Otherwise look again at its deadline."""
        self._watchdog = None
        for waiter, deadline in self._waiting:
            if waiter.done() or deadline == math.inf:  # a caller that gave up waits for nothing
                continue
            if deadline <= loop.time():
                self.fail(TimeoutError("Redis did not answer in time"))
            else:
                self._watchdog = loop.call_at(deadline, self._watch, loop)
            return

    def fail(self, error: BaseException) -> None:
        """Close the connection, failing every command in flight with ``error``."""
        self.broken = True
        self._fail_waiting(error)
        if self.transport is not None:
            self.transport.close()

    def _fail_waiting(self, error: BaseException) -> None:
        self._unsent.clear()  # their futures fail below: never written
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._waiting:
            waiter, _ = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(error)


class LeanConnection:
    """One pipelined connection to one Redis server, opened on first use and after a break."""

    def __init__(self, address: RedisAddress, timeout: float) -> None:
        self._address = address
        self._timeout = timeout
        self._protocol: _Protocol | None = None
        self._opening: asyncio.Future[_Protocol] | None = None

    async def execute(self, *args: str | bytes | int | float) -> Any:
        """Send one command and wait for its reply, at most ``timeout`` seconds."""
        return await self.call(_command(*args))

    async def call(self, payload: bytes) -> Any:
        """As :meth:`execute`, the command already encoded (:func:`_command`)."""
        waiter = self.send_encoded(payload, at_once=False)
        if waiter is None:
            await self._open()
            waiter = self.send_encoded(payload, at_once=False)
            if waiter is None:  # broke again while opening: as a command on a dead connection
                raise RedisConnectionError("Redis connection lost while opening")
        return await waiter

    def send_now(self, *args: str | bytes | int | float) -> asyncio.Future[Any] | None:
        """Write one command at once, without suspending, and return the future of its reply
        (failed after ``timeout`` seconds); None when no connection is open to write it on.

        Written here, the command is ordered before every command this process sends later:
        the server runs a connection's commands in the order they arrive.
        """
        return self.send_encoded(_command(*args))

    def send_encoded(self, payload: bytes, *, at_once: bool = True) -> asyncio.Future[Any] | None:
        """As :meth:`send_now`, the command already encoded. Not ``at_once`` (a caller that
        waits for the reply anyway): under load, written at the end of this turn of the event
        loop with the other commands sent in it (see ``_Protocol.send``), still before any sent
        later."""
        protocol = self._protocol
        if protocol is None or protocol.broken:
            return None
        loop = protocol.loop
        return protocol.send(payload, loop, loop.time() + self._timeout, at_once=at_once)

    async def _open(self) -> _Protocol:
        """A new connection, shared by every caller that needs one meanwhile."""
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._connect())
        opening = self._opening
        try:
            return await asyncio.shield(opening)
        finally:
            if opening.done():
                self._opening = None

    async def _connect(self) -> _Protocol:
        """Connect, then log in and select the database, all within one ``timeout``. A server
        that does not answer in time raises :class:`TimeoutError` (not retried, as a command's
        deadline); one that refuses raises :class:`redis.exceptions.ConnectionError`."""
        loop = asyncio.get_running_loop()
        address = self._address
        protocol: _Protocol | None = None
        try:
            async with asyncio.timeout(self._timeout):
                _, protocol = await loop.create_connection(lambda: _Protocol(loop), address.host, address.port)
                setup = []
                if address.password is not None:
                    credentials = [address.username, address.password] if address.username else [address.password]
                    setup.append(protocol.send(_command("AUTH", *credentials), loop))
                if address.db:
                    setup.append(protocol.send(_command("SELECT", address.db), loop))
                for reply in setup:
                    await reply
        except BaseException as exc:
            if protocol is not None:
                protocol.fail(RedisConnectionError("setting up the connection failed"))
            if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
                where = f"{address.host}:{address.port}"
                raise RedisConnectionError(f"cannot connect to Redis at {where}: {exc}") from exc
            raise
        self._protocol = protocol
        return protocol

    async def aclose(self) -> None:
        if self._protocol is not None:
            self._protocol.fail(RedisConnectionError("closed"))
            self._protocol = None


class LeanScript:
    """A Lua script run by ``EVALSHA``, loaded again when the server does not know it (NOSCRIPT)."""

    def __init__(self, connection: LeanConnection, source: str) -> None:
        self._connection = connection
        self._source = source
        self._sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()  # Redis names scripts so

    def _evalsha(self, keys: Sequence[str], args: Sequence[str | bytes | int | float]) -> bytes:
        """``EVALSHA sha numkeys keys... args...`` in RESP (one C call: :func:`_command`)."""
        return _command("EVALSHA", self._sha, len(keys), *keys, *args)

    async def __call__(self, keys: Sequence[str], args: Sequence[str | bytes | int | float]) -> Any:
        connection = self._connection
        payload = self._evalsha(keys, args)
        try:
            sent = connection.send_encoded(payload, at_once=False)  # an open connection: no coroutine more
            return await (sent if sent is not None else connection.call(payload))
        except ResponseError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        await connection.execute("SCRIPT", "LOAD", self._source)
        try:
            return await connection.call(payload)
        except ResponseError as exc:
            if str(exc).startswith("NOSCRIPT"):  # flushed again in between: the caller retries
                raise NoScriptError(str(exc)) from None
            raise

    def send_now(self, keys: Sequence[str], args: Sequence[str | bytes | int | float]) -> asyncio.Future[Any] | None:
        """``EVALSHA`` written at once (see :meth:`LeanConnection.send_now`); a NOSCRIPT reply
        fails the future, and the caller runs the script again by :meth:`__call__`."""
        return self._connection.send_encoded(self._evalsha(keys, args))


async def once_more(command: Callable[[], Awaitable[Any]], failed: BaseException | None = None) -> Any:
    """Run a command; on a dead connection (a restarted server) run it once more, at once.
    ``failed``: how the caller's own first try failed (a ``ConnectionError`` or a
    ``NoScriptError``; the caller tries once itself, and comes here only then: no coroutine
    more on every call).

    A pooled connection to a server that restarted fails on first use; the second try gets a
    fresh connection. Timeouts are not retried: a frozen server costs one timeout, not several.
    A connection that broke after a script ran but before its reply arrived is safe too: the
    scripts are idempotent (see ``scripts.ONCE``), so the retry changes nothing twice.

    ``Script`` reloads a script the server does not know (NOSCRIPT) once per call; a
    ``SCRIPT FLUSH`` landing between that load and the call leaves NOSCRIPT again, so that
    is retried too, a few times (each retry loads the script anew).
    """
    reconnected = isinstance(failed, RedisConnectionError)
    for _ in range(_NOSCRIPT_RETRIES if failed is None else _NOSCRIPT_RETRIES - 1):
        try:
            return await command()
        except RedisConnectionError:
            if reconnected:
                raise
            reconnected = True
        except NoScriptError:
            continue
    return await command()
