"""The Redis store's session index and timeline reads, on a real Redis: ties paged past a full
batch, an index write that fails is logged and never fails the commit it follows."""

from __future__ import annotations

import uuid

import pytest

from proxy.session.base import FIELDS, SessionDelta
from proxy.session.redis import RedisStore
from proxy.session.timeline import index_key


@pytest.fixture
async def store(redis_url):
    made = RedisStore.from_url(redis_url)
    yield made
    await made.aclose()


def _seen(at_ms: int) -> SessionDelta:
    delta = SessionDelta()
    delta.incr(FIELDS.STEPS)
    delta.assign(FIELDS.LAST_SEEN_MS, at_ms)
    return delta


async def test_a_page_after_a_cursor_reads_past_more_ties_than_one_batch(store):
    namespace = f"t{uuid.uuid4().hex[:12]}"
    for number in range(5):
        await store.commit(f"lw:{{{namespace}:s{number}}}", _seen(1_000), 60)

    page = await store.sessions(namespace, (1_000, "s3"), 2)

    assert [listed.session_id for listed in page] == ["s2", "s1"]


async def test_a_commit_sent_without_waiting_lists_its_session_before_the_list_is_read(store):
    namespace = f"t{uuid.uuid4().hex[:12]}"
    await store.load(f"lw:{{{namespace}:s1}}")  # the lean connection is open: a commit can go out at once

    started = store.start_commit(f"lw:{{{namespace}:s1}}", _seen(1_000), 60)

    assert started is not None
    assert [listed.session_id for listed in await store.sessions(namespace, None, 10)] == ["s1"]


async def test_an_index_write_that_fails_is_logged_and_the_commit_stands(store, redis_url, log_records):
    namespace = f"t{uuid.uuid4().hex[:12]}"
    key = f"lw:{{{namespace}:s1}}"
    await store._client.set(index_key(namespace), "not a sorted set")  # the index write will fail

    state = await store.commit(key, _seen(1_000), 60)

    assert state.steps == 1
    [error] = [r.fields["error"] for r in log_records if r.msg == "session_index_error"]
    assert error.startswith(f"index write failed at {store.target}: ResponseError (WRONGTYPE")
