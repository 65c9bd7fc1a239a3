"""How much of a request's time was the proxy's own: wall time minus time spent waiting on
the upstream (agent calls, the judge, the summary call).

A context variable carries the request's timer, so the upstream client can book its waits
without every caller threading a stopwatch through.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = ["RequestTiming", "begin", "current", "waiting"]


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
