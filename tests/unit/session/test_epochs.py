"""A Redis that lost its data is noticed: the sentinel each script checks, on real servers.

Destructive faults (restart, flush) run on a private redis-server; the Cluster cases delete
one slot's sentinel on the shared local cluster, which only touches that slot's bookkeeping.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest
import redis.asyncio as redis

from proxy.session.base import SessionDelta
from proxy.session.redis import RedisStore
from tests.support.redis import PrivateRedis


def _key() -> str:
    return f"lw:{{test:{uuid.uuid4().hex}}}"


def _steps(n: int) -> SessionDelta:
    delta = SessionDelta()
    delta.incr("steps", n)
    return delta


@pytest.fixture
async def store(private_redis):
    store = RedisStore.from_url(private_redis.url, clock=lambda: 1000.0)
    yield store
    await store.aclose()


async def test_a_first_look_at_an_empty_server_is_not_a_loss(store):
    key = _key()

    await store.load(key)
    await store.commit(key, _steps(1), 60)

    assert store.losses == 0
    assert store.lost_at(key) is None


async def test_a_restart_empty_is_found_by_the_next_load_and_counted_once(store, private_redis):
    key = _key()
    await store.commit(key, _steps(3), 60)

    private_redis.restart()
    state = await store.load(key)
    await store.load(key)
    await store.load(_key())

    assert state.is_new
    assert store.losses == 1
    assert store.lost_at(key) == 1000.0


@pytest.mark.parametrize("operation", ["commit", "admit", "admit_window"])
async def test_a_flush_is_found_by_every_kind_of_script(store, private_redis, operation):
    key = _key()
    await store.load(key)
    admin = redis.Redis.from_url(private_redis.url)
    await admin.flushall()
    await admin.aclose()

    if operation == "commit":
        await store.commit(key, _steps(1), 60)
    elif operation == "admit":
        await store.admit(key, [], 60, replace=False)
    else:
        await store.admit_window(key, [], 0.0)

    assert store.losses == 1


async def test_every_replica_finds_the_loss(private_redis):
    replicas = [RedisStore.from_url(private_redis.url) for _ in range(3)]
    key = _key()
    for replica in replicas:
        await replica.load(key)

    private_redis.restart()
    for replica in replicas:
        await replica.load(key)

    assert [replica.losses for replica in replicas] == [1, 1, 1]
    for replica in replicas:
        await replica.aclose()


async def test_a_restart_that_keeps_its_data_is_not_a_loss(tmp_path):
    durable = PrivateRedis(extra_args=["--appendonly", "yes", "--appendfsync", "always", "--dir", str(tmp_path)])
    durable.start()
    store = RedisStore.from_url(durable.url)
    key = _key()
    try:
        await store.commit(key, _steps(2), 60)

        durable.restart()
        state = await store.load(key)

        assert state.steps == 2
        assert store.losses == 0
    finally:
        await store.aclose()
        durable.stop()


async def test_a_cluster_slot_that_lost_its_sentinel_is_a_loss_for_that_slot_only(redis_cluster):
    store = RedisStore.from_url(redis_cluster.url, cluster=True)
    lost, kept = _key(), _key()
    await store.load(lost)
    await store.load(kept)
    sentinel = store._watch.sentinel(lost)
    slots = {
        subprocess.run(
            ["redis-cli", "-p", str(redis_cluster.nodes[0].port), "cluster", "keyslot", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for name in (lost, sentinel)
    }
    await store._client.delete(sentinel)

    await store.load(lost)
    await store.load(kept)

    assert len(slots) == 1  # the sentinel lives in its data's slot, so scripts stay on one node
    assert store.losses == 1
    assert store.lost_at(lost) is not None
    assert store.lost_at(kept) is None
    await store.aclose()
