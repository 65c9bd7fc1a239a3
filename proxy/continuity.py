"""What the upstream holds of a session beyond what its client resends.

Two formats keep transcript the client never sends back. On Messages, the proxy's own turns
(a nudge's, an annotated tool result) are recorded in the session and spliced back, byte
for byte, into every later request, because the upstream binds signed thinking to its exact
prefix. On Responses, a continuation names a stored response (``previous_response_id``),
so every response id the proxy returns is remembered with its session
(:mod:`proxy.session.chains`). The adapter says what applies to its format (chat: nothing);
the pipeline calls these at fixed points of a request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.exchange import Reply, Turn
from proxy.request import AgentRequest
from proxy.session.base import FIELDS, SessionDelta, SessionState, SessionStore
from proxy.session.chains import remember_responses

__all__ = ["Links", "chain_links", "record_turns", "remember_links", "summary_payload"]

Links = list[tuple[str, str | None, str | None]]
"""(id, upstream id to continue from instead, the proxy's own body) per reply id: see
:meth:`~proxy.wire.base.WireAdapter.chain_links`."""

_TASK_CHARS = 4000
"""How much of a run's task is kept for its continuations (the judge reads less)."""


def summary_payload(
    call: AgentRequest, state: SessionState, amended: Mapping[str, Any] | None, payload: Mapping[str, Any]
) -> Mapping[str, Any]:
    """The request an ending's summary call extends: the transcript as the upstream knows it
    (the session's records spliced in), else the client's own. ``amended``: the payload
    before splicing, once the attempts began (None: the request ended before them)."""
    if amended is None:
        return call.adapter.spliced(call.payload, state.values)
    return payload if payload is not amended else call.payload


def record_turns(
    call: AgentRequest, amended: Mapping[str, Any], extra: Sequence[Turn], reply: Reply, delta: SessionDelta
) -> None:
    """What the upstream saw that the client will not send back (turns the proxy added, tool
    results it amended) into the session, to be spliced into its later requests."""
    if extra or amended is not call.payload:
        for name, value in call.adapter.recorded(call.payload, amended, extra, reply).items():
            delta.assign(name, value)


def chain_links(
    call: AgentRequest, replies: Sequence[Reply], answer: Reply | Mapping[str, Any] | None, delta: SessionDelta
) -> Links:
    """The reply ids of this request a later one may continue from; the run's task is kept in
    the session then, for the judge of continuations that carry no task."""
    links = call.adapter.chain_links(call.payload, replies, answer)
    if links and (task := call.conversation.first_text("user")):
        delta.default(FIELDS.TASK, task[:_TASK_CHARS])
    return links


async def remember_links(store: SessionStore, call: AgentRequest, links: Links) -> None:
    """Remember ``links`` under the session (after its commit, before the client can continue)."""
    if links:
        await remember_responses(store, call.namespace, links, call.session.id, call.policy.session_ttl_secs)
