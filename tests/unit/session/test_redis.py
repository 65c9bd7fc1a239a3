"""The Redis store beyond the store contract: a commit sent without waiting for its answer
(``RedisStore.start_commit``), on a real Redis: what the reply no longer waits for must still be
seen, applied once, and drained; and when a command runs again, and when it does not."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
import redis.asyncio as redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from proxy.session.base import SessionDelta, StoreUnavailable
from proxy.session.redis import RedisStore, _once_more
from tests.support.timed import Stopwatch


@pytest.fixture
async def store(redis_url):
    store = RedisStore.from_url(redis_url)
    await store.load("lw:{test:warm-up}")  # opens the store's connection, as a request's admission does
    yield store
    await store.aclose()


@pytest.fixture
def key() -> str:
    return f"lw:{{test:{uuid.uuid4().hex}}}"


def _steps(steps: int) -> SessionDelta:
    delta = SessionDelta()
    delta.incr("steps", steps)
    return delta


async def test_a_started_commit_is_seen_by_the_next_load_before_its_answer_is_awaited(store, key):
    started = store.start_commit(key, _steps(2), 60)

    loaded = await store.load(key)

    assert started is not None
    assert loaded.steps == 2


async def test_a_started_commit_is_seen_by_the_next_admission(store, key):
    store.start_commit(key, _steps(3), 60)

    admission = await store.admit(key, [], 60, replace=False)

    assert admission.state.steps == 3


async def test_commits_started_back_to_back_all_land(store, key):
    for _ in range(50):
        store.start_commit(key, _steps(1), 60)

    assert (await store.load(key)).steps == 50


async def test_a_commit_is_not_started_before_the_stores_connection_is_open(redis_url, key):
    store = RedisStore.from_url(redis_url)
    try:
        assert store.start_commit(key, _steps(1), 60) is None
    finally:
        await store.aclose()


async def test_a_commit_is_not_started_on_a_store_served_by_redis_py(redis_url, key):
    store = RedisStore(redis.Redis.from_url(redis_url, decode_responses=True))
    try:
        await store.load(key)

        assert store.start_commit(key, _steps(1), 60) is None
    finally:
        await store.aclose()


async def test_a_started_commit_the_server_did_not_know_the_script_of_is_sent_again_and_lands(store, key, redis_url):
    await _flush_scripts(redis_url)

    started = store.start_commit(key, _steps(1), 60)
    assert started is not None
    await started

    assert (await store.load(key)).steps == 1


BUSY_300_MS = """
local t = redis.call('TIME'); local start = t[1] * 1000000 + t[2]
while true do local n = redis.call('TIME'); if n[1] * 1000000 + n[2] - start > 300000 then return 1 end end
"""


async def test_a_started_commit_whose_connection_breaks_is_sent_again_and_lands_once(private_redis, key):
    store = RedisStore.from_url(private_redis.url)
    await store.load(key)
    try:
        async with redis.Redis.from_url(private_redis.url) as admin:
            busy = asyncio.ensure_future(admin.eval(BUSY_300_MS, 0))
            await asyncio.sleep(0.1)  # the server is inside the busy script: commands wait in its buffers
            started = store.start_commit(key, _steps(1), 60)
            assert started is not None
            # What a network failure does: the commit left, its answer cannot come back.
            store._lean._protocol.transport.abort()  # type: ignore[union-attr]
            await busy
            await started  # resent on a new connection, under the same marker

        assert (await store.load(key)).steps == 1
    finally:
        await store.aclose()


async def test_a_started_commit_fails_with_store_unavailable_when_redis_does_not_answer(private_redis, key):
    store = RedisStore.from_url(private_redis.url, timeout=0.3)
    await store.load(key)
    private_redis.freeze()
    try:
        started = store.start_commit(key, _steps(1), 60)
        assert started is not None

        with pytest.raises(StoreUnavailable):
            await started
    finally:
        private_redis.thaw()
        await store.aclose()


async def test_a_call_waiting_on_a_commit_that_fails_fails_with_it_after_one_timeout(private_redis, key):
    store = RedisStore.from_url(private_redis.url, timeout=0.3)
    await store.load(key)
    private_redis.freeze()
    try:
        store.start_commit(key, _steps(1), 60)
        with Stopwatch() as watch, pytest.raises(StoreUnavailable, match="last commit failed"):
            await store.load(key)

        assert watch.elapsed < 0.3 + watch.scaled(0.25)  # the commit's timeout, not that and the load's
    finally:
        private_redis.thaw()
        await store.aclose()


async def _flush_scripts(redis_url: str) -> None:
    """The server forgets the store's scripts: a commit sent now has to be sent again."""
    async with redis.Redis.from_url(redis_url) as admin:
        await admin.script_flush()


