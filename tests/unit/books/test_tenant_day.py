"""The tenant's day for pass-through calls, against real stores (in memory and a real Redis): a
call is admitted until the day is spent, books what its reply reports, and a store failure
follows the policy's fail mode; a tenant without daily caps costs no round trip."""

from __future__ import annotations

import uuid

import pytest

from proxy.books.pricing import Price, PriceTable
from proxy.books.tenant_day import PASSTHROUGH_KIND, TenantDay
from proxy.errors import RateLimited, ServiceUnavailable
from proxy.exchange import Usage
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy

T0 = 1_800_000_000.0
PRICES = PriceTable({"m": Price(prompt=2.0, completion=8.0)})
OPEN = Policy(state_fail_mode="open")
CLOSED = Policy(state_fail_mode="closed")


def tenant() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


async def test_a_call_is_admitted_until_what_replies_booked_spends_the_day(store):
    day, who = TenantDay(store, Metrics(), PRICES), tenant()
    limits = await day.admit(who, 100, None, OPEN, T0)
    await day.book(who, OPEN, limits, Usage(prompt_tokens=60, completion_tokens=40), "m", T0)

    with pytest.raises(RateLimited) as refused:
        await day.admit(who, 100, None, OPEN, T0 + 1)

    assert refused.value.status == 429
    assert refused.value.headers["x-should-retry"] == "false"
    assert int(refused.value.headers["Retry-After"]) > 0


async def test_a_call_that_books_nothing_gives_its_reservation_back(store):
    day, who = TenantDay(store, Metrics(), PRICES), tenant()

    for _ in range(3):  # a cap of 1: each call reserves 1 and books no usage
        limits = await day.admit(who, 1, None, OPEN, T0)
        await day.book(who, OPEN, limits, Usage(), None, T0)

    assert await day.admit(who, 1, None, OPEN, T0) != []


async def test_the_cost_cap_refuses_once_the_priced_usage_spends_it(store):
    day, who = TenantDay(store, Metrics(), PRICES), tenant()
    limits = await day.admit(who, None, 0.001, OPEN, T0)
    await day.book(who, OPEN, limits, Usage(prompt_tokens=500), "m", T0)  # 500 tokens at $2 per million: $0.001

    with pytest.raises(RateLimited):
        await day.admit(who, None, 0.001, OPEN, T0 + 1)


async def test_a_refusal_is_counted_as_the_tenants_ending(store):
    metrics, who = Metrics(), tenant()
    day = TenantDay(store, metrics, PRICES)
    await day.book(who, OPEN, await day.admit(who, 10, None, OPEN, T0), Usage(prompt_tokens=10), "m", T0)

    with pytest.raises(RateLimited):
        await day.admit(who, 10, None, OPEN, T0)

    assert metrics.terminations.labels(who, OPEN.name, "tenant_daily_tokens")._value.get() == 1


async def test_booked_usage_is_counted_as_pass_through_tokens_and_cost(store):
    metrics, who = Metrics(), tenant()
    day = TenantDay(store, metrics, PRICES)

    await day.book(who, OPEN, await day.admit(who, 1000, None, OPEN, T0), Usage(3, 4), "m", T0)

    assert metrics.tokens.labels(who, OPEN.name, PASSTHROUGH_KIND, "prompt")._value.get() == 3
    assert metrics.tokens.labels(who, OPEN.name, PASSTHROUGH_KIND, "completion")._value.get() == 4
    assert metrics.cost.labels(who, OPEN.name)._value.get() == pytest.approx((3 * 2 + 4 * 8) / 1e6)


async def test_usage_of_an_unpriced_model_is_counted_as_unpriced(store):
    metrics, who = Metrics(), tenant()
    day = TenantDay(store, metrics, PRICES)

    await day.book(who, OPEN, await day.admit(who, 1000, None, OPEN, T0), Usage(3, 4), "unknown", T0)

    assert metrics.unpriced_calls.labels(who, OPEN.name)._value.get() == 1


async def test_a_tenant_without_daily_caps_never_asks_the_store(down):
    metrics = Metrics()
    day = TenantDay(down, metrics, PRICES)

    limits = await day.admit("t", None, None, CLOSED, T0)
    await day.book("t", CLOSED, limits, Usage(3, 4), "m", T0)

    assert limits == []
    assert metrics.state_errors.labels("admit_tenant", "closed")._value.get() == 0


async def test_a_store_failure_forwards_unbooked_under_fail_open(down):
    metrics = Metrics()

    assert await TenantDay(down, metrics, PRICES).admit("t", 10, None, OPEN, T0) == []
    assert metrics.state_errors.labels("admit_tenant", "open")._value.get() == 1


async def test_a_store_failure_answers_503_under_fail_closed(down):
    with pytest.raises(ServiceUnavailable):
        await TenantDay(down, Metrics(), PRICES).admit("t", 10, None, CLOSED, T0)


async def test_a_booking_the_store_fails_is_counted_not_raised(store, down):
    metrics, who = Metrics(), tenant()
    limits = await TenantDay(store, Metrics(), PRICES).admit(who, 10, None, OPEN, T0)

    await TenantDay(down, metrics, PRICES).book(who, OPEN, limits, Usage(1, 1), "m", T0)

    assert metrics.state_errors.labels("commit", "open")._value.get() == 1
