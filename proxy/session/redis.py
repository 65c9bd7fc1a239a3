"""Redis session store: one hash per session, one round trip to load, one script to commit.

Keys look like ``lw:{tenant:session}``; the braces are a Redis Cluster hash tag, so a session's hash and timeline land
on one slot and the commit script stays atomic on a cluster (the session index: :mod:`proxy.session.redis_lists`).
The commit applies increments with HINCRBY in a Lua script, so concurrent requests lose no update; every commit
refreshes the TTL. A script the server does not know (after a ``SCRIPT FLUSH`` or a restart) is loaded again.

On a single server reached by a plain ``redis://`` URL the scripts run over one pipelined connection of the store's
own (:mod:`proxy.session.resp`): redis-py's asyncio client costs ~230 k instructions a command, more than the rest of
a request's state handling. redis-py serves everything else (TLS, unix sockets, Cluster, resets, pings).

A Redis that restarts empty (or is flushed) would hand every session fresh budgets without anyone noticing, so every
script also reads a sentinel key in the same round trip (see :mod:`proxy.session.epochs`); the store counts a loss and
answers :meth:`RedisStore.lost_at`, so the ledger can refuse to restart a fail-closed session silently.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import msgspec
import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisClusterException, RedisError

from proxy.session.base import (
    FIELDS,
    Admission,
    Claim,
    Grant,
    GrantOutcome,
    Limit,
    SessionDelta,
    SessionState,
    StoreUnavailable,
    WindowLimit,
)
from proxy.session.epochs import EpochWatch
from proxy.session.epochs import fresh_epoch as _epoch
from proxy.session.epochs import unique_token as _token
from proxy.session.limits import ENDING_FIELDS
from proxy.session.redis_lists import RedisLists, state_of
from proxy.session.resp import LeanConnection, LeanScript, lean_url, redis_target
from proxy.session.resp import once_more as _once_more
from proxy.session.scripts import ADMIT, ADMIT_WINDOW, CLAIM, COMMIT, GRANT, LOAD, RECORD
from proxy.session.timeline import DEFAULT_LISTED_SESSIONS, DEFAULT_TIMELINE_EVENTS, Listed, TimelinePage

__all__ = ["RedisStore"]


def _op_key(key: str) -> str:
    """A one-operation marker key in the same hash tag (so on the same Cluster node)."""
    return f"{key}:op:{_token()}"


_json = msgspec.json.Encoder()


class RedisStore:
    """Sessions in Redis (standalone or Cluster), shared by every replica."""

    def __init__(
        self,
        client: redis.Redis | Any,
        clock: Callable[[], float] = time.time,
        *,
        max_connections: int = 128,
        pool_timeout: float = 1.0,
        lean: LeanConnection | None = None,
        timeline_events: int = DEFAULT_TIMELINE_EVENTS,
        listed_sessions: int = DEFAULT_LISTED_SESSIONS,
        on_dropped: Callable[[str, str, int], None] | None = None,
        target: str = "Redis",
    ) -> None:
        """``lean``: run the scripts over this pipelined connection (see :mod:`proxy.session.resp`);
        ``client`` then serves only what is rare (a reset, a ping). The bounds as ``MemoryStore``'s.
        ``target``: where the store is, as its errors name it (:func:`redis_target`)."""
        self._client = client
        self.target = target
        self._unavailable = functools.partial(StoreUnavailable.at, target)
        cluster = isinstance(client, RedisCluster)
        # The pools raise at their cap instead of waiting for a free connection: callers wait
        # here instead (at most ``pool_timeout``). Cheaper than redis-py's blocking pool, whose
        # lock, condition and timer cost every command ~50 k instructions even when a
        # connection is free.
        self._gate = asyncio.Semaphore(max_connections)
        self._pool_timeout = pool_timeout
        # A Cluster client learns the slot map on first use; many first uses at once would
        # each start that discovery and tear down each other's connections. Do it once.
        self._initialize = getattr(client, "initialize", None) if cluster else None
        self._init_lock = asyncio.Lock()
        self._watch = EpochWatch(clock, cluster=cluster)
        self.losses = 0
        """Data losses this store detected (one per scope that found its sentinel changed)."""
        self.in_process = False
        self._lean = lean
        self._started: dict[str, asyncio.Future[None]] = {}
        """Per key, the last commit sent by :meth:`start_commit` (``ordered``) and not yet
        confirmed: what this store's later calls on that key wait for."""
        self._unconfirmed: set[asyncio.Future[None]] = set()
        """Every commit sent and not yet confirmed: what :meth:`aclose` drains."""
        self._retries: set[asyncio.Task[None]] = set()
        script: Callable[[str], Any] = client.register_script if lean is None else functools.partial(LeanScript, lean)
        self._load = script(LOAD)
        self._commit = script(COMMIT)
        self._admit = script(ADMIT)
        self._claim = script(CLAIM)
        self._admit_window = script(ADMIT_WINDOW)
        self._grant = script(GRANT)
        self._record = script(RECORD)
        self._lists = RedisLists(
            script,
            self._run,
            timeline_events=timeline_events,
            listed_sessions=listed_sessions,
            on_dropped=on_dropped,
            inline=not cluster,
            target=target,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        timeout: float = 1.0,
        max_connections: int = 128,
        cluster: bool = False,
        clock: Callable[[], float] = time.time,
        **bounds: Any,
    ) -> RedisStore:
        """A store with socket timeouts, whose callers wait for a free connection at the pool's cap.

        ``cluster`` talks to a Redis Cluster: every key of a session (and of a tenant's day)
        shares one hash tag, so each script runs on one node, atomically.
        """
        if cluster:
            return cls(
                RedisCluster.from_url(
                    url,
                    socket_timeout=timeout,
                    socket_connect_timeout=timeout,
                    max_connections=max_connections,
                    decode_responses=True,
                    retry=Retry(NoBackoff(), 0),
                ),
                clock,
                max_connections=max_connections,
                pool_timeout=timeout,
                target=redis_target(url, cluster=True),
                **bounds,
            )
        pool = redis.ConnectionPool.from_url(
            url,
            max_connections=max_connections,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            health_check_interval=30,
            decode_responses=True,
            # redis-py retries timeouts 3 times by default: a frozen server would cost four
            # timeouts per command. Retries here are explicit instead (see _once_more).
            retry=Retry(NoBackoff(), 0),
        )
        address = lean_url(url)
        lean = LeanConnection(address, timeout) if address is not None else None
        client = redis.Redis(connection_pool=pool)
        target = redis_target(url)
        return cls(
            client, clock, max_connections=max_connections, pool_timeout=timeout, lean=lean, target=target, **bounds
        )

    async def _run(self, command: Callable[[], Awaitable[Any]], after: str | None = None) -> Any:
        """Run a command at the connection cap; ``after``: once the commit of that key this
        store sent and Redis has not confirmed yet is confirmed (see :meth:`_after_started`)."""
        if after is not None and self._started:
            await self._after_started(after)
        if self._initialize is not None:
            async with self._init_lock:
                if self._initialize is not None:
                    try:
                        await self._initialize()
                    except RedisClusterException as exc:  # no node reachable: not a RedisError, yet the same fault
                        raise RedisConnectionError(str(exc)) from exc
                    self._initialize = None
        if self._gate.locked():
            async with asyncio.timeout(self._pool_timeout):
                await self._gate.acquire()  # a TimeoutError is an OSError: the store is unavailable
        else:
            await self._gate.acquire()  # free: returns at once, no timer armed
        try:
            return await command()
        except (RedisConnectionError, NoScriptError) as failed:
            return await _once_more(command, failed)
        finally:
            self._gate.release()

    # -- losses ---------------------------------------------------------------------

    def _keys(self, key: str, *more: str) -> list[str]:
        """A script's keys: the data, then ``more``, then the sentinel of the data's scope."""
        return [key, *more, self._watch.sentinel(key)]

    def _observe(self, key: str, epoch: str) -> None:
        if self._watch.changed(key, epoch):
            self.losses += 1

    def lost_at(self, key: str) -> float | None:
        """When this store found the data of ``key``'s scope lost; None if it never did."""
        return self._watch.lost_at(key)

    # -- operations -----------------------------------------------------------------

    async def _after_started(self, key: str) -> None:
        """Wait for a commit of ``key`` this store started and Redis has not confirmed yet.

        Sent on the one pipelined connection, it is ordered before anything sent after it;
        waiting also orders the calls after one that has to be sent again (a NOSCRIPT, a
        broken connection), so a session's next request always sees its last commit. When it
        fails (reported to whoever started it), so does this call, at once: the store did not
        answer in time, and one timeout is all a request should wait for it.
        """
        started = self._started.get(key)
        if started is not None and not started.done():
            try:
                await asyncio.shield(started)
            except StoreUnavailable as exc:
                raise StoreUnavailable(f"the session's last commit failed ({exc})") from None

    async def load(self, key: str) -> SessionState:
        try:
            keys = self._keys(key)
            epoch, flat = await self._run(lambda: self._load(keys=keys, args=[_epoch()]), key)
        except (RedisError, OSError) as exc:
            raise self._unavailable("load", exc) from exc
        self._observe(key, epoch)
        return state_of(flat)

    async def commit(self, key: str, delta: SessionDelta, ttl_seconds: int) -> SessionState:
        beside, packed = self._lists.commit_call(key, delta, ttl_seconds)
        args = (packed, _epoch())
        try:
            keys = self._keys(key, _op_key(key), *beside)
            reply = await self._run(lambda: self._commit(keys=keys, args=args), key)
        except (RedisError, OSError) as exc:
            raise self._unavailable("commit", exc) from exc
        self._observe(key, reply[0])
        return await self._lists.committed(key, reply, ttl_seconds)

    async def record(self, key: str, values: Mapping[str, str], ttl_seconds: int) -> None:
        args = [ttl_seconds, *itertools.chain.from_iterable(values.items())]
        try:
            await self._run(lambda: self._record(keys=[key], args=args))
        except (RedisError, OSError) as exc:
            raise self._unavailable("record", exc) from exc

    def start_commit(
        self, key: str, delta: SessionDelta, ttl_seconds: int, *, ordered: bool = True
    ) -> asyncio.Future[None] | None:
        """Send the commit now, without suspending, and return the future of its outcome
        (failed with :class:`StoreUnavailable`); None when it cannot go out at once (no lean
        connection open), and :meth:`commit` is the way.

        Sent before the reply leaves, the commit reaches Redis before any request the reply
        lets the client send; with ``ordered``, this store's own later calls on ``key`` wait
        for it (see :meth:`_after_started`). A NOSCRIPT or a broken connection sends it again,
        with the same operation marker, so it is applied once.
        """
        if self._lean is None:  # (not held to ``max_connections``: that cap is for callers that wait)
            return None
        beside, packed = self._lists.commit_call(key, delta, ttl_seconds, awaited=False)
        args = (packed, _epoch())
        keys = self._keys(key, _op_key(key), *beside)
        sent = self._commit.send_now(keys, args)
        if sent is None:
            return None
        outcome: asyncio.Future[None] = sent.get_loop().create_future()
        sent.add_done_callback(functools.partial(self._commit_answered, key, keys, args, ttl_seconds, outcome))
        self._unconfirmed.add(outcome)
        if ordered:
            self._started[key] = outcome
        outcome.add_done_callback(functools.partial(self._commit_confirmed, key))  # one callback for both
        return outcome

    def _commit_answered(
        self,
        key: str,
        keys: list[str],
        args: tuple[bytes, str],
        ttl_seconds: int,
        outcome: asyncio.Future[None],
        sent: asyncio.Future[Any],
    ) -> None:
        if outcome.done():
            return
        error = sent.exception() if not sent.cancelled() else RedisConnectionError("commit abandoned")
        if error is None:
            reply = sent.result()
            self._observe(key, reply[0])
            outcome.set_result(None)
            self._lists.answered(key, reply, ttl_seconds)
        elif isinstance(error, RedisConnectionError) or str(error).startswith("NOSCRIPT"):
            retry = asyncio.ensure_future(self._commit_again(key, keys, args, ttl_seconds, outcome))
            self._retries.add(retry)
            retry.add_done_callback(self._retries.discard)
        else:
            outcome.set_exception(self._unavailable("commit", error))

    async def _commit_again(
        self, key: str, keys: list[str], args: tuple[bytes, str], ttl_seconds: int, outcome: asyncio.Future[None]
    ) -> None:
        """A started commit the server did not take (NOSCRIPT) or whose answer was lost: sent
        again as :meth:`commit` sends it, under its first marker (a commit that did land is
        not applied twice)."""
        try:
            reply = await self._run(lambda: self._commit(keys=keys, args=args))
        except (RedisError, OSError) as exc:
            if not outcome.done():
                outcome.set_exception(self._unavailable("commit", exc))
        else:
            self._observe(key, reply[0])
            if not outcome.done():
                outcome.set_result(None)
            await self._lists.committed(key, reply, ttl_seconds)
        finally:  # cancelled, or failed otherwise: whoever waits on the commit is not left waiting
            if not outcome.done():
                outcome.set_exception(StoreUnavailable(f"commit abandoned at {self.target}"))

    def _commit_confirmed(self, key: str, outcome: asyncio.Future[None]) -> None:
        """A started commit landed or failed: no longer drained, nor waited for by ``key``'s calls."""
        self._unconfirmed.discard(outcome)
        if self._started.get(key) is outcome:
            del self._started[key]

    async def admit(
        self, key: str, limits: Sequence[Limit], ttl_seconds: int, *, replace: bool, claim: Claim | None = None
    ) -> Admission:
        admission = (
            ttl_seconds * 1000,
            1 if replace else 0,
            claim.now_ms if claim else 0,
            claim.lease_ms if claim else 0,
            FIELDS.ENDING,
            FIELDS.ENDING_CLAIM,
            [(limit.name, limit.reserved, limit.amount, limit.limit, limit.used, limit.granted) for limit in limits],
        )
        args = (_json.encode(admission), _epoch())
        try:
            keys = self._keys(key, _op_key(key))
            epoch, refused, claimed, flat = await self._run(lambda: self._admit(keys=keys, args=args), key)
        except (RedisError, OSError) as exc:
            raise self._unavailable("admit", exc) from exc
        self._observe(key, epoch)
        return Admission(state_of(flat), refused or None, claimed=bool(claimed))

    async def claim_ending(self, key: str, claim: Claim, ttl_seconds: int) -> Admission:
        args: list[str | int] = [ttl_seconds * 1000, claim.now_ms, claim.lease_ms, FIELDS.ENDING, FIELDS.ENDING_CLAIM]
        args.append(_epoch())
        try:
            keys = self._keys(key, _op_key(key))
            epoch, claimed, flat = await self._run(lambda: self._claim(keys=keys, args=args), key)
        except (RedisError, OSError) as exc:
            raise self._unavailable("claim", exc) from exc
        self._observe(key, epoch)
        return Admission(state_of(flat), claimed=bool(claimed))

    async def admit_window(self, key: str, limits: Sequence[WindowLimit], now: float) -> Admission:
        args: list[str | int | float] = [now, len(limits)]
        for limit in limits:
            args += (limit.name, limit.prefix, limit.reserved, limit.amount, limit.limit, limit.window_secs)
            args.append(limit.bucket_secs)
        args.append(_epoch())
        try:
            keys = self._keys(key, _op_key(key))
            epoch, refused, retry_after, flat = await self._run(lambda: self._admit_window(keys=keys, args=args), key)
        except (RedisError, OSError) as exc:
            raise self._unavailable("admit", exc) from exc
        self._observe(key, epoch)
        return Admission(state_of(flat), refused or None, float(retry_after) if retry_after else None)

    async def grant(
        self, key: str, grants: Sequence[Grant], lift: Sequence[str], delta: SessionDelta, ttl_seconds: int
    ) -> GrantOutcome:
        checks = ([(g.budget, g.granted, g.amount, g.ceiling) for g in grants], list(lift), ENDING_FIELDS)
        beside, packed = self._lists.commit_call(key, delta, ttl_seconds)  # a grant writes what a commit writes
        args = (packed, _json.encode(checks), _epoch())
        try:
            keys = self._keys(key, _op_key(key), *beside)
            answer = await self._run(lambda: self._grant(keys=keys, args=args), key)
        except (RedisError, OSError) as exc:
            raise self._unavailable("grant", exc) from exc
        self._observe(key, answer[0])
        if len(answer) == 3:  # refused: nothing changed
            return GrantOutcome(state_of(answer[1]), answer[2] or None)
        return GrantOutcome(await self._lists.committed(key, answer, ttl_seconds))

    async def reset(self, key: str) -> bool:
        try:
            if self._started:
                await self._after_started(key)  # after the key's commit, or it returns
            return await self._lists.forget(self._client, key)
        except (RedisError, OSError) as exc:
            raise self._unavailable("reset", exc) from exc

    async def timeline(self, key: str, first: int, count: int) -> TimelinePage:
        if self._started:
            await self._after_started(key)
        return await self._lists.timeline(key, first, count)

    async def namespaces(self, count: int) -> list[str]:
        """After this process's index writes, as :meth:`sessions`."""
        await self.settled()
        return await self._lists.namespaces(self._client, count)

    async def sessions(self, namespace: str, before: tuple[int, str] | None, count: int) -> list[Listed]:
        """After this process's commits and their index writes: a client lists what it just did."""
        await self.settled()
        return await self._lists.sessions(namespace, before, count)

    async def ping(self) -> None:
        try:
            await self._run(self._client.ping)
        except (RedisError, OSError) as exc:
            raise self._unavailable("ping", exc) from exc

    async def settled(self) -> None:
        while self._unconfirmed:
            await asyncio.wait(list(self._unconfirmed))  # waits without cancelling them
        await self._lists.drain()

    async def aclose(self) -> None:
        """Close, once every commit started and not yet confirmed has landed or failed, and
        every index write sent after one has too."""
        await self.settled()
        if self._lean is not None:
            await self._lean.aclose()
        await self._client.aclose()
