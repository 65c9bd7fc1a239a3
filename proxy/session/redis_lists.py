"""The Redis store's timelines and session indexes (see :mod:`proxy.session.timeline`).

A session's timeline is a list beside its hash (``lw:{ns:id}:timeline``, the same hash tag),
written by the commit script itself, so it is as atomic as the commit, on a Cluster too. A
namespace's index is a sorted set (session id by last seen ms) and a hash of summaries under
the namespace's own tag (``lw:{ns}:sessions``). On a single server the commit script writes
it too, in the same step (``inline``); on a Cluster, where it is another slot than the
session's, it is written after the commit by a second script (without waiting for its answer
where the commit was sent so). The index is derived data: a write of it that fails is
logged, and the request it follows is not failed for it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from redis.exceptions import RedisError, ResponseError

from proxy.observe.logs import log_event
from proxy.session.base import FIELDS, SessionDelta, SessionState, StoreUnavailable
from proxy.session.memory import tenant_of
from proxy.session.scripts import INDEX, LIST, TIMELINE
from proxy.session.timeline import (
    DEFAULT_TIMELINE_EVENTS,
    Listed,
    TimelinePage,
    decode_event,
    decode_summary,
    index_key,
    listing,
    split_session_key,
    timeline_key,
)

__all__ = ["RedisLists", "packed_delta", "state_of"]

NAMESPACES_FRESH_SECS = 15.0
"""How long the namespaces found by a scan are reused: an operator's console refreshes every few
seconds, and a scan walks the whole keyspace."""
_SCANNED_NAMESPACES = 100_000
"""The most namespaces one scan collects (each caller of an open tenant has one)."""

_json = msgspec.json.Encoder()


def packed_delta(
    delta: SessionDelta,
    ttl_seconds: int,
    timeline_events: int = DEFAULT_TIMELINE_EVENTS,
    listing: tuple[str, int] | None = None,
    *,
    state: bool = True,
) -> bytes:
    """The commit script's one argument (see ``scripts.COMMIT``); ``listing``: (session id,
    index cap) when the script lists the session itself; ``state``: the script answers with
    the session as committed (else with nothing in its place: a commit sent without waiting
    for the state spares both sides the hash)."""
    appends = [(name, keep, ",".join(items)) for name, (items, keep) in delta.appends.items()]
    return _json.encode(
        (
            ttl_seconds * 1000,
            1 if delta.replace else 0,
            FIELDS.RESERVED_PREFIX,
            delta.defaults,
            delta.assignments,
            delta.increments,
            appends,
            [(event.kind, event.at_ms, event.fields) for event in delta.events],
            timeline_events,
            1 if state else 0,
            *(listing or ()),
        )
    )


def state_of(flat: list[str]) -> SessionState:
    """The session as the rest of the proxy sees it (without the scripts' bookkeeping)."""
    return SessionState(dict(zip(flat[::2], flat[1::2], strict=True)))


_Run = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]


