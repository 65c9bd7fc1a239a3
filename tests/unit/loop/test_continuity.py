"""One request's continuity, at its three points: spliced before the loop, extended by an
ending's summary, recorded before the commit and remembered after it."""

from __future__ import annotations

import json
from typing import Any

import httpx

from proxy.exchange import Note, Reply, ReturnCalls
from proxy.loop.answer import Passed, Tried, Unusable, Written
from proxy.loop.continuity import Continuity, resolve_chain
from proxy.request import AgentRequest
from proxy.session.base import FIELDS, SessionDelta, SessionState
from proxy.session.chains import Chained, chained_session
from proxy.session.memory import MemoryStore
from proxy.upstream.client import UpstreamReply
from proxy.wire.base import WireFormat
from proxy.wire.messages.format import MESSAGES
from proxy.wire.messages.parse import parse_reply
from proxy.wire.responses.format import RESPONSES
from tests.support.agent_request import agent_request
from tests.support.fake_responses import message, response

THOUGHT = {"type": "thinking", "thinking": "Plan.", "signature": "sig-1"}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"query": "x"}}
FIXED = {"type": "tool_use", "id": "toolu_2", "name": "search", "input": {"q": "x"}}
CLIENT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Go."}]}


def messages_reply(*blocks: dict[str, Any]) -> Reply:
    reply = parse_reply(json.dumps({"type": "message", "content": list(blocks), "stop_reason": "tool_use"}).encode())
    assert reply is not None
    return reply


NUDGE = [ReturnCalls(messages_reply(THOUGHT, CALL), {"toolu_1": "q is required"})]


def request_of(wire: WireFormat, payload: dict[str, Any], session: str | None = "s1") -> AgentRequest:
    return agent_request(payload, session=session, wire=wire, stream=False)


def passed(reply: Reply) -> Passed:
    return Passed(Tried(UpstreamReply(httpx.Response(200), 1, 0.0), reply, None, 0.0))


def recorded_session() -> dict[str, str]:
    """The records a nudged Messages request leaves in its session."""
    return MESSAGES.transcript.recorded(CLIENT, CLIENT, NUDGE, messages_reply({**THOUGHT, "signature": "sig-2"}, FIXED))


def later_request() -> dict[str, Any]:
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok"}]}
    final = {"role": "assistant", "content": [{**THOUGHT, "signature": "sig-2"}, FIXED]}
    return {**CLIENT, "messages": [*CLIENT["messages"], final, result]}


def test_before_the_loop_the_sessions_records_are_spliced_into_what_goes_upstream():
    payload = later_request()
    continuity = Continuity(request_of(MESSAGES, payload), SessionState(recorded_session()), SessionDelta())

    spliced = continuity.splice(payload)

    assert [m["role"] for m in spliced["messages"]] == ["user", "assistant", "user", "assistant", "user"]


def test_an_ending_before_the_attempts_extends_the_clients_request_with_the_records_put_back():
    payload = later_request()
    continuity = Continuity(request_of(MESSAGES, payload), SessionState(recorded_session()), SessionDelta())

    summarized = continuity.summary_payload(payload)

    assert summarized == MESSAGES.transcript.spliced(payload, recorded_session())


def test_an_ending_after_the_attempts_extends_what_went_upstream():
    payload = later_request()
    continuity = Continuity(request_of(MESSAGES, payload), SessionState(recorded_session()), SessionDelta())
    sent = continuity.splice(payload)

    assert continuity.summary_payload(sent) is sent


def test_an_ending_extends_the_clients_own_request_when_nothing_was_spliced_in():
    request = request_of(MESSAGES, CLIENT)
    continuity = Continuity(request, SessionState(), SessionDelta())
    sent = continuity.splice({**CLIENT, "max_tokens": 64})  # as the guards amended it

    assert continuity.summary_payload(sent) is request.payload


