"""The proxy's own time is wall time minus waits, booked on the timer of the task's request."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from proxy.observe import timing
from proxy.observe.timing import RequestTiming, begin, current, timed, waiting


class Clock:
    """A perf_counter the test moves: nothing sleeps, nothing depends on the machine's speed."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(timing.time, "perf_counter", fake)
    return fake


def begun(clock: Clock) -> RequestTiming:
    """A request's timer, started now on the test's clock."""
    request = begin()
    request.started = clock.now
    return request


def test_time_spent_waiting_is_not_the_proxys_overhead(clock):
    request = begun(clock)
    clock.now += 1.0  # the proxy's own work
    with waiting():
        clock.now += 5.0  # the upstream's
    clock.now += 0.5

    assert (request.elapsed(), request.waited, request.overhead()) == (6.5, 5.0, 1.5)


def test_waits_are_booked_even_when_the_wait_fails(clock):
    request = begun(clock)

    def upstream_times_out() -> None:
        with waiting():
            clock.now += 2.0
            raise TimeoutError

    with pytest.raises(TimeoutError):
        upstream_times_out()

    assert request.waited == 2.0


def test_overhead_is_never_negative(clock):
    request = RequestTiming(started=clock.now, waited=3.0)  # waits booked past the wall time (clock skew)
    clock.now += 1.0

    assert request.overhead() == 0.0


async def test_a_wait_outside_any_request_is_booked_nowhere():
    async def unrelated() -> RequestTiming | None:
        with waiting():
            pass
        return current()

    assert await asyncio.create_task(unrelated(), context=contextvars.Context()) is None


async def test_each_task_books_on_its_own_requests_timer(clock):
    async def request(wait: float) -> RequestTiming:
        mine = begun(clock)
        with waiting():
            clock.now += wait
        await asyncio.sleep(0)
        return mine

    first, second = await asyncio.gather(request(1.0), request(2.0))

    assert (first.waited, second.waited) == (1.0, 2.0)


class Series:
    """A latency series that keeps what it was told."""

    def __init__(self) -> None:
        self.observed: list[float] = []

    def observe(self, amount: float) -> None:
        self.observed.append(amount)


def test_a_timed_block_observes_how_long_it_took(clock):
    series = Series()
    with timed(series):
        clock.now += 0.25

    assert series.observed == [0.25]


def test_a_timed_block_that_fails_is_observed_too(clock):
    series = Series()

    def store_call_fails() -> None:
        with timed(series):
            clock.now += 1.5
            raise ConnectionError

    with pytest.raises(ConnectionError):
        store_call_fails()

    assert series.observed == [1.5]
