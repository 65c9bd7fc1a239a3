"""In-process session store: the zero-setup default for a single process.

Every operation runs without an ``await`` between read and write, so on one event loop it
is as atomic as the Redis script. Expired sessions are dropped when touched and swept
periodically, so memory stays bounded by the live sessions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from proxy.session.base import Admission, Limit, SessionDelta, SessionState, WindowLimit
from proxy.session.limits import admit_in_place, admit_window_in_place

__all__ = ["MemoryStore"]


class MemoryStore:
    """Sessions in a dict, each with an expiry time."""

    losses = 0
    """Memory cannot lose data behind the process's back (a restart loses the process too)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, sweep_every: int = 1024) -> None:
        self._data: dict[str, tuple[float, dict[str, str]]] = {}
        self._clock = clock
        self._sweep_every = sweep_every
        self._writes = 0

    def _live(self, key: str) -> dict[str, str] | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._data[key]
            return None
        return entry[1]

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
        self._data[key] = (self._clock() + ttl_seconds, dict(state.values))
        self._writes += 1
        if self._writes % self._sweep_every == 0:
            self._sweep()
        return state

    async def admit(self, key: str, limits: Sequence[Limit], ttl_seconds: int, *, replace: bool) -> Admission:
        values = {} if replace else dict(self._live(key) or {})
        refused = admit_in_place(values, limits)
        if refused is None or replace:
            self._data[key] = (self._clock() + ttl_seconds, values)
        return Admission(SessionState(dict(values)), refused)

    async def admit_window(self, key: str, limits: Sequence[WindowLimit], now: float) -> Admission:
        values = dict(self._live(key) or {})
        refused, retry_after = admit_window_in_place(values, limits, now)
        ttl = max(limit.window_secs + limit.bucket_secs for limit in limits) if limits else 60
        self._data[key] = (self._clock() + ttl, values)
        return Admission(SessionState(dict(values)), refused, retry_after)

    async def reset(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._data.clear()

    def ttl(self, key: str) -> float | None:
        """Seconds left for ``key`` (tests and the inspect API use it)."""
        entry = self._data.get(key)
        return None if entry is None else entry[0] - self._clock()

    def _sweep(self) -> None:
        now = self._clock()
        for key in [k for k, (expires, _) in self._data.items() if expires <= now]:
            del self._data[key]