def test_a_passed_reply_after_the_proxys_own_turns_records_what_the_upstream_saw():
    delta = SessionDelta()
    continuity = Continuity(request_of(MESSAGES, CLIENT), SessionState(), delta)
    continuity.splice(CLIENT)
    reply = messages_reply({**THOUGHT, "signature": "sig-2"}, FIXED)

    continuity.record(passed(reply), [*NUDGE, Note("Fix it.")], [reply])

    assert delta.assignments == MESSAGES.transcript.recorded(CLIENT, CLIENT, [*NUDGE, Note("Fix it.")], reply)
    assert delta.assignments


def test_a_request_that_added_nothing_records_nothing():
    delta = SessionDelta()
    continuity = Continuity(request_of(MESSAGES, CLIENT), SessionState(), delta)
    continuity.splice(CLIENT)

    continuity.record(passed(messages_reply(FIXED)), [], [])

    assert delta.assignments == {}


def test_a_request_that_ended_before_its_attempts_records_no_turns():
    delta = SessionDelta()
    continuity = Continuity(request_of(MESSAGES, CLIENT), SessionState(), delta)

    continuity.record(passed(messages_reply(FIXED)), [Note("Fix it.")], [])

    assert delta.assignments == {}


def test_a_reply_without_the_goal_tools_calls_is_recorded_whole_with_their_results():
    own = {"type": "tool_use", "id": "toolu_goal", "name": "loopwarden_goal", "input": {"action": "get_status"}}
    whole = messages_reply(THOUGHT, own, FIXED)
    delta = SessionDelta()
    continuity = Continuity(request_of(MESSAGES, CLIENT), SessionState(), delta)
    continuity.splice(CLIENT)

    continuity.record(Written({}, upstream_saw=(whole, {"toolu_goal": "Active."})), [], [])

    assert delta.assignments == MESSAGES.transcript.recorded(CLIENT, CLIENT, [], whole, {"toolu_goal": "Active."})


def test_a_derived_session_goes_on_in_the_run_its_first_reply_names():
    request = request_of(MESSAGES, CLIENT, session=None)
    opened = request.session
    continuity = Continuity(request, SessionState(), SessionDelta())

    continuity.record(passed(messages_reply(FIXED)), [], [])

    assert opened.fresh
    assert request.session.id != opened.id


def test_a_reply_that_reached_no_model_names_no_run():
    request = request_of(MESSAGES, CLIENT, session=None)
    opened = request.session
    continuity = Continuity(request, SessionState(), SessionDelta())

    continuity.record(Unusable(UpstreamReply(httpx.Response(400), 1, 0.0)), [], [])

    assert request.session == opened


async def test_the_reply_ids_are_remembered_with_their_session_after_the_commit():
    store = MemoryStore()
    payload = {"model": "m", "input": "Find it."}
    reply = RESPONSES.codec.parse_reply(json.dumps(response(message("Found it."))).encode())
    assert reply is not None
    request = request_of(RESPONSES, payload)
    delta = SessionDelta()
    continuity = Continuity(request, SessionState(), delta)

    continuity.record(passed(reply), [], [reply])
    await continuity.remember(store)

    assert await chained_session(store, request.namespace, reply.source["id"]) == Chained(request.session.id, None)
    assert delta.defaults[FIELDS.TASK] == "Find it."


async def test_a_continuation_resumes_in_the_session_its_chain_point_was_recorded_in():
    store = MemoryStore()
    reply = RESPONSES.codec.parse_reply(json.dumps(response(message("Found it."))).encode())
    assert reply is not None
    continuity = Continuity(request_of(RESPONSES, {"model": "m", "input": "Find it."}), SessionState(), SessionDelta())
    continuity.record(passed(reply), [], [reply])
    await continuity.remember(store)
    payload = {"model": "m", "input": "And then?", "previous_response_id": reply.source["id"]}

    point = await resolve_chain(store, RESPONSES.chains, "", payload)

    assert (point.session, point.rewritten, point.store_failure) == ("s1", None, None)
