"""What the upstream saw of a Messages session, recorded and spliced back into later requests."""

from __future__ import annotations

import json
from typing import Any

from proxy.exchange import Note, ReturnCalls
from proxy.goal.model import goal_tool
from proxy.wire.messages.format import MESSAGES
from proxy.wire.messages.parse import parse_reply
from proxy.wire.messages.transcript import FIELD_PREFIX

THOUGHT = {"type": "thinking", "thinking": "Plan.", "signature": "sig-1"}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"query": "x"}}
FIXED = {"type": "tool_use", "id": "toolu_2", "name": "search", "input": {"q": "x"}}
CLIENT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Go."}]}


def reply_of(*blocks: dict[str, Any]) -> Any:
    body = {"type": "message", "content": list(blocks), "stop_reason": "tool_use", "usage": {}}
    reply = parse_reply(json.dumps(body).encode())
    assert reply is not None
    return reply


def nudged_session() -> dict[str, str]:
    """A request whose first reply was returned unexecuted and whose second reached the client."""
    turns = [ReturnCalls(reply_of(THOUGHT, CALL), {"toolu_1": "q is required"}), Note("Fix it.")]
    return MESSAGES.transcript.recorded(CLIENT, CLIENT, turns, reply_of({**THOUGHT, "signature": "sig-2"}, FIXED))


def next_request(final: list[dict[str, Any]]) -> dict[str, Any]:
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok"}]}
    return {**CLIENT, "messages": [*CLIENT["messages"], {"role": "assistant", "content": final}, result]}


def test_the_hidden_turns_are_put_back_before_the_reply():
    final = [{**THOUGHT, "signature": "sig-2"}, FIXED]

    spliced = MESSAGES.transcript.spliced(next_request(final), nudged_session())

    roles = [m["role"] for m in spliced["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert spliced["messages"][1]["content"] == [THOUGHT, CALL]
    assert spliced["messages"][2]["content"][0]["tool_use_id"] == "toolu_1"
    assert spliced["messages"][2]["content"][-1] == {"type": "text", "text": "Fix it."}
    assert spliced["messages"][3]["content"] == final


def test_a_client_that_writes_nulls_back_still_matches():
    final = [{**THOUGHT, "signature": "sig-2", "cache_control": None}, {**FIXED, "caller": None}]

    spliced = MESSAGES.transcript.spliced(next_request(final), nudged_session())

    assert len(spliced["messages"]) == 5


def test_a_streamed_reply_that_carried_part_of_the_failed_attempt_is_replaced_whole():
    final = [THOUGHT, {**THOUGHT, "signature": "sig-2"}, FIXED]  # the first attempt's thinking went out too

    spliced = MESSAGES.transcript.spliced(next_request(final), nudged_session())

    assert spliced["messages"][3]["content"] == [{**THOUGHT, "signature": "sig-2"}, FIXED]


def test_a_history_the_client_rewrote_is_left_alone():
    payload = next_request([{"type": "text", "text": "A summary of earlier work."}])

    assert MESSAGES.transcript.spliced(payload, nudged_session()) is payload


def test_a_request_with_nothing_recorded_is_the_clients_own_payload():
    assert MESSAGES.transcript.spliced(CLIENT, {"steps": "3"}) is CLIENT


def test_a_session_that_stored_nothing_leaves_the_clients_own_payload():
    assert MESSAGES.transcript.spliced(CLIENT, {}) is CLIENT


def test_a_record_that_cannot_be_read_back_is_passed_over_for_the_others():
    payload = next_request([{**THOUGHT, "signature": "sig-2"}, FIXED])
    session = {**nudged_session(), FIELD_PREFIX + "9": "[" * 100_000 + "]" * 100_000}

    spliced = MESSAGES.transcript.spliced(payload, session)

    assert spliced == MESSAGES.transcript.spliced(payload, nudged_session())
    assert spliced != payload


def test_an_annotated_tool_result_is_recorded_at_its_place():
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "out"}]}
    client = {"messages": [CLIENT["messages"][0], {"role": "assistant", "content": [CALL]}, result]}
    amended = MESSAGES.codec.amended(client, {"toolu_1": "you called this before"}, ())

    fields = MESSAGES.transcript.recorded(client, amended, [], reply_of(FIXED))
    later = {"messages": [*client["messages"], {"role": "assistant", "content": [FIXED]}]}

    assert MESSAGES.transcript.spliced(later, fields)["messages"][2] == amended["messages"][2]
    assert len(fields) == 1  # no turns were added, so the reply itself is not recorded


def test_the_clients_cache_breakpoints_of_today_are_kept_not_the_recorded_ones():
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "out", "cache_control": {"type": "ephemeral"}}
    client = {
        "messages": [
            CLIENT["messages"][0],
            {"role": "assistant", "content": [CALL]},
            {"role": "user", "content": [result]},
        ]
    }
    fields = MESSAGES.transcript.recorded(
        client, MESSAGES.codec.amended(client, {"toolu_1": "careful"}, ()), [], reply_of(FIXED)
    )
    moved = {k: v for k, v in result.items() if k != "cache_control"}
    later = {
        "messages": [
            *client["messages"][:2],
            {"role": "user", "content": [moved]},
            {"role": "assistant", "content": [FIXED]},
            {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": {"type": "ephemeral"}}]},
        ]
    }

    spliced = MESSAGES.transcript.spliced(later, fields)["messages"][2]["content"][0]

    assert "cache_control" not in spliced
    assert spliced["content"] == "out\n\n[LoopWarden] careful"


def test_a_tool_the_proxy_offered_stays_offered_once_the_upstream_saw_it():
    mine = [{"name": "search", "input_schema": {"type": "object"}}]
    client = {**CLIENT, "tools": mine}
    with_goal = MESSAGES.codec.with_tool(client, goal_tool())
    fields = MESSAGES.transcript.recorded(client, with_goal, [], reply_of(FIXED))

    later = MESSAGES.transcript.spliced(client, fields)

    assert later["tools"] == with_goal["tools"]
    assert MESSAGES.transcript.spliced(with_goal, fields) is with_goal  # while the proxy adds it itself: nothing to do


def test_a_reply_stripped_of_the_proxys_calls_is_put_back_whole_with_their_results_first():
    own = {"type": "tool_use", "id": "toolu_goal", "name": "loopwarden_goal", "input": {"action": "update_status"}}
    fields = MESSAGES.transcript.recorded(
        CLIENT, CLIENT, [], reply_of(THOUGHT, own, FIXED), {"toolu_goal": "Goal stays."}
    )
    theirs = {"type": "tool_result", "tool_use_id": "toolu_2", "content": "found"}
    later = {
        **CLIENT,
        "messages": [
            *CLIENT["messages"],
            {"role": "assistant", "content": [THOUGHT, FIXED]},
            {"role": "user", "content": [theirs]},
        ],
    }

    messages = MESSAGES.transcript.spliced(later, fields)["messages"]

    assert messages[1]["content"] == [THOUGHT, own, FIXED]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_goal", "content": "Goal stays."},
        theirs,
    ]
