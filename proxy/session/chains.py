"""Stored response chains: which session a response the proxy returned belongs to, and which
upstream response a continuation of it must chain to.

A Responses request that continues a stored response (``previous_response_id``) carries
only its new items, so its session can neither be derived from the opening nor told apart
from another run's. Every response id a request of such a format returns (each attempt's,
and an ending's) is recorded under the tenant in a small key of its own holding the
session's id, with the session's TTL; the continuation finds its session there. The record
also names the upstream response the server should continue from when that is not the id
the client holds: a stream shows the client the id of the attempt it began with, which the
proxy may have rejected and replaced (the server holds the rejected call unanswered there),
and an ending's id is the proxy's own: its record keeps the ending itself, so a later
request that refers to its items by id gets them from here, never from an upstream that has
never seen them. A chain point nobody recorded (expired, or a chain begun elsewhere) starts a
session of its own, named after that point; one the store cannot read names none (see
:func:`proxy.loop.continuity.resolve_chain`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.session.base import SessionStore, StoreUnavailable
from proxy.session.identity import session_key

__all__ = ["MAX_REFERENCES", "Chained", "chained_session", "remember_responses", "unrecorded_chain"]

MAX_REFERENCES = 64
"""Most responses of the proxy's own one request may refer to by item id: each is one store
lookup, so without a cap one body of references is a hundred thousand round trips."""

_SESSION = "session"
_CONTINUE = "continue_from"
_BODY = "body"


@dataclass(frozen=True, slots=True)
class Chained:
    session: str
    continue_from: str | None = None
    """The upstream response a continuation chains to instead (None: the one it names)."""
    body: str | None = None
    """The proxy's own response (an ending), as its JSON: the items it made."""


def _pointer(namespace: str, response_id: str) -> str:
    """``lw:chain:{tenant:response}``: under the tenant, in a hash tag of its own (so spread
    over a Cluster), and never of a session's shape (``lw:{tenant:session}``), so no session id
    a client picks can name it, and no store lists it as a session."""
    return "lw:chain:" + session_key(namespace, response_id)[3:]


async def chained_session(store: SessionStore, namespace: str, response_id: str) -> Chained | None:
    """What was recorded for ``response_id``; None when nothing was. A store that fails raises
    :class:`StoreUnavailable`: a chain point it cannot read is not one nobody recorded."""
    state = await store.load(_pointer(namespace, response_id))
    session = state.values.get(_SESSION)
    if not session:
        return None
    return Chained(session, state.values.get(_CONTINUE) or None, state.values.get(_BODY) or None)


def unrecorded_chain(response_id: str) -> str:
    """The session of a chain point no request recorded."""
    return "chain-" + response_id


async def remember_responses(
    store: SessionStore,
    namespace: str,
    links: Sequence[tuple[str, str | None, str | None]],
    session_id: str,
    ttl_seconds: int,
) -> None:
    """Record that these responses belong to ``session_id``: each (id, the upstream response
    to continue from when it is another, the body when the proxy made it), waited for, so the
    reply goes only once the record is there. A failed store loses only the record, and is
    asked nothing more."""
    for response_id, continue_from, body in links:
        values = {_SESSION: session_id}
        if continue_from is not None and continue_from != response_id:
            values[_CONTINUE] = continue_from
        if body is not None:
            values[_BODY] = body
        try:
            await store.record(_pointer(namespace, response_id), values, ttl_seconds)
        except StoreUnavailable:
            return
