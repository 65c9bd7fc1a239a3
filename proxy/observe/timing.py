"""How much of a request's time was the proxy's own: wall time minus time spent waiting on
the upstream (agent calls, the judge, the summary call).

A context variable carries the request's timer, so the upstream client can book its waits
without every caller threading a stopwatch through.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["RequestTiming", "begin", "current", "timed", "waiting"]


@dataclass(slots=True)
class RequestTiming:
    started: float = field(default_factory=time.perf_counter)
    waited: float = 0.0
    first_byte: float | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def overhead(self) -> float:
        """Seconds the proxy itself spent so far (never below 0)."""
        spent = time.perf_counter() - self.started - self.waited
        return spent if spent > 0.0 else 0.0


_current: ContextVar[RequestTiming | None] = ContextVar("loopwarden_request_timing", default=None)


def begin() -> RequestTiming:
    """Start timing the request being handled in this task."""
    timing = RequestTiming()
    _current.set(timing)
    return timing


def current() -> RequestTiming | None:
    return _current.get()


class waiting:
    """``with waiting():`` books the enclosed time as waiting on something else (not proxy
    overhead). A class rather than a generator: every upstream call enters one."""

    __slots__ = ("_started",)

    def __enter__(self) -> None:
        self._started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        timing = _current.get()
        if timing is not None:
            timing.waited += time.perf_counter() - self._started


class _Series(Protocol):
    def observe(self, amount: float) -> None: ...


class timed:
    """``with timed(series):`` observes how long the block took into a latency series (a
    class rather than a generator: the store calls of every request are timed with it)."""

    __slots__ = ("_series", "_started")

    def __init__(self, series: _Series) -> None:
        self._series = series
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._series.observe(time.perf_counter() - self._started)
