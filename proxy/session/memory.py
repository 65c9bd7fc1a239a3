"""In-process session store: the zero-setup default for a single process.

Every operation runs without an ``await`` between read and write, so on one event loop it
is as atomic as the Redis script.

Memory is bounded per tenant: each tenant's sessions sit in an ``OrderedDict`` in
least-recently-used order, and a tenant over ``max_sessions_per_tenant`` loses its least
recently used session (counted through ``on_evict``).

Expiry is a timing wheel: every entry is filed under the second its TTL runs out, and the
due seconds wait in a heap. A write drops at most :data:`EXPIRY_STEPS_PER_WRITE` expired
entries (or spent seconds), more than the one entry it may add, so nothing expired piles up
while writes go on and no write does more than a fixed amount of housekeeping, however many
sessions live (the old sweep of every entry took ~20 ms at 200 k sessions). Least recently
used is not soonest expiring (TTLs differ by policy, a read refreshes recency but not the
TTL), hence the wheel beside the LRU order. A read drops an expired entry it touches.

A session's timeline is a tuple of encoded events beside its values (a tuple of strings is
not tracked by the collector), capped at ``timeline_events``; each namespace's sessions are
listed in an ordered map by last commit, capped at ``listed_sessions``. Both go with the
session when it expires, is evicted or reset.

A stored map of values is never changed once stored (every write stores a new one), so the
snapshots handed out (:class:`SessionState`) share it instead of copying it.

No session owns an object the garbage collector tracks (values are dicts of strings, expiry
times sit in a dict of floats, not in a tuple per entry): a full collection would otherwise
walk every session (~120 ms at 200 k sessions) whenever enough new ones had arrived.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from proxy.observe.logs import log_event
from proxy.session.base import (
    FIELDS,
    Admission,
    Claim,
    Grant,
    GrantOutcome,
    Limit,
    SessionDelta,
    SessionState,
    WindowLimit,
    only_released,
)
from proxy.session.identity import session_key
from proxy.session.limits import admit_in_place, admit_window_in_place, claim_in_place, grant_in_place
from proxy.session.timeline import (
    DEFAULT_LISTED_SESSIONS,
    DEFAULT_TIMELINE_EVENTS,
    Listed,
    TimelinePage,
    decode_event,
    encode_event,
    last_seen_ms,
    split_session_key,
    summary,
)

__all__ = ["DEFAULT_SESSIONS_PER_TENANT", "EXPIRY_STEPS_PER_WRITE", "MemoryStore", "tenant_of"]

DEFAULT_SESSIONS_PER_TENANT = 50_000
EXPIRY_STEPS_PER_WRITE = 16
"""The most housekeeping one write does: expired entries dropped plus spent seconds retired."""

_UNCAPPED = ""
"""The group of keys that are not a tenant's sessions (a tenant's day, test keys)."""


def tenant_of(key: str) -> str:
    """The tenant of a session key ``lw:{namespace:session}`` (namespaces hold no ':'; a
    caller's namespace is ``tenant~digest``, see :func:`proxy.edge.namespaces.caller_namespace`);
    ``_UNCAPPED`` for any other key, e.g. a tenant's rolling day ``lw:{tenant}:daily``."""
    start = key.find("{")
    end = key.find("}", start + 1)
    colon = key.find(":", start + 1, end)
    if start < 0 or colon < 0:
        return _UNCAPPED
    tilde = key.find("~", start + 1, colon)
    return key[start + 1 : colon if tilde < 0 else tilde]


class MemoryStore:
    """Sessions in per-tenant LRU dicts, their expiry times on a timing wheel."""

    losses = 0
    in_process = True
    """Memory cannot lose data behind the process's back (a restart loses the process too)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_sessions_per_tenant: int = DEFAULT_SESSIONS_PER_TENANT,
        on_evict: Callable[[str], None] | None = None,
        timeline_events: int = DEFAULT_TIMELINE_EVENTS,
        listed_sessions: int = DEFAULT_LISTED_SESSIONS,
        on_dropped: Callable[[str, str, int], None] | None = None,
    ) -> None:
        """``on_dropped(tenant, what, n)``: ``n`` timeline events (``what`` = "timeline") or
        listed sessions ("sessions") went over their cap."""
        self._timelines: dict[str, tuple[str, ...]] = {}
        self._indexes: dict[str, OrderedDict[str, tuple[int, int]]] = {}
        """Namespace → session id → (last seen ms, TTL seconds), the last committed last; the
        summary is made from the session's values when listed, not on every commit."""
        self._timeline_cap = timeline_events
        self._listed_cap = listed_sessions
        self._on_dropped = on_dropped
        self._groups: dict[str, OrderedDict[str, dict[str, str]]] = {}
        self._expires: dict[str, float] = {}
        self._wheel: dict[int, dict[str, None]] = {}
        """Second → the keys whose TTL runs out just before it (an ordered set)."""
        self._seconds: list[int] = []
        """A heap of the wheel's seconds: the next one due on top."""
        self._clock = clock
        self._cap = max_sessions_per_tenant
        self._on_evict = on_evict
        self._warned: set[str] = set()

    def _live(self, key: str, tenant: str | None = None) -> dict[str, str] | None:
        """``key``'s values, None when absent or expired; ``tenant``: ``tenant_of(key)``, when known."""
        group = self._groups.get(tenant_of(key) if tenant is None else tenant)
        values = group.get(key) if group is not None else None
        if values is None or group is None:
            return None
        expires = self._expires[key]
        if expires <= self._clock():
            del group[key]
            del self._expires[key]
            self._unfile(key, expires)
            self._forget(key)
            return None
        group.move_to_end(key)  # used: the most recent now
        return values

    def _put(self, key: str, values: dict[str, str], ttl_seconds: float, tenant: str | None = None) -> None:
        if tenant is None:
            tenant = tenant_of(key)
        group = self._groups.get(tenant)
        if group is None:
            group = self._groups[tenant] = OrderedDict()
        now = self._clock()
        old = self._expires.get(key)
        if old is not None:
            self._unfile(key, old)
        expires = self._expires[key] = now + ttl_seconds
        group[key] = values
        group.move_to_end(key)
        self._file(key, expires)
        if tenant != _UNCAPPED:
            while len(group) > self._cap:
                evicted, _ = group.popitem(last=False)
                self._unfile(evicted, self._expires.pop(evicted))
                self._forget(evicted)
                self._evicted(tenant)
        self._expire(now)

    def _file(self, key: str, expires: float) -> None:
        """Put ``key`` on the wheel, under the first whole second after its expiry."""
        second = int(expires) + 1
        keys = self._wheel.get(second)
        if keys is None:
            keys = self._wheel[second] = {}
            heapq.heappush(self._seconds, second)
        keys[key] = None

    def _unfile(self, key: str, expires: float) -> None:
        """Take ``key`` off the wheel (rewritten, dropped or evicted); its second stays until due."""
        keys = self._wheel.get(int(expires) + 1)
        if keys is not None:
            keys.pop(key, None)

    def _expire(self, now: float) -> None:
        """Drop what is due, at most :data:`EXPIRY_STEPS_PER_WRITE` steps' worth."""
        seconds = self._seconds
        for _ in range(EXPIRY_STEPS_PER_WRITE):
            if not seconds or seconds[0] > now:
                return
            keys = self._wheel[seconds[0]]
            if not keys:  # every key of this second expired or moved: retire it
                del self._wheel[heapq.heappop(seconds)]
                continue
            key, _ = keys.popitem()  # filed under a second <= now: its TTL has run out
            del self._expires[key]
            del self._groups[tenant_of(key)][key]
            self._forget(key)

    def _evicted(self, tenant: str) -> None:
        if self._on_evict is not None:
            self._on_evict(tenant)
        if tenant not in self._warned:  # once per tenant: the metric counts the rest
            self._warned.add(tenant)
            log_event(
                "sessions_evicted",
                {
                    "tenant": tenant,
                    "limit": self._cap,
                    "detail": "in-memory sessions over the per-tenant cap: the least recently used are dropped",
                },
                logging.WARNING,
            )

    def _drop(self, key: str) -> bool:
        group = self._groups.get(tenant_of(key))
        if group is None or group.pop(key, None) is None:
            return False
        self._unfile(key, self._expires.pop(key))
        self._forget(key)
        return True

    def _forget(self, key: str) -> None:
        """A session gone: its timeline and its listing go with it."""
        self._timelines.pop(key, None)
        parts = split_session_key(key)
        if parts is not None:
            index = self._indexes.get(parts[0])
            if index is not None and index.pop(parts[1], None) is not None and not index:
                del self._indexes[parts[0]]

    def _append(self, key: str, delta: SessionDelta, values: dict[str, str]) -> None:
        """The delta's events onto the timeline, the oldest over the cap dropped and counted."""
        kept = () if delta.replace else self._timelines.get(key, ())
        kept += tuple(map(encode_event, delta.events))
        if delta.events:
            total = int(values.get(FIELDS.TIMELINE_TOTAL) or 0) + len(delta.events)
            values[FIELDS.TIMELINE_TOTAL] = str(total)
            kept = kept[-total:]  # the values were started afresh (an admission that replaced them): so is the list
        over = len(kept) - self._timeline_cap
        if over > 0:
            kept = kept[over:]
            values[FIELDS.TIMELINE_DROPPED] = str(int(values.get(FIELDS.TIMELINE_DROPPED) or 0) + over)
            self._dropped(key, "timeline", over)
        self._timelines[key] = kept

    def _list(self, key: str, state: SessionState, ttl_seconds: int) -> None:
        """Put the session first in its namespace's index (the least recently seen over the cap go)."""
        parts = split_session_key(key)
        if parts is None:
            return
        namespace, session_id = parts
        index = self._indexes.get(namespace)
        if index is None:
            index = self._indexes[namespace] = OrderedDict()
        index[session_id] = (last_seen_ms(state), ttl_seconds)
        index.move_to_end(session_id)
        while len(index) > self._listed_cap:
            index.popitem(last=False)
            self._dropped(key, "sessions", 1)

    def _dropped(self, key: str, what: str, count: int) -> None:
        if self._on_dropped is not None:
            self._on_dropped(tenant_of(key), what, count)

    def lost_at(self, key: str) -> float | None:
        return None

    async def load(self, key: str) -> SessionState:
        values = self._live(key)
        return SessionState(values if values else {})  # shared: a stored map is never changed

    async def commit(self, key: str, delta: SessionDelta, ttl_seconds: int) -> SessionState:
        tenant = tenant_of(key)
        live = self._live(key, tenant)
        stored = {} if delta.replace or not live else dict(live)
        delta.apply(stored)
        if only_released(stored):
            self._drop(key)
            return SessionState()
        if delta.events or delta.replace:
            self._append(key, delta, stored)
        state = SessionState(stored)
        self._put(key, stored, ttl_seconds, tenant)
        self._list(key, state, ttl_seconds)
        return state

    async def record(self, key: str, values: Mapping[str, str], ttl_seconds: int) -> None:
        live = self._live(key)
        self._put(key, {**live, **values} if live else dict(values), ttl_seconds)

    def start_commit(
        self, key: str, delta: SessionDelta, ttl_seconds: int, *, ordered: bool = True
    ) -> asyncio.Future[None] | None:
        """None: a commit here never suspends (see ``in_process``), so it is simply awaited."""
        return None

    async def admit(
        self, key: str, limits: Sequence[Limit], ttl_seconds: int, *, replace: bool, claim: Claim | None = None
    ) -> Admission:
        tenant = tenant_of(key)
        live = None if replace else self._live(key, tenant)
        values = dict(live) if live else {}
        refused = admit_in_place(values, limits)
        claimed = refused is not None and claim is not None and claim_in_place(values, claim)
        if refused is None or replace or claimed:
            self._put(key, values, ttl_seconds, tenant)
        return Admission(SessionState(values), refused, claimed=claimed)  # shared, as load's

    async def claim_ending(self, key: str, claim: Claim, ttl_seconds: int) -> Admission:
        values = dict(self._live(key) or {})
        claimed = claim_in_place(values, claim)
        if claimed:
            self._put(key, values, ttl_seconds)
        return Admission(SessionState(values), claimed=claimed)

    async def admit_window(self, key: str, limits: Sequence[WindowLimit], now: float) -> Admission:
        values = dict(self._live(key) or {})
        refused, retry_after = admit_window_in_place(values, limits, now)
        ttl = max(limit.window_secs + limit.bucket_secs for limit in limits) if limits else 60
        self._put(key, values, ttl)
        return Admission(SessionState(values), refused, retry_after)

    async def grant(
        self, key: str, grants: Sequence[Grant], lift: Sequence[str], delta: SessionDelta, ttl_seconds: int
    ) -> GrantOutcome:
        live = self._live(key)
        if not live:
            return GrantOutcome(SessionState())
        values = dict(live)
        refused = grant_in_place(values, grants, lift)
        if refused is not None:
            return GrantOutcome(SessionState(values), refused)
        self._put(key, values, ttl_seconds)
        return GrantOutcome(await self.commit(key, delta, ttl_seconds))

    async def reset(self, key: str) -> bool:
        live = self._live(key) is not None
        self._drop(key)
        return live

    async def timeline(self, key: str, first: int, count: int) -> TimelinePage:
        values = self._live(key)
        if values is None:
            return TimelinePage()
        kept = self._timelines.get(key, ())
        total = int(values.get(FIELDS.TIMELINE_TOTAL) or 0)
        start = total - len(kept)  # the number of the oldest kept event
        skip = max(0, first - start)
        events = [(start + skip + i, decode_event(raw)) for i, raw in enumerate(kept[skip : skip + count])]
        return TimelinePage(events, total, int(values.get(FIELDS.TIMELINE_DROPPED) or 0))

    async def sessions(self, namespace: str, before: tuple[int, str] | None, count: int) -> list[Listed]:
        index = self._indexes.get(namespace)
        if not index:
            return []
        entries = ((seen, session_id, ttl) for session_id, (seen, ttl) in index.items())
        if before is not None:
            entries = (entry for entry in entries if (entry[0], entry[1]) < before)
        group: Mapping[str, dict[str, str]] = self._groups.get(tenant_of(session_key(namespace, "")), {})
        listed = []
        for seen, session_id, ttl in heapq.nlargest(count, entries):
            values = group.get(session_key(namespace, session_id), {})  # read, not used: recency stays
            listed.append(Listed(session_id, seen, summary(SessionState(values), ttl)))
        return listed

    async def namespaces(self, count: int) -> list[str]:
        newest = ((next(reversed(index.values()))[0], namespace) for namespace, index in self._indexes.items() if index)
        return [namespace for _, namespace in heapq.nlargest(count, newest)]

    async def ping(self) -> None:
        return None

    async def settled(self) -> None:
        return None  # every commit here completes before it returns

    async def aclose(self) -> None:
        self._timelines.clear()
        self._indexes.clear()
        self._groups.clear()
        self._expires.clear()
        self._wheel.clear()
        self._seconds.clear()

    def __len__(self) -> int:
        """Entries held, expired ones not yet dropped included."""
        return sum(len(group) for group in self._groups.values())
