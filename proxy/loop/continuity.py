"""What the upstream holds of a session beyond what its client resends.

Two formats keep transcript the client never sends back. On Messages, the proxy's own turns
(a nudge's, an annotated tool result) are recorded in the session and spliced back, byte
for byte, into every later request, because the upstream binds signed thinking to its exact
prefix. On Responses, a continuation names a stored response (``previous_response_id``),
so every response id the proxy returns is remembered with its session
(:mod:`proxy.session.chains`). The format's :class:`~proxy.wire.base.Transcript` and
:class:`~proxy.wire.base.Chains` say what applies (None: that format has none; chat has
neither).

Per request, one :class:`Continuity` at three points of the pipeline: before the loop (the
session's records spliced into what goes upstream), at an ending (the transcript its summary
extends), and after (the turns and reply ids recorded into the commit, the ids remembered once
it landed). Before any of them, at the edge, :func:`resolve_chain` resolves a continuation to
its session, since the session's identity depends on it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from proxy.errors import InvalidRequest
from proxy.exchange import Reply, Turn
from proxy.loop.answer import Answer, Passed, Written, delivered_reply
from proxy.request import AgentRequest
from proxy.session.base import FIELDS, SessionDelta, SessionState, SessionStore, StoreUnavailable
from proxy.session.chains import MAX_REFERENCES, Chained, chained_session, remember_responses, unrecorded_chain
from proxy.session.identity import named_run, turn_digest
from proxy.session.instructions import task_of

__all__ = ["MAX_RECORDED_BYTES", "ChainPoint", "Chaining", "Continuity", "Links", "resolve_chain"]

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
        if previous is not None and chained is not None and chained.body is not None:
            bodies[previous] = _decode(chained.body)  # an ending: what a continuation of it carries
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


class Continuity:
    """One request's continuity: what the session holds that its client does not resend, put
    back before the loop, extended by an ending's summary, recorded after."""

    __slots__ = ("_amended", "_delta", "_links", "_request", "_state")

    def __init__(self, request: AgentRequest, state: SessionState, delta: SessionDelta) -> None:
        self._request = request
        self._state = state
        self._delta = delta
        self._amended: Mapping[str, Any] | None = None
        self._links: Links = []

    def splice(self, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        """Before the loop: ``payload`` (the client's, as the guards amended it) with the
        session's records put back, as the upstream is to see it."""
        self._amended = payload
        transcript = self._request.wire.transcript
        return payload if transcript is None else transcript.spliced(payload, self._state.values)

    def summary_payload(self, sent: Mapping[str, Any]) -> Mapping[str, Any]:
        """At an ending: the request its summary call extends, the transcript as the upstream
        knows it (``sent``: what went upstream last), else the client's own."""
        request = self._request
        if self._amended is None:  # the request ended before its attempts
            transcript = request.wire.transcript
            return request.payload if transcript is None else transcript.spliced(request.payload, self._state.values)
        return sent if sent is not self._amended else request.payload

    def record(self, ending: Answer, extra: Sequence[Turn], replies: Sequence[Reply]) -> None:
        """After the loop, before the commit: what the upstream saw of this request that the
        client will not send back (turns the proxy added, tool results it amended, calls it
        answered itself), the run a derived session goes on in (named by its first reply), and
        the reply ids a later request may continue from."""
        request = self._request
        if isinstance(ending, Passed):
            self._record_turns(extra, ending.tried.reply, None)
        elif isinstance(ending, Written) and ending.upstream_saw is not None:
            self._record_turns(extra, *ending.upstream_saw)
        if request.session.fresh and request.session.derived and (first := delivered_reply(request, ending)):
            request.name_session(named_run(request.session, turn_digest(first.content, first.tool_calls)))
        answer = ending.body if isinstance(ending, Written) else _passed_reply(ending)
        chains = request.wire.chains
        self._links = [] if chains is None else chains.links(request.payload, replies, answer)
        if self._links and (task := task_of(request.conversation)):
            self._delta.default(FIELDS.TASK, task[:_TASK_CHARS])  # for the judge of continuations

    async def remember(self, store: SessionStore) -> None:
        """After the commit, before the client can continue from one: the recorded reply ids,
        each with the session it continues."""
        request = self._request
        if self._links:
            await remember_responses(
                store, request.namespace, self._links, request.session.id, request.policy.session_ttl_secs
            )

    def _record_turns(self, extra: Sequence[Turn], reply: Reply, answered: Mapping[str, str] | None) -> None:
        """Into the session, to be spliced into its later requests; nothing once its state would
        pass :data:`MAX_RECORDED_BYTES` (counted, logged)."""
        request, amended, transcript = self._request, self._amended, self._request.wire.transcript
        if transcript is None or amended is None or (not extra and amended is request.payload and not answered):
            return
        records = transcript.recorded(request.payload, amended, extra, reply, answered)
        held = sum(len(name) + len(value) for name, value in self._state.values.items())
        adding = sum(len(name) + len(value) for name, value in records.items())
        if records and held + adding > MAX_RECORDED_BYTES:
            request.log("transcript_not_recorded", {"held": held, "adding": adding}, logging.WARNING)
            return
        for name, value in records.items():
            self._delta.assign(name, value)


def _passed_reply(ending: Answer) -> Reply | None:
    return ending.tried.reply if isinstance(ending, Passed) else None
