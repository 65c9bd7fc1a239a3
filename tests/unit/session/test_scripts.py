"""The Lua scripts, run on a real Redis, follow the same rules as the in-memory store: the case
tables of test_limits.py and test_base.py, played against the scripts; and a retried script
changes nothing twice."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import redis

from proxy.session.base import FIELDS, Claim, Grant, Limit, SessionDelta, SessionState, WindowLimit
from proxy.session.limits import ENDING_FIELDS
from proxy.session.redis_lists import packed_delta
from proxy.session.scripts import ADMIT, ADMIT_WINDOW, CLAIM, COMMIT, GRANT, LOAD
from proxy.session.timeline import timeline_key
from tests.unit.session.test_base import APPLIED
from tests.unit.session.test_limits import ADMIT_CASES, CLAIM_CASES, DAY, GRANT_CASES, NOW, STEPS_GRANT, WINDOW_CASES
from tests.unit.session.test_limits import CLAIM as ASKED

TTL_MS = 60_000
EPOCH = "e1"


class Session:
    """One session's hash on the test Redis, with the keys a script is called with."""

    def __init__(self, client: redis.Redis) -> None:
        tag = uuid.uuid4().hex
        self.client = client
        self.key = f"lw:{{test:{tag}}}"
        self.sentinel = f"lw:{{test:{tag}}}:sentinel"
        self.timeline = timeline_key(self.key)

    def store(self, values: dict[str, str]) -> None:
        if values:
            self.client.hset(self.key, mapping=values)

    def values(self) -> dict[str, str]:
        return self.client.hgetall(self.key)

    def run(self, script: str, *args: Any, marker: str | None = None) -> list[Any]:
        """The script on this session, as the store calls it: data, a marker, (for a commit) the
        timeline, then the sentinel."""
        timeline = [self.timeline] if script is COMMIT else []
        keys = [self.key, marker or f"{self.key}:op:{uuid.uuid4().hex}", *timeline, self.sentinel]
        return self.client.eval(script, len(keys), *keys, *args, EPOCH)


@pytest.fixture
def session(redis_url: str) -> Iterator[Session]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    made = Session(client)
    yield made
    client.delete(made.key, made.sentinel, made.timeline)
    client.close()


def admission(limits: list[Limit], claim: Claim | None = None) -> bytes:
    claimed = (claim.now_ms, claim.lease_ms) if claim else (0, 0)
    rows = [(limit.name, limit.reserved, limit.amount, limit.limit, limit.used, limit.granted) for limit in limits]
    return msgspec.json.encode((TTL_MS, 0, *claimed, FIELDS.ENDING, FIELDS.ENDING_CLAIM, rows))


@pytest.mark.parametrize(("values", "limits", "refused", "after"), ADMIT_CASES)
def test_admit_reserves_or_refuses_as_the_in_memory_rules_do(session, values, limits, refused, after):
    session.store(values)

    _, name, _, _ = session.run(ADMIT, admission(limits))

    assert (name or None, session.values()) == (refused, after)


@pytest.mark.parametrize(("values", "granted", "lease"), CLAIM_CASES)
def test_claim_grants_the_ending_as_the_in_memory_rules_do(session, values, granted, lease):
    session.store(values)

    _, claimed, _ = session.run(CLAIM, TTL_MS, ASKED.now_ms, ASKED.lease_ms, FIELDS.ENDING, FIELDS.ENDING_CLAIM)

    assert (bool(claimed), session.values()[FIELDS.ENDING_CLAIM]) == (granted, lease)


def window_args(limits: list[WindowLimit]) -> list[Any]:
    args: list[Any] = [NOW, len(limits)]
    for limit in limits:
        args += [limit.name, limit.prefix, limit.reserved, limit.amount, limit.limit]
        args += [limit.window_secs, limit.bucket_secs]
    return args


