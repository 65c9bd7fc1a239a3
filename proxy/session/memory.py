"""In-process session store: the zero-setup default for a single process.

Every operation runs without an ``await`` between read and write, so on one event loop it
is as atomic as the Redis script.

Memory is bounded per tenant: each tenant's sessions sit in an ``OrderedDict`` in
least-recently-used order, and a tenant over ``max_sessions_per_tenant`` loses its least
recently used session (counted through ``on_evict``). Expiry costs O(1) amortized too: a
write drops expired entries from the front of its tenant's order (each entry is dropped
once), and a read drops an expired entry it touches. No operation walks every session.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from proxy.logs import log_event
from proxy.session.base import Admission, Claim, Limit, SessionDelta, SessionState, WindowLimit, only_released
from proxy.session.limits import admit_in_place, admit_window_in_place, claim_in_place

__all__ = ["DEFAULT_SESSIONS_PER_TENANT", "MemoryStore", "tenant_of"]

DEFAULT_SESSIONS_PER_TENANT = 50_000

_Entry = tuple[float, dict[str, str]]
_UNCAPPED = ""
"""The group of keys that are not a tenant's sessions (a tenant's day, test keys)."""


def tenant_of(key: str) -> str:
    """The tenant of a session key ``lw:{namespace:session}`` (namespaces hold no ':'; a
    caller's namespace is ``tenant~digest``, see :func:`proxy.tenants.caller_namespace`);
    ``_UNCAPPED`` for any other key, e.g. a tenant's rolling day ``lw:{tenant}:daily``."""
    start = key.find("{")
    end = key.find("}", start + 1)
    colon = key.find(":", start + 1, end)
    if start < 0 or colon < 0:
        return _UNCAPPED
    tilde = key.find("~", start + 1, colon)
    return key[start + 1 : colon if tilde < 0 else tilde]


class MemoryStore:
    """Sessions in per-tenant LRU dicts, each entry with an expiry time."""

    losses = 0
    in_process = True
    """Memory cannot lose data behind the process's back (a restart loses the process too)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_sessions_per_tenant: int = DEFAULT_SESSIONS_PER_TENANT,
        on_evict: Callable[[str], None] | None = None,
    ) -> None:
        self._groups: dict[str, OrderedDict[str, _Entry]] = {}
        self._clock = clock
        self._cap = max_sessions_per_tenant
        self._on_evict = on_evict
        self._warned: set[str] = set()

    def _live(self, key: str) -> dict[str, str] | None:
        group = self._groups.get(tenant_of(key))
        entry = group.get(key) if group is not None else None
        if entry is None or group is None:
            return None
        if entry[0] <= self._clock():
            del group[key]
            return None
        group.move_to_end(key)  # used: the most recent now
        return entry[1]

    def _put(self, key: str, values: dict[str, str], ttl_seconds: float) -> None:
        tenant = tenant_of(key)
        group = self._groups.get(tenant)
        if group is None:
            group = self._groups[tenant] = OrderedDict()
        now = self._clock()
        group[key] = (now + ttl_seconds, values)
        group.move_to_end(key)
        while group:  # expire from the front, least recently used first
            first = next(iter(group.values()))
            if first[0] > now:
                break
            group.popitem(last=False)
        if tenant != _UNCAPPED:
            while len(group) > self._cap:
                group.popitem(last=False)
                self._evicted(tenant)

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
        return group is not None and group.pop(key, None) is not None

    def lost_at(self, key: str) -> float | None:
        return None

    async def load(self, key: str) -> SessionState:
        values = self._live(key)
        return SessionState(dict(values) if values else {})

    async def commit(self, key: str, delta: SessionDelta, ttl_seconds: int) -> SessionState:
        values = self._live(key) or {}
        if delta.replace:
            values = {}
        state = delta.applied_to(SessionState(values))
        if only_released(state.values):
            self._drop(key)
            return SessionState()
        self._put(key, dict(state.values), ttl_seconds)
        return state

    async def admit(
        self, key: str, limits: Sequence[Limit], ttl_seconds: int, *, replace: bool, claim: Claim | None = None
    ) -> Admission:
        values = {} if replace else dict(self._live(key) or {})
        refused = admit_in_place(values, limits)
        claimed = refused is not None and claim is not None and claim_in_place(values, claim)
        if refused is None or replace or claimed:
            self._put(key, values, ttl_seconds)
        return Admission(SessionState(dict(values)), refused, claimed=claimed)

    async def claim_ending(self, key: str, claim: Claim, ttl_seconds: int) -> Admission:
        values = dict(self._live(key) or {})
        claimed = claim_in_place(values, claim)
        if claimed:
            self._put(key, values, ttl_seconds)
        return Admission(SessionState(dict(values)), claimed=claimed)

    async def admit_window(self, key: str, limits: Sequence[WindowLimit], now: float) -> Admission:
        values = dict(self._live(key) or {})
        refused, retry_after = admit_window_in_place(values, limits, now)
        ttl = max(limit.window_secs + limit.bucket_secs for limit in limits) if limits else 60
        self._put(key, values, ttl)
        return Admission(SessionState(dict(values)), refused, retry_after)

    async def reset(self, key: str) -> bool:
        live = self._live(key) is not None
        self._drop(key)
        return live

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._groups.clear()

    def __len__(self) -> int:
        """Entries held, expired ones not yet dropped included."""
        return sum(len(group) for group in self._groups.values())
