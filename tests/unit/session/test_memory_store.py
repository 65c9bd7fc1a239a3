"""The in-memory store's bounds: live sessions capped per tenant (LRU), expiry without sweeps."""

from __future__ import annotations

import asyncio

from proxy.session.base import SessionDelta
from proxy.session.identity import session_key
from proxy.session.memory import MemoryStore, tenant_of
from proxy.tenants import caller_namespace


def _step() -> SessionDelta:
    delta = SessionDelta()
    delta.incr("steps")
    return delta


def _commit(store: MemoryStore, key: str, ttl: int = 60) -> None:
    asyncio.run(store.commit(key, _step(), ttl))


def test_the_tenant_of_a_session_key():
    assert tenant_of(session_key("acme", "s-1")) == "acme"
    assert tenant_of(session_key("acme", "a:b")) == "acme"
    assert tenant_of("lw:{acme}:daily") == ""


def test_the_callers_of_the_implicit_tenant_share_its_cap_and_its_name():
    namespace = caller_namespace("default", "Bearer sk-caller")

    assert tenant_of(session_key(namespace, "s-1")) == "default"


def test_a_tenant_over_its_cap_loses_its_least_recently_used_session():
    evicted: list[str] = []
    store = MemoryStore(max_sessions_per_tenant=3, on_evict=evicted.append)
    keys = [session_key("acme", f"s{n}") for n in range(4)]
    for key in keys[:3]:
        _commit(store, key)
    asyncio.run(store.load(keys[0]))  # used again: s1 is now the least recently used

    _commit(store, keys[3])

    assert asyncio.run(store.load(keys[1])).is_new
    assert [asyncio.run(store.load(k)).steps for k in (keys[0], keys[2], keys[3])] == [1, 1, 1]
    assert evicted == ["acme"]


def test_one_tenants_sessions_never_evict_anothers():
    store = MemoryStore(max_sessions_per_tenant=2)
    _commit(store, session_key("quiet", "only"))

    for n in range(10):
        _commit(store, session_key("busy", f"s{n}"))

    assert asyncio.run(store.load(session_key("quiet", "only"))).steps == 1
    assert len(store) == 3


def test_expired_sessions_are_dropped_from_the_front_as_others_are_written():
    now = [0.0]
    store = MemoryStore(clock=lambda: now[0])
    for n in range(100):
        _commit(store, session_key("acme", f"old{n}"), ttl=10)
    now[0] = 11.0

    _commit(store, session_key("acme", "new"), ttl=10)

    assert len(store) == 1


class _Instant(float):
    """A clock reading that counts how often an expiry is compared with it."""

    compared = 0

    def __add__(self, other: object) -> _Instant:
        return _Instant(float(self) + float(other))  # type: ignore[arg-type]

    def __le__(self, other: object) -> bool:
        _Instant.compared += 1
        return float(self) <= float(other)  # type: ignore[arg-type]

    def __gt__(self, other: object) -> bool:
        _Instant.compared += 1
        return float(self) > float(other)  # type: ignore[arg-type]


def test_a_write_costs_o1_amortized_however_many_sessions_live():
    """No write walks the live sessions (the old periodic sweep took ~20 ms at 200k)."""
    store = MemoryStore(clock=lambda: _Instant(0.0))

    async def writes(prefix: str, n: int) -> None:
        for i in range(n):
            await store.commit(session_key("acme", f"{prefix}{i}"), _step(), 60)

    asyncio.run(writes("live", 10_000))
    _Instant.compared = 0
    asyncio.run(writes("more", 2_048))

    assert _Instant.compared <= 2 * 2_048