@pytest.mark.parametrize(("values", "refused", "retry_after", "after"), WINDOW_CASES)
def test_admit_window_drops_reserves_or_refuses_as_the_in_memory_rules_do(session, values, refused, retry_after, after):
    session.store(values)

    _, name, wait, _ = session.run(ADMIT_WINDOW, *window_args([DAY]))

    assert (name or None, float(wait) if wait else None, session.values()) == (refused, retry_after, after)


# A counter that is no number is the one place the rules part: HINCRBY refuses it, where the
# in-memory store reads it as 0. The proxy never writes one.
COMMITTED = [case for case in APPLIED if case.id != "an-increment-of-garbage"]


@pytest.mark.parametrize(("stored", "changes", "after"), COMMITTED)
def test_commit_leaves_the_state_the_delta_says_it_will(session, stored, changes, after):
    session.store(stored)

    _, flat, _, _ = session.run(COMMIT, packed_delta(changes, 60))

    assert session.values() == after == changes.applied_to(SessionState(stored)).values
    assert dict(zip(flat[::2], flat[1::2], strict=True)) == after


@pytest.mark.parametrize(("stored", "changes", "after"), COMMITTED)
def test_a_commit_asked_for_no_state_leaves_the_same_state_and_answers_without_it(session, stored, changes, after):
    session.store(stored)

    _, flat, _, _ = session.run(COMMIT, packed_delta(changes, 60, state=False))

    assert (session.values(), flat) == (after, [])


def test_an_increment_of_a_counter_that_is_no_integer_fails_the_commit_as_hincrby_does(session):
    session.store({FIELDS.STEPS: "x"})
    delta = SessionDelta()
    delta.incr(FIELDS.STEPS)

    with pytest.raises(redis.ResponseError, match="not an integer"):
        session.run(COMMIT, packed_delta(delta, 60))


def test_a_commit_that_leaves_only_reservations_given_back_deletes_the_session(session):
    session.store({FIELDS.RESERVED_STEPS: "1"})
    delta = SessionDelta()
    delta.incr(FIELDS.RESERVED_STEPS, -1)

    session.run(COMMIT, packed_delta(delta, 60))

    assert not session.client.exists(session.key)


def test_a_commit_run_again_under_its_marker_changes_nothing_twice(session):
    delta = SessionDelta()
    delta.incr(FIELDS.STEPS)

    marker = f"{session.key}:op:retried"
    session.run(COMMIT, packed_delta(delta, 60), marker=marker)
    session.run(COMMIT, packed_delta(delta, 60), marker=marker)

    assert session.values() == {FIELDS.STEPS: "1"}


def checks(grants: list[Grant], lift: list[str]) -> bytes:
    return msgspec.json.encode(([(g.budget, g.granted, g.amount, g.ceiling) for g in grants], lift, ENDING_FIELDS))


@pytest.mark.parametrize(("values", "grants", "lift", "refused", "after"), GRANT_CASES)
def test_grant_checks_and_lifts_as_the_in_memory_rules_do(session, values, grants, lift, refused, after):
    session.store(values)

    answer = session.run(GRANT, packed_delta(SessionDelta(), 60), checks(grants, lift))

    assert (answer[2] if len(answer) == 3 else None, session.values()) == (refused, after)


def test_grant_to_no_session_creates_nothing(session):
    delta = SessionDelta()
    delta.incr(STEPS_GRANT.granted, STEPS_GRANT.amount)

    answer = session.run(GRANT, packed_delta(delta, 60), checks([STEPS_GRANT], []))

    assert (answer[1:], session.values()) == ([[], ""], {})


def test_a_grant_run_again_is_applied_once(session):
    session.store({FIELDS.STEPS: "3"})
    delta = SessionDelta()
    delta.incr(STEPS_GRANT.granted, STEPS_GRANT.amount)
    marker = f"{session.key}:op:retried"

    for _ in range(2):
        session.run(GRANT, packed_delta(delta, 60), checks([STEPS_GRANT], []), marker=marker)

    assert session.values() == {FIELDS.STEPS: "3", STEPS_GRANT.granted: "5"}


