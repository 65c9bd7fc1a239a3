"""One contract, every store: in memory and on a real Redis server."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as redis

from proxy.exchange import Conversation, Message
from proxy.guards.fingerprint import digest
from proxy.guards.no_progress import remember_results
from proxy.policy.models import NoProgressSettings
from proxy.session.base import FIELDS, Claim, Grant, Limit, SessionDelta, SessionState, TimelineEvent, WindowLimit
from proxy.session.chains import remember_responses
from proxy.session.memory import MemoryStore
from proxy.session.redis import RedisStore
from proxy.session.runs import run_reset
from proxy.session.timeline import TimelinePage
from tests.support.waiting import PATIENCE_SECS


@pytest.fixture(params=["memory", "redis", "cluster"])
async def store(request, redis_url):
    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param == "cluster":
        store = RedisStore.from_url(request.getfixturevalue("redis_cluster").url, cluster=True)
    else:
        store = RedisStore.from_url(redis_url)
    yield store
    await store.aclose()


@pytest.fixture
def key() -> str:
    return f"lw:{{test:{uuid.uuid4().hex}}}"


def _delta(**increments: int) -> SessionDelta:
    delta = SessionDelta()
    for name, by in increments.items():
        delta.incr(name, by)
    return delta


async def test_unknown_session_loads_empty(store, key):
    state = await store.load(key)

    assert state.is_new
    assert state.steps == 0


async def test_commit_returns_and_persists_the_new_state(store, key):
    delta = _delta(steps=2, tokens_in=100)
    delta.assign("termination", "loop")
    delta.default("first_seen", "1000")

    committed = await store.commit(key, delta, 60)
    loaded = await store.load(key)

    assert committed == loaded
    assert (loaded.steps, loaded.counter("tokens_in"), loaded.termination) == (2, 100, "loop")
    assert loaded.values["first_seen"] == "1000"


async def test_increments_accumulate_across_commits(store, key):
    await store.commit(key, _delta(steps=1), 60)
    await store.commit(key, _delta(steps=3), 60)

    assert (await store.load(key)).steps == 4


async def test_defaults_do_not_overwrite_existing_values(store, key):
    first = SessionDelta()
    first.default("first_seen", "1")
    second = SessionDelta()
    second.default("first_seen", "2")

    await store.commit(key, first, 60)
    await store.commit(key, second, 60)

    assert (await store.load(key)).values["first_seen"] == "1"


async def test_assignment_then_increment_in_one_delta(store, key):
    await store.commit(key, _delta(**{"strike:empty": 2}), 60)
    delta = SessionDelta()
    delta.assign("strike:empty", 0)
    delta.incr("strike:empty")

    assert (await store.commit(key, delta, 60)).strikes("empty") == 1


async def test_reset_forgets_the_session(store, key):
    await store.commit(key, _delta(steps=1), 60)

    assert await store.reset(key) is True
    assert (await store.load(key)).is_new
    assert await store.reset(key) is False


async def test_ping_answers(store):
    await store.ping()


async def test_sessions_do_not_share_state(store, key):
    other = key.replace("test:", "other:")
    await store.commit(key, _delta(steps=5), 60)

    assert (await store.load(other)).is_new
    await store.reset(other)


async def test_applied_to_predicts_the_commit(store, key):
    await store.commit(key, _delta(steps=1), 60)
    before = await store.load(key)
    delta = _delta(steps=2)
    delta.assign("termination", "budget_steps")

    assert delta.applied_to(before) == await store.commit(key, delta, 60)


def test_memory_store_expires_sessions():
    now = [0.0]
    store = MemoryStore(clock=lambda: now[0])

    asyncio.run(store.commit("k", _delta(steps=1), 10))
    now[0] = 11.0

    assert asyncio.run(store.load("k")) == SessionState({})


async def test_redis_commit_sets_a_ttl(redis_url, key):
    store = RedisStore.from_url(redis_url)
    await store.commit(key, _delta(steps=1), 60)

    ttl = await store._client.pttl(key)

    assert 0 < ttl <= 60_000
    await store.reset(key)
    await store.aclose()


CONCURRENT = 2000


async def test_redis_loses_no_update_under_2000_concurrent_commits(redis_url, key):
    store = RedisStore.from_url(redis_url, max_connections=64, timeout=PATIENCE_SECS)  # about updates, not speed

    await asyncio.gather(*(store.commit(key, _delta(steps=1, tokens_in=3), 60) for _ in range(CONCURRENT)))
    state = await store.load(key)

    assert (state.steps, state.counter("tokens_in")) == (CONCURRENT, 3 * CONCURRENT)
    assert await _keys_without_ttl(store._client, key) == 0
    await store.reset(key)
    await store.aclose()


async def test_read_then_write_loses_updates_under_the_same_load(redis_url, key):
    """The harness above can fail: the naive read-modify-write loses most updates."""
    pool = redis.BlockingConnectionPool.from_url(redis_url, decode_responses=True, max_connections=64)
    client = redis.Redis(connection_pool=pool)

    async def naive_commit() -> None:
        steps = int(await client.hget(key, "steps") or 0)
        await client.hset(key, "steps", steps + 1)

    await asyncio.gather(*(naive_commit() for _ in range(CONCURRENT)))

    assert int(await client.hget(key, "steps")) < CONCURRENT
    await client.delete(key)
    await client.aclose()


async def _keys_without_ttl(client, key: str) -> int:
    tag = key[key.index("{") : key.index("}") + 1]
    missing = 0
    async for found in client.scan_iter(match=f"*{tag}*"):
        if await client.ttl(found) < 0:
            missing += 1
    return missing


async def test_redis_store_reloads_its_script_after_script_flush(redis_url, key):
    store = RedisStore.from_url(redis_url)
    await store.commit(key, _delta(steps=1), 60)

    await store._client.script_flush()
    state = await store.commit(key, _delta(steps=1), 60)

    assert state.steps == 2
    await store.reset(key)
    await store.aclose()


async def test_replace_starts_the_session_afresh(store, key):
    await store.commit(key, _delta(steps=7, **{"strike:empty": 2}), 60)
    delta = _delta(steps=1)
    delta.replace = True

    state = await store.commit(key, delta, 60)

    assert state == SessionState({"steps": "1"})


async def test_appends_keep_the_last_items(store, key):
    first = SessionDelta()
    for item in ("a", "b", "c"):
        first.append("seq", item, keep=4)
    await store.commit(key, first, 60)
    second = SessionDelta()
    second.append("seq", "d", keep=4)
    second.append("seq", "e", keep=4)

    state = await store.commit(key, second, 60)

    assert state.items("seq") == ["b", "c", "d", "e"]
    assert second.applied_to(SessionState({"seq": "a,b,c"})).items("seq") == ["b", "c", "d", "e"]


async def test_concurrent_appends_lose_nothing_within_the_bound(store, key):
    async def add(item: str) -> None:
        delta = SessionDelta()
        delta.append("seq", item, keep=500)
        await store.commit(key, delta, 60)

    await asyncio.gather(*(add(str(n)) for n in range(200)))

    assert sorted(int(x) for x in (await store.load(key)).items("seq")) == list(range(200))


# -- no-progress on stored chains: the digests of each request's tool results ----------


def _carrying(n: int, result: str) -> SessionDelta:
    """The commit of request ``n`` of a chain: one step, the digest of the result it carried."""
    delta = _delta(steps=1)
    chained = Conversation(messages=(Message("tool", result, call_id=f"c{n}"),), held_upstream=True)
    remember_results(delta, chained, NoProgressSettings())
    return delta


async def test_each_requests_result_digests_are_kept_in_order_with_its_commit(store, key):
    for n in range(20):
        await store.commit(key, _carrying(n, f"pending since 2026-12-01T10:00:{n:02d}Z"), 60)

    state = await store.load(key)

    kept = state.items(FIELDS.RESULT_SEQUENCE)
    assert [item.partition(":")[2] for item in kept] == [digest(f"c{n}")[:8] for n in range(4, 20)]  # the last 16
    assert len({item.partition(":")[0] for item in kept}) == 1  # one result, its timestamp masked
    assert state.counter(FIELDS.STEPS) == 20  # in the same commits as the rest of the books


async def test_a_new_run_forgets_the_result_digests_and_keeps_the_budgets(store, key):
    for n in range(3):
        await store.commit(key, _carrying(n, "pending"), 60)

    state = await store.commit(key, run_reset(await store.load(key), 1_000), 60)

    assert state.items(FIELDS.RESULT_SEQUENCE) == []
    assert state.counter(FIELDS.STEPS) == 3


@pytest.mark.parametrize("server", ["redis", "cluster"])
async def test_redis_keeps_the_result_digests_in_the_session_hash_for_every_replica(request, server, key):
    url = request.getfixturevalue("redis_cluster").url if server == "cluster" else request.getfixturevalue("redis_url")
    writer, reader = (RedisStore.from_url(url, cluster=server == "cluster") for _ in range(2))
    for n in range(3):
        await writer.commit(key, _carrying(n, "pending"), 60)

    loaded = await reader.load(key)  # another replica's store

    stored = await writer._client.hget(key, FIELDS.RESULT_SEQUENCE)
    assert stored.split(",") == loaded.items(FIELDS.RESULT_SEQUENCE)
    assert len(loaded.items(FIELDS.RESULT_SEQUENCE)) == 3
    assert 0 < await writer._client.pttl(key) <= 60_000  # under the session's key and its TTL, no key of its own
    await writer.reset(key)
    await writer.aclose()
    await reader.aclose()


# -- admission: reserve before the call, settle after ----------------------------------


def _tokens(amount: int, limit: int = 1000) -> Limit:
    return Limit("tokens", ("tokens_in", "tokens_out"), "reserved_tokens", amount, limit)


async def test_admit_reserves_within_the_limit(store, key):
    admission = await store.admit(key, [_tokens(400)], 60, replace=False)

    assert admission.refused is None
    assert admission.state.counter("reserved_tokens") == 400


async def test_admit_counts_used_and_reserved(store, key):
    await store.commit(key, _delta(tokens_in=300, tokens_out=200), 60)
    await store.admit(key, [_tokens(300)], 60, replace=False)

    refused = await store.admit(key, [_tokens(300)], 60, replace=False)

    assert refused.refused == "tokens"
    assert refused.state.counter("reserved_tokens") == 300  # nothing reserved by the refusal


async def test_admit_is_all_or_nothing(store, key):
    cost = Limit("cost", ("cost_micros",), "reserved_cost_micros", 50, 10)

    admission = await store.admit(key, [_tokens(100), cost], 60, replace=False)

    assert admission.refused == "cost"
    assert admission.state.counter("reserved_tokens") == 0


async def test_admit_with_replace_starts_afresh(store, key):
    await store.commit(key, _delta(tokens_in=999), 60)

    admission = await store.admit(key, [_tokens(500)], 60, replace=True)

    assert admission.refused is None
    assert admission.state.counter("tokens_in") == 0


async def test_settling_returns_the_reservation_and_adds_the_usage(store, key):
    await store.admit(key, [_tokens(500)], 60, replace=False)
    settle = _delta(reserved_tokens=-500, tokens_in=120, tokens_out=80)

    state = await store.commit(key, settle, 60)

    assert (state.counter("reserved_tokens"), state.counter("tokens_in") + state.counter("tokens_out")) == (0, 200)


async def test_fifty_parallel_reservations_never_overshoot(store, key):
    admissions = await asyncio.gather(
        *(store.admit(key, [_tokens(500, limit=10_000)], 60, replace=False) for _ in range(50))
    )

    admitted = sum(1 for a in admissions if a.refused is None)
    assert admitted == 20
    assert (await store.load(key)).counter("reserved_tokens") == 10_000


HOUR = 3600.0
NOW = 1_800_000_000.0


def _daily(amount: int, limit: int = 1000) -> WindowLimit:
    return WindowLimit("daily_tokens", "t:", "reserved_t", amount, limit)


async def test_window_admits_then_refuses_with_retry_after(store, key):
    bucket = int(NOW // HOUR)
    await store.admit_window(key, [_daily(0)], NOW)
    await store.commit(key, _delta(**{f"t:{bucket - 5}": 600, f"t:{bucket}": 300}), 60)

    admission = await store.admit_window(key, [_daily(200)], NOW)

    assert admission.refused == "daily_tokens"
    expires = (bucket - 5 + 24) * HOUR
    assert admission.retry_after == pytest.approx(expires - NOW, abs=1)


async def test_window_forgets_buckets_older_than_the_window(store, key):
    bucket = int(NOW // HOUR)
    await store.commit(key, _delta(**{f"t:{bucket - 30}": 900}), 60)

    admission = await store.admit_window(key, [_daily(500)], NOW)

    assert admission.refused is None
    assert f"t:{bucket - 30}" not in admission.state.values


async def test_cluster_loses_no_update_under_2000_concurrent_commits(redis_cluster, key):
    store = RedisStore.from_url(redis_cluster.url, cluster=True, max_connections=64, timeout=PATIENCE_SECS)

    await asyncio.gather(*(store.commit(key, _delta(steps=1, tokens_in=3), 60) for _ in range(CONCURRENT)))
    state = await store.load(key)

    assert (state.steps, state.counter("tokens_in")) == (CONCURRENT, 3 * CONCURRENT)
    assert await store._client.ttl(key) > 0
    await store.reset(key)
    await store.aclose()


# -- the ending's claim: one request per session produces the ending ------------------

LEASE = 60_000


def _steps(limit: int = 1) -> Limit:
    return Limit("budget_steps", ("steps",), "reserved_steps", 1, limit)


async def test_a_step_reservation_admits_exactly_the_steps_left(store, key):
    await store.commit(key, _delta(steps=7), 60)

    admissions = await asyncio.gather(*(store.admit(key, [_steps(10)], 60, replace=False) for _ in range(20)))

    assert sum(1 for a in admissions if a.refused is None) == 3
    assert (await store.load(key)).counter("reserved_steps") == 3


async def test_of_parallel_refused_admissions_exactly_one_claims_the_ending(store, key):
    await store.commit(key, _delta(steps=1), 60)

    admissions = await asyncio.gather(
        *(store.admit(key, [_steps()], 60, replace=False, claim=Claim(1000, LEASE)) for _ in range(20))
    )

    assert [a.refused for a in admissions] == ["budget_steps"] * 20
    assert sum(a.claimed for a in admissions) == 1
    assert (await store.load(key)).counter("ending_claim") == 1000 + LEASE


async def test_an_admitted_call_does_not_claim_the_ending(store, key):
    admission = await store.admit(key, [_steps(5)], 60, replace=False, claim=Claim(1000, LEASE))

    assert (admission.refused, admission.claimed) == (None, False)
    assert "ending_claim" not in admission.state.values


async def test_of_parallel_claims_exactly_one_is_granted(store, key):
    claims = await asyncio.gather(*(store.claim_ending(key, Claim(1000, LEASE), 60) for _ in range(20)))

    assert sum(c.claimed for c in claims) == 1


async def test_no_claim_while_an_ending_is_stored(store, key):
    ended = SessionDelta()
    ended.assign("termination", "loop")
    ended.assign("ending", '{"id": "x"}')
    await store.commit(key, ended, 60)

    claim = await store.claim_ending(key, Claim(1000, LEASE), 60)
    refused = await store.admit(key, [_steps(0)], 60, replace=False, claim=Claim(1000, LEASE))

    assert (claim.claimed, refused.claimed) == (False, False)
    assert claim.state.ending == '{"id": "x"}'


async def test_a_claim_is_free_again_when_its_lease_ran_out(store, key):
    first = await store.claim_ending(key, Claim(1000, LEASE), 60)
    during = await store.claim_ending(key, Claim(1000 + LEASE - 1, LEASE), 60)
    after = await store.claim_ending(key, Claim(1000 + LEASE, LEASE), 60)

    assert (first.claimed, during.claimed, after.claimed) == (True, False, True)


async def test_a_claim_given_back_can_be_taken_at_once(store, key):
    await store.claim_ending(key, Claim(1000, LEASE), 60)
    given_back = SessionDelta()
    given_back.assign("ending_claim", 0)
    await store.commit(key, given_back, 60)

    assert (await store.claim_ending(key, Claim(1001, LEASE), 60)).claimed


# -- a refused call leaves nothing behind ----------------------------------------------


async def test_giving_back_every_reservation_of_a_new_session_leaves_no_session(store, key):
    await store.admit(key, [_steps(5), _tokens(300)], 60, replace=False)

    state = await store.commit(key, _delta(reserved_steps=-1, reserved_tokens=-300), 60)

    assert state.is_new
    assert (await store.load(key)).is_new
    assert await store.reset(key) is False


async def test_giving_back_reservations_keeps_a_session_with_history(store, key):
    await store.commit(key, _delta(steps=2), 60)
    await store.admit(key, [_steps(5)], 60, replace=False)

    state = await store.commit(key, _delta(reserved_steps=-1), 60)

    assert (state.steps, state.counter("reserved_steps")) == (2, 0)


async def test_redis_a_retried_admission_that_claimed_answers_the_same(redis_url, key, monkeypatch):
    """A retry after the reply was lost (same operation marker) must not lose the claim it won."""
    store = RedisStore.from_url(redis_url)
    await store.commit(key, _delta(steps=1), 60)
    monkeypatch.setattr("proxy.session.redis._op_key", lambda k: f"{k}:op:fixed")

    first = await store.admit(key, [_steps()], 60, replace=False, claim=Claim(1000, LEASE))
    retried = await store.admit(key, [_steps()], 60, replace=False, claim=Claim(1000, LEASE))
    claim_first = await store.claim_ending(key.replace("test:", "claim:"), Claim(1000, LEASE), 60)
    claim_retried = await store.claim_ending(key.replace("test:", "claim:"), Claim(1000, LEASE), 60)

    assert (first.refused, first.claimed) == (retried.refused, retried.claimed) == ("budget_steps", True)
    assert claim_first.claimed
    assert claim_retried.claimed
    for done in (key, key.replace("test:", "claim:")):
        await store._client.delete(done, f"{done}:op:fixed")
    await store.aclose()


STEPS_GRANT = Grant("steps", "granted_steps", 5, 20)


def _granting(grant: Grant) -> SessionDelta:
    delta = SessionDelta()
    delta.incr(grant.granted, grant.amount)
    return delta


async def test_a_grant_within_its_ceiling_is_added(store, key):
    await store.commit(key, _delta(steps=10), 60)

    outcome = await store.grant(key, [STEPS_GRANT], [], _granting(STEPS_GRANT), 60)

    assert (outcome.refused, outcome.state.counter("granted_steps")) == (None, 5)
    assert (await store.load(key)).counter("granted_steps") == 5


async def test_a_grant_over_its_ceiling_changes_nothing(store, key):
    await store.commit(key, _delta(steps=10, granted_steps=16), 60)

    outcome = await store.grant(key, [STEPS_GRANT], [], _granting(STEPS_GRANT), 60)

    assert (outcome.refused, (await store.load(key)).counter("granted_steps")) == ("steps", 16)


async def test_a_grant_to_no_session_creates_none(store, key):
    outcome = await store.grant(key, [STEPS_GRANT], [], _granting(STEPS_GRANT), 60)

    assert (outcome.state.is_new, (await store.load(key)).is_new) == (True, True)


async def test_a_grant_lifts_the_ending_of_its_budget(store, key):
    ended = _delta(steps=10)
    for name, value in (("termination", "budget_steps"), ("ending", "{}"), ("ending_wire", "chat")):
        ended.assign(name, value)
    await store.commit(key, ended, 60)

    await store.grant(key, [STEPS_GRANT], ["budget_steps"], _granting(STEPS_GRANT), 60)

    state = await store.load(key)
    assert (state.termination, state.ending, state.steps) == (None, None, 10)


async def test_a_grant_raises_the_limit_admission_checks(store, key):
    limit = Limit("budget_steps", ("steps",), "reserved_steps", 1, 9, "granted_steps")
    await store.commit(key, _delta(steps=9), 60)
    refused = await store.admit(key, [limit], 60, replace=False)

    await store.grant(key, [STEPS_GRANT], [], _granting(STEPS_GRANT), 60)
    admitted = await store.admit(key, [limit], 60, replace=False)

    assert (refused.refused, admitted.refused) == ("budget_steps", None)


async def test_parallel_grants_never_pass_the_ceiling(store, key):
    await store.commit(key, _delta(steps=1), 60)

    outcomes = await asyncio.gather(
        *(store.grant(key, [STEPS_GRANT], [], _granting(STEPS_GRANT), 60) for _ in range(10))
    )

    assert sum(1 for outcome in outcomes if outcome.refused is None) == 4
    assert (await store.load(key)).counter("granted_steps") == 20


# -- the timeline and the session index --------------------------------------------------

DROPS: list[tuple[str, str, int]] = []


@pytest.fixture(params=["memory", "redis", "cluster"])
async def bounded(request, redis_url):
    """A store keeping 3 events per session and 2 sessions per namespace; drops noted in DROPS."""
    DROPS.clear()
    bounds = {"timeline_events": 3, "listed_sessions": 2, "on_dropped": lambda *drop: DROPS.append(drop)}
    if request.param == "memory":
        yield MemoryStore(**bounds)
        return
    if request.param == "cluster":
        made = RedisStore.from_url(request.getfixturevalue("redis_cluster").url, cluster=True, **bounds)
    else:
        made = RedisStore.from_url(redis_url, **bounds)
    yield made
    await made.aclose()


def _events(*kinds: str, seen_ms: int = 1_000) -> SessionDelta:
    delta = SessionDelta()
    delta.incr(FIELDS.STEPS)
    delta.assign(FIELDS.LAST_SEEN_MS, seen_ms)
    for kind in kinds:
        delta.event(kind, seen_ms, model="m", attempt=1, shadow=False, latency_ms=1.5, reason=None)
    return delta


def _kinds(page) -> list[tuple[int, str]]:
    return [(number, event.kind) for number, event in page.events]


async def test_committed_events_are_the_timeline_oldest_first(store, key):
    await store.commit(key, _events("step", "intervention"), 60)
    await store.commit(key, _events("step"), 60)

    page = await store.timeline(key, 0, 10)

    assert _kinds(page) == [(0, "step"), (1, "intervention"), (2, "step")]
    assert page.events[0][1] == TimelineEvent(
        "step", 1_000, {"model": "m", "attempt": 1, "shadow": False, "latency_ms": 1.5, "reason": None}
    )
    assert (page.total, page.dropped) == (3, 0)


async def test_the_timeline_pages_from_an_event_number(store, key):
    await store.commit(key, _events("a", "b", "c", "d"), 60)

    assert _kinds(await store.timeline(key, 1, 2)) == [(1, "b"), (2, "c")]
    assert _kinds(await store.timeline(key, 4, 2)) == []


async def test_an_unknown_session_has_an_empty_timeline(store, key):
    assert await store.timeline(key, 0, 10) == TimelinePage()


async def test_the_timeline_keeps_its_newest_events_and_counts_the_dropped(bounded, key):
    await bounded.commit(key, _events("a", "b"), 60)
    await bounded.commit(key, _events("c", "d"), 60)

    page = await bounded.timeline(key, 0, 10)

    assert _kinds(page) == [(1, "b"), (2, "c"), (3, "d")]
    assert (page.total, page.dropped) == (4, 1)
    assert (await bounded.load(key)).counter(FIELDS.TIMELINE_DROPPED) == 1
    assert [drop for drop in DROPS if drop[1] == "timeline"] == [("test", "timeline", 1)]


async def test_a_reset_forgets_the_timeline_and_the_listing(store):
    namespace = f"t{uuid.uuid4().hex[:12]}"
    key = f"lw:{{{namespace}:s1}}"
    await store.commit(key, _events("step"), 60)

    await store.reset(key)
    await store.commit(key, _events("again"), 60)
    await store.reset(key)

    assert await store.timeline(key, 0, 10) == TimelinePage()
    assert await store.sessions(namespace, None, 10) == []


async def _listed(store, namespace: str, count: int = 10, before=None) -> list[tuple[str, int]]:
    return [(listed.session_id, listed.last_seen_ms) for listed in await store.sessions(namespace, before, count)]


async def test_a_namespace_lists_its_sessions_newest_first_with_their_summaries(store):
    namespace, other = f"t{uuid.uuid4().hex[:12]}", f"u{uuid.uuid4().hex[:12]}"
    for session_id, seen_ms in (("old", 1_000), ("new", 3_000), ("mid", 2_000)):
        delta = _events("step", seen_ms=seen_ms)
        delta.assign(FIELDS.POLICY, "strict")
        await store.commit(f"lw:{{{namespace}:{session_id}}}", delta, 60)
    await store.commit(f"lw:{{{other}:theirs}}", _events("step"), 60)

    listed = await store.sessions(namespace, None, 10)

    assert [(item.session_id, item.last_seen_ms) for item in listed] == [("new", 3_000), ("mid", 2_000), ("old", 1_000)]
    assert listed[0].summary == {"steps": "1", "policy": "strict", "timeline_total": "1", "expires_ms": 63_000}
    assert await _listed(store, other) == [("theirs", 1_000)]


async def test_the_list_pages_from_a_cursor_ties_broken_by_id(store):
    namespace = f"t{uuid.uuid4().hex[:12]}"
    for session_id, seen_ms in (("a", 1_000), ("b", 2_000), ("c", 2_000), ("d", 3_000)):
        await store.commit(f"lw:{{{namespace}:{session_id}}}", _events("step", seen_ms=seen_ms), 60)

    first = await _listed(store, namespace, 2)
    rest = await _listed(store, namespace, 2, before=first[-1][::-1])

    assert (first, rest) == ([("d", 3_000), ("c", 2_000)], [("b", 2_000), ("a", 1_000)])


async def test_a_namespace_over_its_cap_stops_listing_the_least_recently_seen(bounded):
    namespace = f"t{uuid.uuid4().hex[:12]}"
    for session_id, seen_ms in (("a", 1_000), ("b", 2_000), ("c", 3_000)):
        await bounded.commit(f"lw:{{{namespace}:{session_id}}}", _events("step", seen_ms=seen_ms), 60)

    assert [session_id for session_id, _ in await _listed(bounded, namespace)] == ["c", "b"]
    assert [(namespace, "sessions", 1)] == DROPS


async def test_a_session_started_afresh_by_its_admission_starts_its_timeline_afresh(bounded, key):
    await bounded.commit(key, _events("a", "b", "c"), 60)
    await bounded.admit(key, [], 60, replace=True)

    await bounded.commit(key, _events("new"), 60)

    page = await bounded.timeline(key, 0, 10)
    assert (_kinds(page), page.total, page.dropped) == ([(0, "new")], 1, 0)
    assert [drop for drop in DROPS if drop[1] == "timeline"] == []  # the old events were no overflow


async def test_namespaces_with_listed_sessions_are_named_their_most_recently_seen_first(store):
    older, newer = f"t{uuid.uuid4().hex[:12]}", f"u{uuid.uuid4().hex[:12]}"
    await store.commit(f"lw:{{{newer}:s1}}", _events("step", seen_ms=2_000), 60)
    await store.commit(f"lw:{{{older}:s1}}", _events("step", seen_ms=1_000), 60)

    named = await store.namespaces(10_000)

    assert [namespace for namespace in named if namespace in (older, newer)] == [newer, older]


async def test_a_namespace_is_named_once_however_many_sessions_it_commits(store):
    namespace = f"t{uuid.uuid4().hex[:12]}"
    for session_id in ("a", "b", "c"):
        await store.commit(f"lw:{{{namespace}:{session_id}}}", _events("step"), 60)

    assert (await store.namespaces(10_000)).count(namespace) == 1


async def test_at_most_the_count_asked_for_is_named(store):
    for _ in range(3):
        await store.commit(f"lw:{{t{uuid.uuid4().hex[:12]}:s}}", _events("step"), 60)

    assert len(await store.namespaces(2)) == 2


async def test_a_record_sets_its_fields_and_keeps_the_others(store, key):
    await store.record(key, {"session": "s-1", "body": "{}"}, 60)
    await store.record(key, {"session": "s-2"}, 60)

    assert (await store.load(key)).values == {"session": "s-2", "body": "{}"}


def test_a_record_expires_with_its_ttl():
    now = [0.0]
    store = MemoryStore(clock=lambda: now[0])

    asyncio.run(store.record("lw:chain:{t:r}", {"session": "s-1"}, 10))
    now[0] = 11.0

    assert asyncio.run(store.load("lw:chain:{t:r}")) == SessionState({})


async def test_a_record_on_redis_has_its_ttl(redis_url, key):
    store = RedisStore.from_url(redis_url)
    await store.record(key, {"session": "s-1"}, 60)

    assert 0 < await store._client.pttl(key) <= 60_000
    await store.reset(key)
    await store.aclose()


async def test_a_responses_chain_pointer_is_never_listed_as_a_session(store):
    namespace = f"t-{uuid.uuid4().hex}"
    await remember_responses(store, namespace, [("resp_a", None, None)], "s-1", 60)

    assert await store.sessions(namespace, None, 10) == []
