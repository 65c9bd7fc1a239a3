"""The stores the books are tested against: each test runs over the in-memory store and a real
Redis (``store``); ``down`` is a Redis store whose server is not there, for the fail modes."""

from __future__ import annotations

import pytest

from proxy.session.memory import MemoryStore
from proxy.session.redis import RedisStore


@pytest.fixture(params=["memory", "redis"])
async def store(request, redis_url):
    if request.param == "memory":
        yield MemoryStore()
        return
    store = RedisStore.from_url(redis_url)
    yield store
    await store.aclose()


@pytest.fixture
async def down():
    """A Redis store whose server is not there."""
    store = RedisStore.from_url("redis://127.0.0.1:1/0", timeout=0.2)
    yield store
    await store.aclose()