def _events(*kinds: str) -> SessionDelta:
    delta = SessionDelta()
    for at_ms, kind in enumerate(kinds):
        delta.event(kind, at_ms, attempt=1)
    return delta


def test_a_commit_pushes_its_events_onto_the_timeline_and_counts_them(session):
    _, _, dropped, _ = session.run(COMMIT, packed_delta(_events("step", "intervention"), 60))

    assert session.client.lrange(session.timeline, 0, -1) == [
        '["step",0,{"attempt":1}]',
        '["intervention",1,{"attempt":1}]',
    ]
    assert (session.values()[FIELDS.TIMELINE_TOTAL], dropped) == ("2", 0)
    assert 0 < session.client.pttl(session.timeline) <= TTL_MS


def test_a_commit_over_the_timeline_cap_drops_the_oldest_events_and_counts_them(session):
    session.run(COMMIT, packed_delta(_events("a", "b"), 60, timeline_events=3))

    _, _, dropped, _ = session.run(COMMIT, packed_delta(_events("c", "d"), 60, timeline_events=3))

    kinds = [msgspec.json.decode(raw)[0] for raw in session.client.lrange(session.timeline, 0, -1)]
    assert (kinds, dropped) == (["b", "c", "d"], 1)
    assert (session.values()[FIELDS.TIMELINE_TOTAL], session.values()[FIELDS.TIMELINE_DROPPED]) == ("4", "1")


def test_a_commit_that_replaces_the_session_starts_its_timeline_afresh(session):
    session.run(COMMIT, packed_delta(_events("old"), 60))
    fresh = _events("new")
    fresh.replace = True

    session.run(COMMIT, packed_delta(fresh, 60))

    assert session.client.lrange(session.timeline, 0, -1) == ['["new",0,{"attempt":1}]']


def test_a_refused_admission_run_again_is_judged_afresh(session):
    limit = Limit("max_steps", (FIELDS.STEPS,), FIELDS.RESERVED_STEPS, 1, 1)
    session.store({FIELDS.STEPS: "1"})
    marker = f"{session.key}:op:retried"

    _, first, _, _ = session.run(ADMIT, admission([limit]), marker=marker)
    session.client.hset(session.key, FIELDS.STEPS, "0")  # room made meanwhile
    _, second, _, _ = session.run(ADMIT, admission([limit]), marker=marker)

    assert (first, second) == ("max_steps", "")


def test_load_returns_the_sentinels_epoch_creating_it_once(session):
    session.store({FIELDS.STEPS: "2"})

    epoch, flat = session.client.eval(LOAD, 2, session.key, session.sentinel, "fresh")
    again, _ = session.client.eval(LOAD, 2, session.key, session.sentinel, "another")

    assert (epoch, again, flat) == ("fresh", "fresh", [FIELDS.STEPS, "2"])


def test_a_commit_with_the_index_keys_lists_the_session_in_the_same_step(session):
    index, summaries = f"lw:{{{session.key}}}:sessions", f"lw:{{{session.key}}}:sessions:summaries"
    keys = [session.key, f"{session.key}:op:1", session.timeline, index, summaries, session.sentinel]
    delta = _events("step")
    delta.assign(FIELDS.LAST_SEEN_MS, 5_000)
    delta.assign(FIELDS.POLICY, "strict")

    packed = packed_delta(delta, 60, listing=("s1", 10))
    *_, unlisted = session.client.eval(COMMIT, len(keys), *keys, packed, EPOCH)

    assert session.client.zrange(index, 0, -1, withscores=True) == [("s1", 5_000.0)]
    assert msgspec.json.decode(session.client.hget(summaries, "s1")) == {
        "policy": "strict",
        "timeline_total": "1",
        "expires_ms": 65_000,
    }
    assert unlisted == 0
    session.client.delete(index, summaries)
