"""Stored response chains: which session a response the proxy returned belongs to.

A Responses request that continues a stored response (``previous_response_id``) carries
only its new items, so its session can neither be derived from the opening nor told apart
from another run's. Every response id a request of such a format returns (each attempt's,
and an ending's) is recorded under the tenant in a small key of its own holding the
session's id, with the session's TTL; the continuation finds its session there. A chain
point nobody recorded (expired, or a chain begun elsewhere) starts a session of its own,
named after that point, so its later turns still share one.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.session.base import SessionDelta, SessionStore, StoreUnavailable
from proxy.session.identity import session_key

__all__ = ["chained_session", "remember_responses", "unrecorded_chain"]

_FIELD = "session"


def _pointer(namespace: str, response_id: str) -> str:
    return session_key(namespace, "chain:" + response_id)


async def chained_session(store: SessionStore, namespace: str, response_id: str) -> str | None:
    """The session that returned ``response_id``; None when none is recorded (or the store failed:
    the request then goes on as an unrecorded chain, as fail-open serves it)."""
    try:
        state = await store.load(_pointer(namespace, response_id))
    except StoreUnavailable:
        return None
    session = state.values.get(_FIELD)
    return session or None


def unrecorded_chain(response_id: str) -> str:
    """The session of a chain point no request recorded."""
    return "chain-" + response_id


async def remember_responses(
    store: SessionStore, namespace: str, response_ids: Sequence[str], session_id: str, ttl_seconds: int
) -> None:
    """Record that these responses belong to ``session_id`` (a failed store loses only the record)."""
    for response_id in dict.fromkeys(response_ids):
        delta = SessionDelta()
        delta.assign(_FIELD, session_id)
        try:
            await store.commit(_pointer(namespace, response_id), delta, ttl_seconds)
        except StoreUnavailable:
            return
