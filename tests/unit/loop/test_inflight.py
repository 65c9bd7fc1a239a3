"""One request in the guard loop, built by keyword from its parts: the rest starts from the request."""

from __future__ import annotations

import json

from proxy.exchange import Note
from proxy.loop.inflight import InFlight
from proxy.policy.models import Policy
from proxy.request import AgentRequest, RequestNotes
from proxy.session.base import SessionDelta, SessionState
from proxy.wire.messages.format import MESSAGES
from proxy.wire.messages.parse import parse_reply
from tests.support.agent_request import TASK, agent_request


def in_flight(request: AgentRequest, state: SessionState | None = None) -> InFlight:
    return InFlight(
        request=request,
        state=state or SessionState(),
        delta=SessionDelta(),
        notes=RequestNotes(started=1.0),
        limits=[],
        client=None,
    )


def test_what_goes_upstream_starts_as_the_clients_payload():
    request = agent_request(TASK)

    assert in_flight(request).payload is request.payload


def test_a_request_may_make_the_policys_attempts():
    assert in_flight(agent_request(TASK, Policy(max_attempts=4))).allowed == 4


def test_a_request_under_a_shadow_policy_is_not_enforced():
    assert in_flight(agent_request(TASK, Policy(mode="shadow"))).enforce is False


def test_the_attempts_begin_with_the_sessions_records_spliced_in():
    call = {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}
    reply = parse_reply(json.dumps({"type": "message", "content": [call], "stop_reason": "tool_use"}).encode())
    assert reply is not None
    opening = {"model": "m", "messages": [{"role": "user", "content": "Go."}]}
    records = MESSAGES.transcript.recorded(opening, opening, [Note("Use the search tool.")], reply)
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
    later = {**opening, "messages": [*opening["messages"], {"role": "assistant", "content": [call]}, result]}
    flight = in_flight(agent_request(later, wire=MESSAGES), SessionState(records))

    flight.begin_attempts()

    assert flight.payload == MESSAGES.transcript.spliced(later, records) != later


def test_the_judge_has_no_target_before_the_attempts_begin_and_the_agents_upstream_after():
    flight = in_flight(agent_request(TASK))
    before = flight.judge

    flight.begin_attempts()

    assert before is None
    assert flight.judge is not None
    assert flight.judge.url == flight.request.url


def test_the_guards_read_the_nudges_sent_so_far_unless_asked_without_them():
    flight = in_flight(agent_request(TASK))
    flight.retries["tool_args"] += 1

    assert flight.context(flight.state).retries == {"tool_args": 1}
    assert flight.context(flight.state, retries=False).retries == {}
