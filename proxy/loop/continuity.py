"""What the upstream holds of a session beyond what its client resends.

Two formats keep transcript the client never sends back. On Messages, the proxy's own turns
(a nudge's, an annotated tool result) are recorded in the session and spliced back, byte
for byte, into every later request, because the upstream binds signed thinking to its exact
prefix. On Responses, a continuation names a stored response (``previous_response_id``),
so every response id the proxy returns is remembered with its session
(:mod:`proxy.session.chains`). The adapter says what applies to its format (chat: nothing).

Per request, one :class:`Continuity` at three points of the pipeline: before the loop (the
session's records spliced into what goes upstream), at an ending (the transcript its summary
extends), and after (the turns and reply ids recorded into the commit, the ids remembered once
it landed). Before any of them, at the edge, :func:`resume` resolves a continuation to its
session, since the session's identity depends on it.
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
from proxy.observe.logs import log_event
from proxy.request import AgentRequest
from proxy.session.base import FIELDS, SessionDelta, SessionState, SessionStore
from proxy.session.chains import MAX_REFERENCES, chained_session, remember_responses, unrecorded_chain
from proxy.session.identity import named_run, turn_digest

__all__ = ["MAX_RECORDED_BYTES", "Chaining", "Continuity", "Links", "Resumed", "resume"]

Links = list[tuple[str, str | None, str | None]]
"""(id, upstream id to continue from instead, the proxy's own body) per reply id: see
:meth:`~proxy.wire.base.WireAdapter.chain_links`."""

MAX_RECORDED_BYTES = 4 * 1024 * 1024
"""Most a session's state may hold before a request records no more transcript into it. A
record holds client content (an annotated tool result, whole), and records at positions a
history no longer reaches stay until the session expires: without a cap, a client annotated
at a new position on every request grows the state (and every later load) without limit."""

_decode = msgspec.json.decode
_TASK_CHARS = 4000
"""How much of a run's task is kept for its continuations (the judge reads less)."""


class Chaining(Protocol):
    """What :func:`resolve_chain` asks of a request's adapter (a :class:`~proxy.wire.base.WireAdapter`)."""

    def continues(self, payload: Mapping[str, Any]) -> str | None: ...

    def references(self, payload: Mapping[str, Any]) -> list[str]: ...

    def rechained(
        self, payload: Mapping[str, Any], continue_from: str | None, bodies: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]: ...

    def encode(self, body: Mapping[str, Any]) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Resumed:
    """A request as it goes on: the session its chain point was recorded in (None: it names
    none), and its payload and body, rewritten when its chain needed it."""

    session: str | None
    payload: dict[str, Any]
    body: bytes


async def resume(
    store: SessionStore, adapter: Chaining, namespace: str, payload: dict[str, Any], body: bytes
) -> Resumed:
    """Where a request that continues a stored response goes on (see :func:`resolve_chain`)."""
    session, rewritten = await resolve_chain(store, adapter, namespace, payload)
    if rewritten is None:
        return Resumed(session, payload, body)
    return Resumed(session, rewritten, adapter.encode(rewritten))


async def resolve_chain(
    store: SessionStore, adapter: Chaining, namespace: str, payload: dict[str, Any]
) -> tuple[str | None, dict[str, Any] | None]:
    """For a request that continues a stored response or refers to the proxy's own items:
    the session recorded for its chain point, and the request rewritten to chain where the
    server holds the history and to carry the proxy's items itself (None: unchanged)."""
    previous = adapter.continues(payload)
    references = adapter.references(payload)
    if previous is None and not references:
        return None, None
    if len(references) > MAX_REFERENCES:
        raise InvalidRequest(
            f"The input refers to items of {len(references)} responses LoopWarden made; "
            f"at most {MAX_REFERENCES} are resolved per request.",
            param="input",
        )
    chained = await chained_session(store, namespace, previous) if previous is not None else None
    bodies: dict[str, Any] = {}
    for reference in references:
        recorded = await chained_session(store, namespace, reference)
        if recorded is not None and recorded.body is not None:
            bodies[reference] = _decode(recorded.body)
    session = None if previous is None else chained.session if chained is not None else unrecorded_chain(previous)
    rewritten = adapter.rechained(payload, chained.continue_from if chained is not None else None, bodies)
    return session, rewritten if rewritten != payload else None


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
        return self._request.adapter.spliced(payload, self._state.values)

    def summary_payload(self, sent: Mapping[str, Any]) -> Mapping[str, Any]:
        """At an ending: the request its summary call extends, the transcript as the upstream
        knows it (``sent``: what went upstream last), else the client's own."""
        request = self._request
        if self._amended is None:  # the request ended before its attempts
            return request.adapter.spliced(request.payload, self._state.values)
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
            request.session = named_run(request.session, turn_digest(first.content, first.tool_calls))
        answer = ending.body if isinstance(ending, Written) else _passed_reply(ending)
        self._links = request.adapter.chain_links(request.payload, replies, answer)
        if self._links and (task := request.conversation.first_text("user")):
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
        request, amended = self._request, self._amended
        if amended is None or (not extra and amended is request.payload and not answered):
            return
        records = request.adapter.recorded(request.payload, amended, extra, reply, answered)
        held = sum(len(name) + len(value) for name, value in self._state.values.items())
        adding = sum(len(name) + len(value) for name, value in records.items())
        if records and held + adding > MAX_RECORDED_BYTES:
            log_event(
                "transcript_not_recorded",
                {"tenant": request.tenant, "session": request.session.id, "held": held, "adding": adding},
                logging.WARNING,
            )
            return
        for name, value in records.items():
            self._delta.assign(name, value)


def _passed_reply(ending: Answer) -> Reply | None:
    return ending.tried.reply if isinstance(ending, Passed) else None
