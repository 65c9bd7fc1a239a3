"""What the upstream holds of a session beyond what its client resends.

Two formats keep transcript the client never sends back. On Messages, the proxy's own turns
(a nudge's, an annotated tool result) are recorded in the session and spliced back, byte
for byte, into every later request, because the upstream binds signed thinking to its exact
prefix. On Responses, a continuation names a stored response (``previous_response_id``),
so every response id the proxy returns is remembered with its session
(:mod:`proxy.session.chains`). The format's :class:`~proxy.wire.base.Transcript` and
:class:`~proxy.wire.base.Chains` say what applies (None: that format has none; chat has
neither); the pipeline calls these at fixed points of a request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from proxy.errors import InvalidRequest
from proxy.exchange import Reply, Turn
from proxy.observe.logs import log_event
from proxy.request import AgentRequest
from proxy.session.base import FIELDS, SessionDelta, SessionState, SessionStore, StoreUnavailable
from proxy.session.chains import MAX_REFERENCES, Chained, chained_session, remember_responses, unrecorded_chain

__all__ = [
    "MAX_RECORDED_BYTES",
    "ChainPoint",
    "Links",
    "chain_links",
    "record_turns",
    "remember_links",
    "resolve_chain",
    "summary_payload",
]

Links = list[tuple[str, str | None, str | None]]
"""(id, upstream id to continue from instead, the proxy's own body) per reply id: see
:meth:`~proxy.wire.base.Chains.links`."""

MAX_RECORDED_BYTES = 4 * 1024 * 1024
"""Most a session's state may hold before a request records no more transcript into it. A
record holds client content (an annotated tool result, whole), and records at positions a
history no longer reaches stay until the session expires: without a cap, a client annotated
at a new position on every request grows the state (and every later load) without limit."""

_decode = msgspec.json.decode
_TASK_CHARS = 4000
"""How much of a run's task is kept for its continuations (the judge reads less)."""


def summary_payload(
    call: AgentRequest, state: SessionState, amended: Mapping[str, Any] | None, payload: Mapping[str, Any]
) -> Mapping[str, Any]:
    """The request an ending's summary call extends: the transcript as the upstream knows it
    (the session's records spliced in), else the client's own. ``amended``: the payload
    before splicing, once the attempts began (None: the request ended before them)."""
    if amended is None:
        transcript = call.wire.transcript
        return call.payload if transcript is None else transcript.spliced(call.payload, state.values)
    return payload if payload is not amended else call.payload


def record_turns(
    call: AgentRequest,
    amended: Mapping[str, Any],
    extra: Sequence[Turn],
    reply: Reply,
    delta: SessionDelta,
    state: SessionState,
    answered: Mapping[str, str] | None = None,
) -> None:
    """What the upstream saw that the client will not send back (turns the proxy added, tool
    results it amended, the calls of ``reply`` it ``answered`` itself and took out of the
    client's copy) into the session, to be spliced into its later requests; nothing once
    the session's state would pass :data:`MAX_RECORDED_BYTES` (counted, logged)."""
    transcript = call.wire.transcript
    if transcript is None or (not extra and amended is call.payload and not answered):
        return
    records = transcript.recorded(call.payload, amended, extra, reply, answered)
    held = sum(len(name) + len(value) for name, value in state.values.items())
    adding = sum(len(name) + len(value) for name, value in records.items())
    if records and held + adding > MAX_RECORDED_BYTES:
        log_event(
            "transcript_not_recorded",
            {"tenant": call.tenant, "session": call.session.id, "held": held, "adding": adding},
            logging.WARNING,
        )
        return
    for name, value in records.items():
        delta.assign(name, value)


def chain_links(
    call: AgentRequest, replies: Sequence[Reply], answer: Reply | Mapping[str, Any] | None, delta: SessionDelta
) -> Links:
    """The reply ids of this request a later one may continue from; the run's task is kept in
    the session then, for the judge of continuations that carry no task."""
    chains = call.wire.chains
    links = [] if chains is None else chains.links(call.payload, replies, answer)
    if links and (task := call.conversation.first_text("user")):
        delta.default(FIELDS.TASK, task[:_TASK_CHARS])
    return links


class Chaining(Protocol):
    """What :func:`resolve_chain` asks of a format's chains (its :class:`~proxy.wire.base.Chains`;
    declared here, since the loop reads no wire module)."""

    def continues(self, payload: Mapping[str, Any]) -> str | None: ...

    def references(self, payload: Mapping[str, Any]) -> list[str]: ...

    def rechained(
        self, payload: Mapping[str, Any], continue_from: str | None, bodies: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class ChainPoint:
    """What :func:`resolve_chain` found for a request."""

    session: str | None = None
    """The session recorded for the response it continues (None: it continues none, or the
    store failed)."""
    rewritten: dict[str, Any] | None = None
    """The request chained where the server holds the history, the proxy's items inlined
    (None: unchanged)."""
    store_failure: str | None = None
    """Why the store could not be read (the request then asks it nothing more)."""


async def resolve_chain(
    store: SessionStore, chains: Chaining | None, namespace: str, payload: dict[str, Any]
) -> ChainPoint:
    """For a request that continues a stored response or refers to the proxy's own items:
    the session recorded for its chain point, and the request rewritten to chain where the
    server holds the history and to carry the proxy's items itself. The first lookup the
    store fails ends the lookups: the session is then not named here (a chain point the store
    cannot read is not one nobody recorded), and the request goes on as its fail mode says."""
    if chains is None:
        return ChainPoint()
    previous = chains.continues(payload)
    references = chains.references(payload)
    if previous is None and not references:
        return ChainPoint()
    if len(references) > MAX_REFERENCES:
        raise InvalidRequest(
            f"The input refers to items of {len(references)} responses LoopWarden made; "
            f"at most {MAX_REFERENCES} are resolved per request.",
            param="input",
        )
    chained: Chained | None = None
    bodies: dict[str, Any] = {}
    try:
        chained = await chained_session(store, namespace, previous) if previous is not None else None
        for reference in references:
            recorded = await chained_session(store, namespace, reference)
            if recorded is not None and recorded.body is not None:
                bodies[reference] = _decode(recorded.body)
    except StoreUnavailable as exc:
        rewritten = chains.rechained(payload, None, {})
        return ChainPoint(None, rewritten if rewritten != payload else None, str(exc))
    session = None if previous is None else chained.session if chained is not None else unrecorded_chain(previous)
    rewritten = chains.rechained(payload, chained.continue_from if chained is not None else None, bodies)
    return ChainPoint(session, rewritten if rewritten != payload else None)


async def remember_links(store: SessionStore, call: AgentRequest, links: Links) -> None:
    """Remember ``links`` under the session (after its commit, before the client can continue)."""
    if links:
        await remember_responses(store, call.namespace, links, call.session.id, call.policy.session_ttl_secs)
