"""The session's books against real stores (in memory and a real Redis): admission and reservation,
the commit, the tenant's day, the ending's claim, and what a store failure costs."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from proxy.books.budgets import session_limits, worst_cost_micros, worst_tokens
from proxy.books.ledger import Ledger
from proxy.books.pricing import Price, PriceTable
from proxy.errors import RateLimited, ServiceUnavailable
from proxy.exchange import Usage
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.request import RequestNotes
from proxy.session.base import Claim, SessionDelta
from proxy.session.memory import MemoryStore
from proxy.session.redis import RedisStore
from proxy.verdict import Pass
from tests.support.agent_request import TASK, agent_request
from tests.support.timed import Stopwatch
from tests.support.waiting import async_wait_for

T0 = 1_800_000_000.0
NOW_MS = int(T0 * 1000)
PRICES = PriceTable({"m": Price(prompt=2.0, completion=8.0)})
STEPS = Policy(max_steps=3)


def books(store, metrics: Metrics | None = None, wait: float = 1.0) -> Ledger:
    """The ledger, its clock two seconds after each request started."""
    return Ledger(store, metrics or Metrics(), PRICES, lambda: T0 + 2, wait)


def new_request(policy: Policy = STEPS, **extra):
    """A request of its own session (and its own tenant: a tenant's day is shared by its sessions)."""
    extra.setdefault("tenant", f"t{uuid.uuid4().hex[:12]}")
    return agent_request(TASK, policy, session=uuid.uuid4().hex, **extra)


def spent(steps: int) -> SessionDelta:
    delta = SessionDelta()
    delta.incr("steps", steps)
    return delta


async def opened(ledger: Ledger, request, notes: RequestNotes | None = None):
    notes = notes or RequestNotes(started=T0)
    state, delta = await ledger.open(request, session_limits(request, PRICES), notes)
    return state, delta, notes


# -- admission and reservation --------------------------------------------------------------


async def test_opening_reserves_the_calls_step_in_the_store(store):
    request = new_request()

    _, delta, notes = await opened(books(store), request)

    assert (await store.load(request.session.key)).counter("reserved_steps") == 1
    assert delta.increments["reserved_steps"] == -1  # given back at the commit
    assert notes.refused is None


@pytest.mark.parametrize(
    ("budgets", "field", "worst"),
    [
        pytest.param({"max_tokens": 100_000}, "reserved_tokens", lambda request: worst_tokens(request), id="tokens"),
        pytest.param(
            {"max_cost_usd": 1.0}, "reserved_cost_micros", lambda request: worst_cost_micros(request, PRICES), id="cost"
        ),
    ],
)
async def test_a_budget_reserves_the_calls_worst_case(store, budgets, field, worst):
    request = new_request(Policy(budgets=budgets))

    await opened(books(store), request)

    assert (await store.load(request.session.key)).counter(field) == worst(request) > 0


async def test_a_call_over_the_step_budget_is_refused_reserves_nothing_and_claims_the_ending(store):
    request = new_request()
    await store.commit(request.session.key, spent(3), 3600)

    _, delta, notes = await opened(books(store), request)

    assert (notes.refused, notes.claim) == ("budget_steps", True)
    assert "reserved_steps" not in delta.increments
    assert (await store.load(request.session.key)).counter("reserved_steps") == 0


async def test_of_two_calls_refused_only_the_first_claims_the_ending(store):
    request = new_request()
    await store.commit(request.session.key, spent(3), 3600)
    ledger = books(store)

    _, _, first = await opened(ledger, request)
    _, _, second = await opened(ledger, request)

    assert (first.claim, second.claim) == (True, False)


async def test_without_limits_the_session_is_loaded_not_reserved(store):
    request = new_request()
    await store.commit(request.session.key, spent(2), 3600)

    state, delta = await books(store).open(request, [], RequestNotes(started=T0))

    assert state.steps == 2
    assert (await store.load(request.session.key)).counter("reserved_steps") == 0
    assert not any(name.startswith("reserved_") for name in delta.increments)


def first_request_of_a_run(policy: Policy = STEPS):
    """A request carrying only the opening, without a session id: a new run, derived."""
    return agent_request(TASK, policy, session=None, tenant=f"t{uuid.uuid4().hex[:12]}")


async def test_a_runs_first_request_starts_its_books_afresh_without_reading_the_store(store):
    request = first_request_of_a_run()
    await store.commit(request.session.key, spent(3), 3600)  # an earlier run of the same task, all steps used
    notes = RequestNotes(started=T0)

    state, delta = await books(store).open(request, session_limits(request, PRICES), notes)

    assert (state.is_new, delta.replace, notes.refused) == (True, True, None)
    assert (await store.load(request.session.key)).counter("reserved_steps") == 0  # nothing reserved there


async def test_a_runs_first_call_that_could_never_fit_is_refused_and_makes_its_own_ending(store):
    request = first_request_of_a_run(Policy(budgets={"max_tokens": 10}))
    notes = RequestNotes(started=T0)

    await books(store).open(request, session_limits(request, PRICES), notes)

    assert (notes.refused, notes.claim) == ("budget_tokens", True)


async def test_opening_counts_a_turn_and_when_it_was_seen(store):
    _, delta, _ = await opened(books(store), new_request())

    assert delta.increments["turns"] == 1
    assert delta.defaults["first_seen"] == str(int(T0))
    assert (delta.assignments["last_seen"], delta.assignments["last_seen_ms"]) == (str(int(T0)), str(NOW_MS))


async def test_another_attempt_reserves_its_step_too(store):
    request = new_request()
    ledger = books(store)
    _, delta, notes = await opened(ledger, request)

    refused = await ledger.reserve(request, delta, notes, session_limits(request, PRICES))

    assert refused is None
    assert (await store.load(request.session.key)).counter("reserved_steps") == 2
    assert delta.increments["reserved_steps"] == -2


async def test_another_attempt_over_the_budget_is_refused_and_claims_the_ending(store):
    request = new_request(Policy(max_steps=2))
    ledger = books(store)
    _, delta, notes = await opened(ledger, request)

    refused = await ledger.reserve(request, delta, notes, session_limits(request, PRICES))

    assert (refused, notes.claim) == ("budget_steps", True)
    assert delta.increments["reserved_steps"] == -1  # only the first attempt's


# -- the commit -----------------------------------------------------------------------------


async def test_the_commit_gives_back_the_reservation_and_books_what_was_used(store):
    request = new_request()
    ledger = books(store)
    _, delta, notes = await opened(ledger, request)
    delta.incr("steps")
    ledger.charge(request, delta, Usage(100, 20), "m")

    await ledger.commit(request, delta, notes)

    state = await store.load(request.session.key)
    booked = ("steps", "reserved_steps", "tokens_in", "tokens_out", "cost_micros", "turns", "active_ms")
    assert {name: state.counter(name) for name in booked} == {
        "steps": 1,
        "reserved_steps": 0,
        "tokens_in": 100,
        "tokens_out": 20,
        "cost_micros": 100 * 2 + 20 * 8,
        "turns": 1,
        "active_ms": 2000,  # from the request's start to its commit
    }
    assert notes.committed


async def test_a_request_that_reached_no_model_leaves_no_session_behind(store):
    request = new_request()
    ledger = books(store)
    _, delta, notes = await opened(ledger, request)

    await ledger.settle(request, delta, notes)

    assert (await store.load(request.session.key)).values == {}


async def test_the_commit_gives_the_endings_claim_back(store):
    request = new_request()
    ledger = books(store)
    await store.commit(request.session.key, spent(3), 3600)
    _, delta, notes = await opened(ledger, request)

    await ledger.commit(request, delta, notes)

    assert (await store.load(request.session.key)).counter("ending_claim") == 0


async def test_a_degraded_request_without_reservations_writes_nothing(store):
    request = new_request()
    notes = RequestNotes(started=T0, degraded=True)

    await books(store).commit(request, spent(1), notes)

    assert (await store.load(request.session.key)).values == {}


async def test_an_unpriced_model_is_counted_as_unpriced_not_guessed(store):
    request = new_request()
    metrics = Metrics()
    delta = SessionDelta()

    books(store, metrics).charge(request, delta, Usage(100, 20), "unknown-model")

    assert delta.increments == {"tokens_in": 100, "tokens_out": 20, "unpriced_calls": 1}
    assert metrics.unpriced_calls.labels(request.tenant, "default")._value.get() == 1


async def test_what_the_judge_spent_is_charged_to_the_session_as_the_judges():
    request = new_request()
    metrics = Metrics()
    delta = SessionDelta()

    books(MemoryStore(), metrics).charge_guard(request, delta, Pass(spent=Usage(10, 2)))

    assert delta.increments == {"tokens_in": 10, "tokens_out": 2, "cost_micros": 10 * 2 + 2 * 8}
    assert metrics.tokens.labels(request.tenant, "default", "judge", "prompt")._value.get() == 10


# -- the tenant's day ------------------------------------------------------------------------


async def admitted(ledger: Ledger, request) -> bool:
    """The tenant's day admits the call (its reservation is then held)."""
    try:
        await ledger.admit_tenant(request, SessionDelta(), RequestNotes(started=T0))
    except RateLimited:
        return False
    return True


async def test_calls_that_do_not_fit_the_tenants_day_are_refused_with_a_retry_after(store):
    ledger = books(store)
    probe = new_request()
    first, second, third = (new_request(tenant=probe.tenant, daily_tokens=2 * worst_tokens(probe)) for _ in range(3))

    assert [await admitted(ledger, first), await admitted(ledger, second)] == [True, True]
    with pytest.raises(RateLimited) as refused:
        await ledger.admit_tenant(third, SessionDelta(), RequestNotes(started=T0))
    assert 0 < int(refused.value.headers["Retry-After"]) <= 86_400


@pytest.mark.parametrize(("used", "fits"), [(40, True), (60, False)], ids=["fits-what-is-left", "does-not-fit"])
async def test_the_tenants_day_books_what_a_call_really_used(store, used, fits):
    ledger = books(store)
    probe = new_request()
    cap = worst_tokens(probe) + 50
    request = new_request(tenant=probe.tenant, daily_tokens=cap)
    _, delta, notes = await opened(ledger, request)
    await ledger.admit_tenant(request, delta, notes)
    delta.incr("steps")
    ledger.charge(request, delta, Usage(used, 0), "m")
    await ledger.commit(request, delta, notes)
    await store.settled()  # the tenant's settlement is sent unordered: no admission waits for it

    assert await admitted(ledger, new_request(tenant=request.tenant, daily_tokens=cap)) is fits


# -- the ending's claim ----------------------------------------------------------------------


async def test_a_request_claims_the_ending_and_a_second_one_does_not(store):
    request = new_request()
    ledger = books(store)
    first, second = RequestNotes(started=T0), RequestNotes(started=T0)

    seen = await ledger.claim_ending(request, first)
    await ledger.claim_ending(request, second)

    assert (first.claim, second.claim) == (True, False)
    assert seen is not None
    assert seen.counter("ending_claim") == NOW_MS + 120_000


async def test_a_request_that_asked_for_the_claim_does_not_ask_again(store):
    request = new_request()
    notes = RequestNotes(started=T0, claim=False)

    assert await books(store).claim_ending(request, notes) is None
    assert notes.claim is False
    assert (await store.load(request.session.key)).values == {}


async def _later(seconds: float, action) -> None:
    await asyncio.sleep(seconds)
    await action


async def test_a_waiting_request_answers_with_the_ending_another_stores(store):
    request = new_request()
    await store.claim_ending(request.session.key, Claim(NOW_MS, 60_000), 3600)
    made = SessionDelta()
    made.assign("termination", "budget_steps")
    made.assign("ending", json.dumps({"the": "ending"}))
    notes = RequestNotes(started=T0, claim=False)

    seen, _ = await asyncio.gather(
        books(store).await_ending(request, notes, await store.load(request.session.key)),
        _later(0.1, store.commit(request.session.key, made, 3600)),
    )

    assert (seen.termination, seen.ending, notes.claim) == ("budget_steps", '{"the": "ending"}', False)


async def test_a_waiting_request_takes_a_claim_given_back(store):
    request = new_request()
    await store.claim_ending(request.session.key, Claim(NOW_MS, 60_000), 3600)
    given_back = SessionDelta()
    given_back.assign("ending_claim", 0)
    notes = RequestNotes(started=T0, claim=False)

    seen, _ = await asyncio.gather(
        books(store).await_ending(request, notes, await store.load(request.session.key)),
        _later(0.1, store.commit(request.session.key, given_back, 3600)),
    )

    assert notes.claim is True
    assert seen.counter("ending_claim") == NOW_MS + 120_000


async def test_a_waiting_request_takes_a_claim_whose_lease_ran_out(store):
    request = new_request()
    await store.claim_ending(request.session.key, Claim(NOW_MS - 10_000, 1_000), 3600)  # its claimer died
    notes = RequestNotes(started=T0, claim=False)

    await books(store).await_ending(request, notes, await store.load(request.session.key))

    assert notes.claim is True


async def test_a_waiting_request_gives_up_after_the_wait(store):
    request = new_request()
    await store.claim_ending(request.session.key, Claim(NOW_MS, 60_000), 3600)
    notes = RequestNotes(started=T0, claim=False)
    with Stopwatch() as watch:
        seen = await books(store, wait=0.2).await_ending(request, notes, await store.load(request.session.key))

    assert (seen.ending, notes.claim) == (None, False)
    assert 0.2 <= watch.elapsed < watch.scaled(5)


# -- when the store fails --------------------------------------------------------------------


async def test_a_store_failure_fails_open_degraded_and_is_counted(down):
    metrics = Metrics()
    request = new_request()

    state, _, notes = await opened(books(down, metrics), request)

    assert (state.is_new, notes.degraded) == (True, True)
    assert metrics.state_errors.labels("load", "open")._value.get() == 1


async def test_a_store_failure_fails_closed_with_a_503_when_the_policy_says_so(down):
    request = new_request(Policy(max_steps=3, state_fail_mode="closed"))

    with pytest.raises(ServiceUnavailable):
        await opened(books(down), request)


async def test_a_request_whose_claim_cannot_be_asked_makes_its_own_ending(down):
    metrics = Metrics()
    notes = RequestNotes(started=T0)

    assert await books(down, metrics).claim_ending(new_request(), notes) is None
    assert notes.claim is True
    assert metrics.state_errors.labels("claim", "open")._value.get() == 1


async def test_a_failed_commit_is_counted_and_marks_the_request_degraded(down):
    metrics = Metrics()
    notes = RequestNotes(started=T0)

    await books(down, metrics).commit(new_request(), spent(1), notes)

    assert notes.degraded is True
    assert metrics.state_errors.labels("commit", "open")._value.get() == 1


# -- a commit after the reply --------------------------------------------------------------


@pytest.fixture
async def freezable(private_redis):
    """A Redis store on a server of the test's own, its connection open (as after an admission)."""
    store = RedisStore.from_url(private_redis.url, timeout=0.3)
    await store.ping()
    await store.load("lw:{warm-up}")
    yield store
    private_redis.thaw()
    await store.aclose()


async def test_an_open_policy_commit_does_not_wait_for_the_stores_answer(freezable, private_redis):
    metrics = Metrics()
    notes = RequestNotes(started=T0)
    private_redis.freeze()

    with Stopwatch() as watch:
        await books(freezable, metrics).commit(new_request(), spent(1), notes)

    assert watch.elapsed < watch.scaled(0.2)  # under the store's 0.3 s deadline
    assert notes.degraded is False


async def test_a_commit_that_fails_after_the_reply_is_counted_and_logged(freezable, private_redis, log_records):
    metrics = Metrics()
    private_redis.freeze()

    request = new_request()
    notes = RequestNotes(started=T0)

    await books(freezable, metrics).commit(request, spent(1), notes)
    failed_on_return = metrics.state_errors.labels("commit", "open")._value.get()
    await async_wait_for(lambda: metrics.state_errors.labels("commit", "open")._value.get())

    assert (failed_on_return, notes.degraded) == (0, False)  # the reply was not held for it

    assert metrics.state_errors.labels("commit", "open")._value.get() == 1
    logged = [r for r in log_records if r.msg == "state_store_error"]
    assert [(r.fields["operation"], r.fields["session"]) for r in logged] == [("commit", request.session.id)]


async def test_a_closed_policy_commit_waits_and_marks_a_failure_degraded(freezable, private_redis):
    metrics = Metrics()
    notes = RequestNotes(started=T0)
    private_redis.freeze()

    await books(freezable, metrics).commit(new_request(Policy(max_steps=3, state_fail_mode="closed")), spent(1), notes)

    assert notes.degraded is True
    assert metrics.state_errors.labels("commit", "closed")._value.get() == 1


def _commits_confirmed(metrics: Metrics) -> float:
    """Commits whose answer the store has given (the commit latency histogram's count)."""
    samples = (s for family in metrics.state_latency.collect() for s in family.samples)
    return sum(s.value for s in samples if s.name.endswith("_count") and s.labels.get("operation") == "commit")


async def test_an_open_policy_commit_is_confirmed_after_it_returns_and_is_booked(freezable):
    metrics = Metrics()
    request = new_request()

    await books(freezable, metrics).commit(request, spent(2), RequestNotes(started=T0))
    confirmed_on_return = _commits_confirmed(metrics)
    state = await freezable.load(request.session.key)

    assert (confirmed_on_return, _commits_confirmed(metrics), state.steps) == (0, 1, 2)