class RedisLists:
    """Reads timelines, writes and reads session indexes, for :class:`~proxy.session.redis.RedisStore`."""

    def __init__(
        self,
        script: Callable[[str], Any],
        run: _Run,
        *,
        timeline_events: int,
        listed_sessions: int,
        on_dropped: Callable[[str, str, int], None] | None,
        inline: bool,
        target: str = "Redis",
    ) -> None:
        """``inline``: the commit script lists the session (a single server); ``target``:
        where the store is, as its errors name it."""
        self._unavailable = functools.partial(StoreUnavailable.at, target)
        self._index = script(INDEX)
        self._list = script(LIST)
        self._timeline = script(TIMELINE)
        self._run = run
        self.timeline_events = timeline_events
        self._listed_cap = listed_sessions
        self._on_dropped = on_dropped
        self._pending: set[asyncio.Future[Any]] = set()
        self._inline = inline
        self._scanned: tuple[float, list[str]] | None = None
        """When the namespaces were last scanned (monotonic seconds), newest first."""

    def commit_call(
        self, key: str, delta: SessionDelta, ttl_seconds: int, *, awaited: bool = True
    ) -> tuple[list[str], bytes]:
        """The commit script's keys beside the session's hash (its timeline, and when the
        script lists the session, the namespace's index and summaries) and its argument. A
        commit not ``awaited`` needs the state back only to list the session after it."""
        parts = split_session_key(key) if self._inline else None
        if parts is None:
            return [timeline_key(key)], packed_delta(delta, ttl_seconds, self.timeline_events)
        index = index_key(parts[0])
        listing = (parts[1], self._listed_cap)
        packed = packed_delta(delta, ttl_seconds, self.timeline_events, listing, state=awaited)
        return [timeline_key(key), index, f"{index}:summaries"], packed

    async def committed(self, key: str, reply: list[Any], ttl_seconds: int) -> SessionState:
        """An awaited commit's answer: drops counted, the session listed (if the script did not)."""
        state = state_of(reply[1])
        self._count(key, reply)
        if not self._inline:
            await self.index(key, state, ttl_seconds)
        return state

    def answered(self, key: str, reply: list[Any], ttl_seconds: int) -> None:
        """A sent commit's answer: as :meth:`committed`, the index write not awaited."""
        self._count(key, reply)
        if not self._inline:
            self.send_index(key, state_of(reply[1]), ttl_seconds)

    def _count(self, key: str, reply: list[Any]) -> None:
        self.dropped(key, "timeline", int(reply[2]))
        if int(reply[3]) < 0:
            self._failed(key, ResponseError("WRONGTYPE the index keys hold another type"))
        else:
            self.dropped(key, "sessions", int(reply[3]))

    def dropped(self, key: str, what: str, count: int) -> None:
        if count and self._on_dropped is not None:
            self._on_dropped(tenant_of(key), what, count)

    def _index_call(self, key: str, state: SessionState, ttl_seconds: int) -> tuple[list[str], list[str | int]] | None:
        parts = split_session_key(key)
        if parts is None or state.is_new:
            return None
        namespace, session_id = parts
        seen, summary = listing(state, ttl_seconds)
        keys = [index_key(namespace), f"{index_key(namespace)}:summaries"]
        return keys, [session_id, seen, summary, self._listed_cap, ttl_seconds * 1000]

    async def index(self, key: str, state: SessionState, ttl_seconds: int) -> None:
        """List the session as committed (after an awaited commit)."""
        call = self._index_call(key, state, ttl_seconds)
        if call is None:
            return
        keys, args = call
        try:
            gone = await self._run(lambda: self._index(keys=keys, args=args))
        except (RedisError, OSError) as exc:
            self._failed(key, exc)
        else:
            self.dropped(key, "sessions", int(gone or 0))

    def send_index(self, key: str, state: SessionState, ttl_seconds: int) -> None:
        """List the session as committed, sent at once on the lean connection, its answer not awaited."""
        call = self._index_call(key, state, ttl_seconds)
        if call is None:
            return
        sent = self._index.send_now(*call)
        if sent is None:
            task = asyncio.ensure_future(self.index(key, state, ttl_seconds))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            return
        self._pending.add(sent)
        sent.add_done_callback(functools.partial(self._indexed, key, state, ttl_seconds))

    def _indexed(self, key: str, state: SessionState, ttl_seconds: int, sent: asyncio.Future[Any]) -> None:
        self._pending.discard(sent)
        error = sent.exception() if not sent.cancelled() else None
        if error is not None and str(error).startswith("NOSCRIPT"):  # sent again, loading the script
            task = asyncio.ensure_future(self.index(key, state, ttl_seconds))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        elif error is not None:
            self._failed(key, error)
        elif not sent.cancelled():
            self.dropped(key, "sessions", int(sent.result() or 0))

    async def namespaces(self, client: Any, count: int) -> list[str]:
        """The namespaces whose session indexes exist, the most recently active first: found
        by scanning the keyspace (every node of a Cluster), which costs the request path
        nothing; reused for :data:`NAMESPACES_FRESH_SECS`."""
        now = time.monotonic()
        if self._scanned is None or now - self._scanned[0] >= NAMESPACES_FRESH_SECS:
            try:
                found = await self._run(lambda: _newest_namespaces(client))
            except (RedisError, OSError) as exc:
                raise self._unavailable("namespaces", exc) from exc
            self._scanned = (now, found)
        return self._scanned[1][:count]

    def _failed(self, key: str, error: BaseException) -> None:
        log_event(
            "session_index_error",
            {"tenant": tenant_of(key), "error": str(self._unavailable("index write", error))},
            logging.WARNING,
        )

    async def drain(self) -> None:
        """Wait for the index writes still under way (the store is closing)."""
        while self._pending:
            await asyncio.wait(list(self._pending))

    async def forget(self, client: Any, key: str) -> bool:
        """Delete the session with its timeline, and take it off its index."""
        existed = bool(await self._run(lambda: client.delete(key, timeline_key(key))))
        parts = split_session_key(key)
        if parts is not None:
            namespace, session_id = parts
            await self._run(lambda: client.zrem(index_key(namespace), session_id))
            await self._run(lambda: client.hdel(f"{index_key(namespace)}:summaries", session_id))
        return existed

    async def timeline(self, key: str, first: int, count: int) -> TimelinePage:
        keys = [key, timeline_key(key)]
        args = [max(0, first), count, FIELDS.TIMELINE_TOTAL, FIELDS.TIMELINE_DROPPED]
        try:
            total, dropped, start, *raw = await self._run(lambda: self._timeline(keys=keys, args=args))
        except (RedisError, OSError) as exc:
            raise self._unavailable("timeline", exc) from exc
        events = [(int(start) + i, decode_event(event)) for i, event in enumerate(raw)]
        return TimelinePage(events, int(total), int(dropped))

    async def sessions(self, namespace: str, before: tuple[int, str] | None, count: int) -> list[Listed]:
        keys = [index_key(namespace), f"{index_key(namespace)}:summaries"]
        highest = "+inf" if before is None else str(before[0])
        found: list[Listed] = []
        offset = 0
        while len(found) < count:
            args = [highest, offset, count]
            try:
                flat = await self._run(functools.partial(self._list, keys=keys, args=args))
            except (RedisError, OSError) as exc:
                raise self._unavailable("list", exc) from exc
            for i in range(0, len(flat), 3):
                session_id, seen = flat[i], int(float(flat[i + 1]))
                if before is None or (seen, session_id) < before:
                    found.append(Listed(session_id, seen, decode_summary(flat[i + 2])))
            if len(flat) < 3 * count:
                break
            offset += count  # ties with the cursor were skipped: read on
        return found[:count]


async def _newest_namespaces(client: Any) -> list[str]:
    """Every namespace with a session index, ordered by its most recently seen session."""
    names: list[str] = []
    async for raw in client.scan_iter(match=index_key("*"), count=1000, _type="zset"):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        namespace = key[4:-10] if key.startswith("lw:{") and key.endswith("}:sessions") else ""
        if namespace and "}" not in namespace:
            names.append(namespace)
        if len(names) >= _SCANNED_NAMESPACES:
            break
    newest: list[tuple[float, str]] = []
    for start in range(0, len(names), 1000):  # the newest of each index, a thousand a round trip
        chunk = names[start : start + 1000]
        pipe = client.pipeline(transaction=False)
        for namespace in chunk:
            pipe.zrevrange(index_key(namespace), 0, 0, withscores=True)
        for namespace, top in zip(chunk, await pipe.execute(), strict=True):
            newest.append((float(top[0][1]) if top else 0.0, namespace))
    newest.sort(reverse=True)
    return [namespace for _, namespace in newest]
