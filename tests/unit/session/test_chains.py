"""Stored chains: what a continuation of each recorded id finds, and a lookup the store fails."""

from __future__ import annotations

import asyncio

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


class SendsAtOnce(MemoryStore):
    """A store that can send a commit without waiting (as Redis on its lean connection): each
    one is applied when sent and answered a loop turn later, with ``outcome`` (None: it landed)."""

    def __init__(self, outcome: StoreUnavailable | None = None) -> None:
        super().__init__()
        self.outcome = outcome
        self.sent: list[asyncio.Future[None]] = []
        self.awaited = 0

    async def commit(self, key: str, delta: SessionDelta, ttl_seconds: int) -> SessionState:
        self.awaited += 1
        return await super().commit(key, delta, ttl_seconds)

    def start_commit(
        self, key: str, delta: SessionDelta, ttl_seconds: int, *, ordered: bool = True
    ) -> asyncio.Future[None] | None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.outcome is None:
            self._put(key, dict(delta.applied_to(SessionState()).values), ttl_seconds)
            future.get_loop().call_soon(future.set_result, None)
        else:
            future.get_loop().call_soon(future.set_exception, self.outcome)
        self.sent.append(future)
        return future


async def test_records_sent_at_once_are_waited_for_and_found():
    store = SendsAtOnce()
    links = [("resp_a", "resp_b", None), ("resp_b", "resp_b", None)]
    await remember_responses(store, "t", links, "s-1", 60)

    assert len(store.sent) == 2
    assert all(sent.done() for sent in store.sent)  # the reply goes once the records are there
    assert store.awaited == 0
    assert await chained_session(store, "t", "resp_a") == Chained("s-1", "resp_b")


async def test_a_record_sent_at_once_that_fails_loses_only_the_record_and_sends_no_more():
    store = SendsAtOnce(StoreUnavailable("commit failed: TimeoutError"))
    links = [("resp_a", None, None), ("resp_b", None, None)]
    await remember_responses(store, "t", links, "s-1", 60)

    assert len(store.sent) == 1  # after a failure the request asks the store nothing more
    assert store.awaited == 0
