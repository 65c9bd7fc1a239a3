"""A request and how long its answer took, for tests that bound the time of an answer (or of others meanwhile)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx


def timed_post(url: str, *, timeout: float = 10.0, **kwargs: Any) -> tuple[httpx.Response, float]:
    """POST with a client timeout (a hang fails the test instead of stalling it); returns the
    response and the seconds it took."""
    started = time.monotonic()
    response = httpx.post(url, timeout=timeout, **kwargs)
    return response, time.monotonic() - started


def while_probing_health(
    health_url: str, request: Callable[[], httpx.Response], *, limit: float = 30.0
) -> tuple[httpx.Response, float, list[float]]:
    """Run ``request`` (in a thread) while probing ``health_url`` back to back, to show the
    proxy's event loop stays free; returns its answer, the seconds it took, and each probe's latency."""
    answered: list[httpx.Response] = []
    agent = threading.Thread(target=lambda: answered.append(request()))
    started = time.perf_counter()
    agent.start()
    latencies: list[float] = []
    while agent.is_alive() and time.perf_counter() - started < limit:
        before = time.perf_counter()
        httpx.get(health_url, timeout=60)
        latencies.append(time.perf_counter() - before)
    agent.join()
    return answered[0], time.perf_counter() - started, latencies
