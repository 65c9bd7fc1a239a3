"""Stored chains: what a continuation of each recorded id finds, and a lookup the store fails."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from proxy.loop.continuity import resolve_chain
from proxy.session.base import SessionDelta, SessionState, StoreUnavailable
from proxy.session.chains import Chained, chained_session, remember_responses
from proxy.session.memory import MemoryStore
from proxy.wire.responses.format import RESPONSES


async def test_a_continuation_finds_its_session_and_where_to_chain():
    store = MemoryStore()
    links = [("resp_a", "resp_b", None), ("resp_b", "resp_b", None), ("resp_lwx", None, '{"output": []}')]
    await remember_responses(store, "t", links, "s-1", 60)

    assert await chained_session(store, "t", "resp_a") == Chained("s-1", "resp_b")
    assert await chained_session(store, "t", "resp_b") == Chained("s-1", None)
    assert await chained_session(store, "t", "resp_lwx") == Chained("s-1", None, '{"output": []}')
    assert await chained_session(store, "other-tenant", "resp_a") is None
    assert await chained_session(store, "t", "resp_unknown") is None


class FailingLoads(MemoryStore):
    """A store whose every load times out (counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    async def load(self, key: str) -> SessionState:
        self.loads += 1
        raise StoreUnavailable("load failed: TimeoutError")


async def test_a_chain_lookup_the_store_fails_stops_there_and_names_no_session():
    store = FailingLoads()
    references = [{"type": "item_reference", "id": f"msg_lw{n:032x}_0"} for n in range(3)]
    payload = {"previous_response_id": "resp_a", "input": [*references, {"role": "user", "content": "Go on."}]}

    point = await resolve_chain(store, RESPONSES.chains, "t", payload)

    assert store.loads == 1  # not one per reference: each would be another timeout
    assert point.session is None  # not chain-resp_a: a point the store cannot read is not one nobody recorded
    assert point.store_failure == "load failed: TimeoutError"


class CountedRecords(MemoryStore):
    """A store that counts the records it is asked to write; each fails with ``failure`` if given."""

    def __init__(self, failure: StoreUnavailable | None = None) -> None:
        super().__init__()
        self.failure = failure
        self.records = 0
        self.commits = 0

    async def record(self, key: str, values: Mapping[str, str], ttl_seconds: int) -> None:
        self.records += 1
        await asyncio.sleep(0)  # answered a loop turn later, as over a network
        if self.failure is not None:
            raise self.failure
        await super().record(key, values, ttl_seconds)

    async def commit(self, key: str, delta: SessionDelta, ttl_seconds: int) -> SessionState:
        self.commits += 1
        return await super().commit(key, delta, ttl_seconds)


async def test_each_record_is_waited_for_and_found():
    store = CountedRecords()
    links = [("resp_a", "resp_b", None), ("resp_b", "resp_b", None)]
    await remember_responses(store, "t", links, "s-1", 60)

    assert store.records == 2
    assert store.commits == 0  # a pointer is no session: none of a commit's books
    assert await chained_session(store, "t", "resp_a") == Chained("s-1", "resp_b")
    assert await chained_session(store, "t", "resp_b") == Chained("s-1", None)


async def test_a_record_that_fails_loses_only_the_record_and_sends_no_more():
    store = CountedRecords(StoreUnavailable("record failed: TimeoutError"))
    links = [("resp_a", None, None), ("resp_b", None, None)]
    await remember_responses(store, "t", links, "s-1", 60)

    assert store.records == 1  # after a failure the request asks the store nothing more
