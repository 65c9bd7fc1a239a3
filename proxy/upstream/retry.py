"""When and how long to wait before asking the upstream again.

Only faults that a second try can fix are retried: the request never left (connect
errors), or the upstream said so (429, 500, 502, 503, 504). Backoff is exponential with
full jitter, so many proxies hitting one failing upstream spread out instead of
synchronizing.

When the upstream says how long to wait (``Retry-After`` in seconds or as a date, or
``retry-after-ms``), that wait wins over backoff and the proxy waits it out: a storm of 429s
of a few seconds reaches the client as one slow success instead of an error. Such paced
retries have their own attempt limit (``paced_attempts``) and their waits, added up, stay
within ``retry_after_cap``; past either the proxy hands the answer (and its ``Retry-After``)
to the client, whose own backoff takes over.

A fault that comes back within ``fast_fault`` seconds of sending (a refused connection, a
gateway's instant 503) says the upstream did not work on the request at all: it is down or
shedding load, and asking again as soon as after a slow fault only hits it before it
recovers. So after a fast fault the backoff takes one more doubling step (its ceiling is
twice as high, still capped at ``max_delay``).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["RETRYABLE_STATUSES", "RetryBudget", "RetryPolicy", "SharedAttempts", "parse_retry_after"]

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


def parse_retry_after(headers: Mapping[str, str], now: Callable[[], float] = time.time) -> float | None:
    """Seconds the upstream asked us to wait: ``retry-after-ms``, then ``Retry-After`` (seconds or date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries: ``attempts`` in all, each wait drawn from [0, min(max, base * 2**n)]
    (n one higher after a fault faster than ``fast_fault`` seconds); when the upstream names
    the wait, up to ``paced_attempts`` in all, whose named waits add up to at most
    ``retry_after_cap`` seconds."""

    attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    retry_after_cap: float = 20.0
    paced_attempts: int = 10
    fast_fault: float = 0.05

    def delay(
        self,
        attempt: int,
        retry_after: float | None,
        draw: Callable[[], float],
        paced: float = 0.0,
        fault_seconds: float | None = None,
    ) -> float | None:
        """Wait before attempt ``attempt + 1`` (1-based ``attempt`` just failed); None means stop.

        ``paced``: the seconds this request already waited because the upstream said so;
        ``fault_seconds``: how long the failed attempt took to fail (None: unknown)."""
        if retry_after is not None:
            if attempt >= self.paced_attempts:
                return None
            return retry_after if paced + retry_after <= self.retry_after_cap else None
        if attempt >= self.attempts:
            return None
        return self.backoff(attempt, draw, fault_seconds)

    def backoff(self, attempt: int, draw: Callable[[], float], fault_seconds: float | None = None) -> float:
        """The jittered exponential wait after failed attempt ``attempt`` (1-based), one doubling
        longer when that attempt failed fast (:meth:`failed_fast`)."""
        step = attempt if self.failed_fast(fault_seconds) else attempt - 1
        return draw() * min(self.max_delay, self.base_delay * 2.0**step)

    def failed_fast(self, fault_seconds: float | None) -> bool:
        """The fault came back within ``fast_fault`` seconds: the upstream did not work on the request."""
        return fault_seconds is not None and fault_seconds < self.fast_fault


class RetryBudget:
    """Retries may be at most ``ratio`` of requests, so a failing upstream is not hit harder.

    A token bucket: every request deposits ``ratio`` tokens (up to ``burst``), every retry
    spends one. Under sustained failure the proxy falls back to about one retry per
    ``1 / ratio`` requests instead of multiplying the load by its attempt count.
    """

    def __init__(self, ratio: float, burst: float = 10.0) -> None:
        self._ratio = ratio
        self._burst = burst
        self._tokens = burst

    def deposit(self) -> None:
        self._tokens = min(self._burst, self._tokens + self._ratio)

    def withdraw(self) -> bool:
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


class SharedAttempts:
    """One budget of attempts for a request and the client's retries of it.

    A client that gets an error retries the same body; counted apart, the proxy's attempts
    and the client's would multiply (3 by 3) or, with ``x-should-retry: false``, the client
    would stop where it would have gone on alone. Counted together (by a digest of the
    request, for ``window`` seconds), the proxy uses what is left of ``limit`` and tells the
    client to stop only once it is spent. Held per process (a client's retry that reaches
    another worker starts that worker's count), at most ``size`` requests (oldest dropped).
    """

    def __init__(
        self, limit: int, window: float = 120.0, size: int = 4096, clock: Callable[[], float] = time.monotonic
    ):
        self.limit = limit
        self._window = window
        self._size = size
        self._clock = clock
        self._used: dict[int, tuple[int, float]] = {}

    def used(self, key: int) -> int:
        """Attempts already spent on this request (0 once its window passed)."""
        entry = self._used.get(key)
        if entry is None:
            return 0
        if self._clock() - entry[1] > self._window:
            del self._used[key]
            return 0
        return entry[0]

    def spend(self, key: int) -> int:
        """Book one attempt; the attempts spent so far."""
        used = self.used(key) + 1
        self._used.pop(key, None)
        if len(self._used) >= self._size:
            del self._used[next(iter(self._used))]
        self._used[key] = (used, self._clock())
        return used

    def left(self, key: int) -> int:
        return max(0, self.limit - self.used(key))
