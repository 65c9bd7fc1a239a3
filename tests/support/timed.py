"""A request and how long its answer took, for tests that bound the time of an answer."""

from __future__ import annotations

import time
from typing import Any

import httpx


def timed_post(url: str, *, timeout: float = 10.0, **kwargs: Any) -> tuple[httpx.Response, float]:
    """POST with a client timeout (a hang fails the test instead of stalling it); returns the
    response and the seconds it took."""
    started = time.monotonic()
    response = httpx.post(url, timeout=timeout, **kwargs)
    return response, time.monotonic() - started