async def test_closing_the_store_waits_for_the_commits_it_started(store, key, redis_url):
    await _flush_scripts(redis_url)
    store.start_commit(key, _steps(4), 60)

    await store.aclose()

    reader = RedisStore.from_url(redis_url)
    try:
        assert (await reader.load(key)).steps == 4
    finally:
        await reader.aclose()


async def test_an_unordered_commit_is_still_seen_by_a_later_call_on_the_same_connection(store, key):
    store.start_commit(key, _steps(2), 60, ordered=False)

    assert (await store.load(key)).steps == 2


async def test_closing_the_store_waits_for_unordered_commits_too(store, key, redis_url):
    await _flush_scripts(redis_url)
    store.start_commit(key, _steps(5), 60, ordered=False)

    await store.aclose()

    reader = RedisStore.from_url(redis_url)
    try:
        assert (await reader.load(key)).steps == 5
    finally:
        await reader.aclose()


# -- when a command runs again, and when it does not (a table of cases) -----------------------


def scripted(*outcomes: Exception | str):
    """A command that raises or returns each outcome in turn; counts its calls."""
    calls = []

    async def command():
        outcome = outcomes[len(calls)]
        calls.append(outcome)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return command, calls


@pytest.fixture(params=["once_more", "store"])
def run_command(request):
    """How a command is run: by ``once_more`` itself, or by the store (which tries once itself,
    then hands the rest to ``once_more``): the same tries either way."""
    if request.param == "once_more":
        return _once_more
    return RedisStore(redis.Redis.from_url("redis://127.0.0.1:9", decode_responses=True))._run


@pytest.mark.parametrize(
    ("outcomes", "result", "calls"),
    [
        (["ok"], "ok", 1),
        ([RedisConnectionError(), "ok"], "ok", 2),  # a pooled connection to a restarted server
        ([NoScriptError(), "ok"], "ok", 2),  # SCRIPT FLUSH between Script's own reload and its call
        ([NoScriptError(), NoScriptError(), NoScriptError(), "ok"], "ok", 4),
        ([RedisConnectionError(), NoScriptError(), "ok"], "ok", 3),  # restarted: reconnect, then reload
    ],
    ids=["first-try", "reconnect", "flushed-once", "flushed-thrice", "restarted"],
)
async def test_commands_run_again_after_a_reconnect_or_a_flush(outcomes, result, calls, run_command):
    command, made = scripted(*outcomes)

    assert await run_command(command) == result
    assert len(made) == calls


@pytest.mark.parametrize(
    ("outcomes", "error", "calls"),
    [
        ([RedisTimeoutError()], RedisTimeoutError, 1),  # a frozen server costs one timeout, not several
        ([RedisConnectionError(), RedisConnectionError()], RedisConnectionError, 2),
        ([NoScriptError()] * 4, NoScriptError, 4),
    ],
    ids=["timeout", "still-down", "flushed-forever"],
)
async def test_commands_give_up_on_timeouts_and_lasting_faults(outcomes, error, calls, run_command):
    command, made = scripted(*outcomes)

    with pytest.raises(error):
        await run_command(command)
    assert len(made) == calls


def _operations(key: str):
    """Every store call a request or the sessions API makes, by name."""
    from proxy.session.base import Claim, Grant

    return {
        "load": lambda store: store.load(key),
        "commit": lambda store: store.commit(key, _steps(1), 60),
        "admit": lambda store: store.admit(key, [], 60, replace=False),
        "claim": lambda store: store.claim_ending(key, Claim(0, 1000), 60),
        "grant": lambda store: store.grant(key, [Grant("steps", "granted_steps", 1, 10)], [], SessionDelta(), 60),
        "reset": lambda store: store.reset(key),
        "timeline": lambda store: store.timeline(key, 0, 10),
        "list": lambda store: store.sessions("test", None, 10),
        "ping": lambda store: store.ping(),
    }


@pytest.mark.parametrize("cluster", [False, True], ids=["redis", "cluster"])
@pytest.mark.parametrize("operation", list(_operations("k")))
async def test_every_failed_call_names_the_stores_address_and_never_its_password(operation, cluster, key):
    from tests.support.processes import free_port

    port = free_port()  # nothing listens there
    store = RedisStore.from_url(f"redis://:hunter2-secret@127.0.0.1:{port}/0", timeout=0.3, cluster=cluster)
    try:
        with pytest.raises(StoreUnavailable) as failed:
            await _operations(key)[operation](store)
    finally:
        with contextlib.suppress(Exception):
            await store.aclose()

    kind = "Redis Cluster" if cluster else "Redis"
    where = f"127.0.0.1:{port}" if cluster else f"127.0.0.1:{port}/0"
    assert str(failed.value).startswith(f"{operation} failed at {kind} at {where}: ")
    assert "hunter2" not in str(failed.value)
