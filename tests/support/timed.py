"""Timing bounds that hold on a busy machine.

A bound like "answered within 1 s" is written for an idle machine; on two cores shared with
a dozen busy processes the same answer takes several times longer, and the test fails
although nothing is wrong. So a bound is never a fixed number: :class:`Stopwatch` times a
block and, just before and just after it, how long a fixed piece of pure-Python work takes
in this process (which slows down with the machine's load and with the GIL contention of
an in-process proxy); :meth:`Stopwatch.scaled` stretches an idle-machine bound by that
slowdown. On an idle machine the bounds are exactly as written, so a regression (a
catastrophic pattern holding the event loop for seconds, a deadline not kept) still fails.

Lower bounds ("waited at least the Retry-After") need no scaling: load only adds time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import httpx

REFERENCE_ITERATIONS = 400_000
IDLE_REFERENCE_SECS = 0.016
"""The reference work's duration on the idle 2-core development machine (fastest of 20 runs)."""


def reference_seconds() -> float:
    """How long the reference work (pure Python, no I/O) takes in this process right now."""
    started = time.perf_counter()
    total = 0
    for i in range(REFERENCE_ITERATIONS):
        total += i * i
    return time.perf_counter() - started


def slowdown() -> float:
    """How many times slower than the idle reference this process runs Python right now (at least 1)."""
    return max(1.0, reference_seconds() / IDLE_REFERENCE_SECS)


def scaled(seconds: float) -> float:
    """``seconds``, a bound for an idle machine, stretched by the slowdown measured now (just
    after what it bounds, for an interval the test timed itself)."""
    return seconds * slowdown()


class Stopwatch:
    """Times a ``with`` block and the machine's slowdown around it (the larger of before and after)."""

    def __init__(self) -> None:
        self.elapsed = 0.0
        self.slowdown = 1.0
        self._started = 0.0

    def __enter__(self) -> Stopwatch:
        self.slowdown = slowdown()
        self._started = time.perf_counter()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.elapsed = time.perf_counter() - self._started
        self.slowdown = max(self.slowdown, slowdown())

    def scaled(self, seconds: float) -> float:
        """``seconds``, a bound for an idle machine, stretched by the slowdown this block met."""
        return seconds * self.slowdown


def timed_post(url: str, *, timeout: float = 60.0, **kwargs: Any) -> tuple[httpx.Response, Stopwatch]:
    """POST with a client timeout (a hang fails the test instead of stalling it); returns the
    response and the stopwatch that timed it."""
    with Stopwatch() as watch:
        response = httpx.post(url, timeout=timeout, **kwargs)
    return response, watch


def while_probing_health(
    health_url: str, request: Callable[[], httpx.Response], *, limit: float = 120.0
) -> tuple[httpx.Response, Stopwatch, list[float]]:
    """Run ``request`` (in a thread) while probing ``health_url`` back to back, to show the
    proxy's event loop stays free; returns its answer, the stopwatch that timed it, and each
    probe's latency."""
    answered: list[httpx.Response] = []
    agent = threading.Thread(target=lambda: answered.append(request()))
    latencies: list[float] = []
    with Stopwatch() as watch:
        began = time.perf_counter()
        agent.start()
        while agent.is_alive() and time.perf_counter() - began < limit:
            before = time.perf_counter()
            httpx.get(health_url, timeout=120)
            latencies.append(time.perf_counter() - before)
        agent.join()
    return answered[0], watch, latencies
