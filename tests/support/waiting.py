"""Waiting for something that should happen: generously, since a wait ends as soon as its
condition holds. A short limit costs nothing when things work but fails a test that is only
slow because the machine is busy; a minute is what a test waits before calling it a hang."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

PATIENCE_SECS = 60.0
"""How long a test waits for something that should happen before it calls it a hang."""


def wait_for(condition: Callable[[], object], *, within: float = PATIENCE_SECS, interval: float = 0.01) -> bool:
    """Poll ``condition`` until it is true or ``within`` seconds pass; returns whether it held.

    The test asserts what it waited for afterwards, so the failure names the behaviour."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() >= deadline:
            return bool(condition())
        time.sleep(interval)
    return True


async def async_wait_for(
    condition: Callable[[], object], *, within: float = PATIENCE_SECS, interval: float = 0.01
) -> bool:
    """:func:`wait_for` inside an event loop: it sleeps by awaiting, so the tasks it waits on run."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() >= deadline:
            return bool(condition())
        await asyncio.sleep(interval)
    return True
