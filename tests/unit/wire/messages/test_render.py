"""Writing Anthropic Messages: nudges, amended requests, summary calls, endings and errors."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from proxy.errors import (
    AuthenticationFailed,
    InvalidRequest,
    PayloadTooLarge,
    PermissionDenied,
    ProxyError,
    RateLimited,
    RouteNotFound,
    ServiceUnavailable,
    UpstreamError,
    UpstreamTimeout,
)
from proxy.exchange import Echo, Note, ReturnCalls
from proxy.goal.model import GOAL_TOOL, goal_tool
from proxy.wire.messages.format import MESSAGES
from proxy.wire.messages.parse import parse_reply

SIGNED = {"type": "thinking", "thinking": "Plan: read a.", "signature": "sig-Zx9\u00e9"}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a", "opts": {"n": 1.5}}}
PAYLOAD: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 2000,
    "system": "Be careful.",
    "tools": [{"name": "read", "input_schema": {"type": "object"}}],
    "messages": [{"role": "user", "content": "Read a."}],
    "metadata": {"user_id": "u1"},
}


def reply_of(*blocks: dict[str, Any], stop_reason: str = "end_turn") -> Any:
    body = {"type": "message", "role": "assistant", "content": list(blocks), "stop_reason": stop_reason, "usage": {}}
    reply = parse_reply(json.dumps(body).encode())
    assert reply is not None
    return reply


def rendered(turns: list[Any], payload: dict[str, Any] = PAYLOAD) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(MESSAGES.codec.render_request(payload, turns))
    return result


def test_a_note_is_a_user_turn_appended_after_the_clients_messages():
    body = rendered([Note("Please answer.")])

    assert body["messages"] == [
        *PAYLOAD["messages"],
        {"role": "user", "content": [{"type": "text", "text": "Please answer."}]},
    ]
    assert {k: v for k, v in body.items() if k != "messages"} == {k: v for k, v in PAYLOAD.items() if k != "messages"}


def test_an_echo_sends_the_assistant_content_back_exactly():
    reply = reply_of(SIGNED, {"type": "text", "text": "Done?"})

    body = rendered([Echo(reply), Note("Not yet.")])

    assert body["messages"][1] == {"role": "assistant", "content": [SIGNED, {"type": "text", "text": "Done?"}]}
    assert body["messages"][2] == {"role": "user", "content": [{"type": "text", "text": "Not yet."}]}


def test_returned_calls_put_every_tool_result_first_and_the_note_after_them():
    second = {**CALL, "id": "toolu_2"}
    reply = reply_of(SIGNED, CALL, second, stop_reason="tool_use")

    body = rendered([ReturnCalls(reply, {"toolu_1": "bad path", "toolu_2": "repeated"}), Note("Fix the input.")])

    assert body["messages"][1] == {"role": "assistant", "content": [SIGNED, CALL, second]}
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "bad path"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "repeated"},
        {"type": "text", "text": "Fix the input."},
    ]
    assert len(body["messages"]) == 3


def test_the_echoed_content_keeps_the_upstreams_key_order():
    reply = reply_of({"signature": "s", "thinking": "t", "type": "thinking"})

    raw = MESSAGES.codec.render_request(PAYLOAD, [Echo(reply)])

    assert b'{"signature":"s","thinking":"t","type":"thinking"}' in raw


def test_a_streamed_request_without_changes_is_sent_as_the_client_wrote_it():
    body = b'{"stream": true, "model": "m",  "messages": []}'

    assert MESSAGES.stream.render_request(body, json.loads(body), [], untouched=True) is body


def test_a_nudged_streamed_request_still_streams():
    assert json.loads(MESSAGES.stream.render_request(b"{}", PAYLOAD, [Note("x")], untouched=False))["stream"] is True


def test_the_summary_call_forbids_tools_drops_the_format_and_appends_the_instruction():
    payload = {
        **PAYLOAD,
        "stream": True,
        "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {}}},
    }

    body = json.loads(MESSAGES.codec.render_summary_request(payload, [], "Summarize.", 500, False))

    assert body["tool_choice"] == {"type": "none"}
    assert body["tools"] == PAYLOAD["tools"]
    assert body["output_config"] == {"effort": "low"}
    assert "stream" not in body
    assert body["max_tokens"] == 500
    assert body["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": "Summarize."}]}


def test_the_summary_calls_thinking_budget_stays_below_its_max_tokens():
    payload = {**PAYLOAD, "thinking": {"type": "enabled", "budget_tokens": 1024}}

    body = json.loads(MESSAGES.codec.render_summary_request(payload, [], "Summarize.", 300, True))

    assert body["max_tokens"] > body["thinking"]["budget_tokens"]


def test_a_note_on_a_tool_result_is_appended_to_that_result_only():
    payload = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "out"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "x"}]},
                ],
            }
        ]
    }

    amended = MESSAGES.codec.amended(payload, {"t1": "careful", "t2": "again"}, ())

    blocks = amended["messages"][0]["content"]
    assert blocks[0]["content"] == "out\n\n[LoopWarden] careful"
    assert blocks[1]["content"][-1] == {"type": "text", "text": "[LoopWarden] again"}
    assert payload["messages"][0]["content"][0]["content"] == "out"  # the client's own payload is untouched


def test_hiding_every_tool_removes_tools_and_tool_choice():
    amended = MESSAGES.codec.amended({**PAYLOAD, "tool_choice": {"type": "tool", "name": "read"}}, {}, ["read"])

    assert "tools" not in amended
    assert "tool_choice" not in amended


def test_goal_mode_offers_its_tool_with_an_input_schema():
    tools = MESSAGES.codec.with_tool(PAYLOAD, goal_tool())["tools"]

    assert tools[-1]["name"] == GOAL_TOOL
    assert tools[-1]["input_schema"]["type"] == "object"


def test_the_goal_tools_calls_are_taken_out_of_a_reply():
    body = {"content": [{"type": "text", "text": "x"}, {**CALL, "name": GOAL_TOOL}], "stop_reason": "tool_use"}

    stripped = MESSAGES.codec.without_calls(body, GOAL_TOOL)

    assert stripped["content"] == [{"type": "text", "text": "x"}]
    assert stripped["stop_reason"] == "end_turn"


def test_an_ending_is_a_message_with_an_id_of_the_proxys_own():
    ending = MESSAGES.codec.ending("Stopping here.", model="claude-x")

    assert ending["id"].startswith("msg_lw")
    assert (ending["type"], ending["role"], ending["stop_reason"]) == ("message", "assistant", "end_turn")
    assert ending["content"] == [{"type": "text", "text": "Stopping here."}]


def test_a_structured_request_takes_its_ending_as_a_refusal_unless_text_streamed():
    payload = {"output_config": {"format": {"type": "json_schema", "schema": {}}}}
    ending = MESSAGES.codec.ending("Stopping.", model="m")

    assert MESSAGES.codec.shaped(payload, ending, text_started=False)["stop_reason"] == "refusal"
    assert MESSAGES.codec.shaped(payload, ending, text_started=True)["stop_reason"] == "end_turn"
    assert MESSAGES.codec.shaped({}, ending, text_started=False)["stop_reason"] == "end_turn"


def test_a_refusal_ending_carries_its_words_as_the_refusals_explanation_not_as_text():
    payload = {"output_config": {"format": {"type": "json_schema", "schema": {}}}}

    refused = MESSAGES.codec.shaped(payload, MESSAGES.codec.ending("Stopping.", model="m"), text_started=False)

    assert (refused["content"], refused["stop_details"]) == (
        [],
        {"type": "refusal", "category": None, "explanation": "Stopping."},
    )
    assert MESSAGES.codec.parse_reply(MESSAGES.codec.encode(refused)).refusal == "Stopping."


def test_an_ending_after_streamed_text_is_set_apart():
    assert MESSAGES.stream.appended(MESSAGES.codec.ending("Stop.", model="m"))["content"][0]["text"] == "\n\nStop."


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (InvalidRequest("x"), 400, "invalid_request_error"),
        (AuthenticationFailed("x"), 401, "authentication_error"),
        (PermissionDenied("x"), 403, "permission_error"),
        (RouteNotFound("x"), 404, "not_found_error"),
        (PayloadTooLarge("x"), 413, "request_too_large"),
        (RateLimited("x"), 429, "rate_limit_error"),
        (ProxyError("x"), 500, "api_error"),
        (UpstreamError("x"), 502, "api_error"),
        (ServiceUnavailable("x"), 503, "overloaded_error"),
        (UpstreamTimeout("x"), 504, "timeout_error"),
    ],
)
def test_errors_take_anthropics_shape_with_the_type_of_their_status(error: ProxyError, status: int, kind: str):
    assert error.status == status
    assert json.loads(MESSAGES.codec.error_body(error)) == {"type": "error", "error": {"type": kind, "message": "x"}}


def test_a_reply_renders_as_its_own_content_while_that_still_says_the_same():
    reply = reply_of(SIGNED, {"type": "text", "text": "Reading."}, CALL, stop_reason="tool_use")

    body = MESSAGES.codec.render_reply(reply)

    assert body["content"] == [SIGNED, {"type": "text", "text": "Reading."}, CALL]
    assert (body["type"], body["stop_reason"]) == ("message", "tool_use")
    assert body["id"].startswith("msg_lw")


def test_a_reply_changed_by_a_guard_renders_from_what_it_now_says():
    reply = dataclasses.replace(reply_of(SIGNED, CALL, stop_reason="tool_use"), tool_calls=(), finish_reason="end_turn")

    body = MESSAGES.codec.render_reply(reply)

    assert [b["type"] for b in body["content"]] == ["thinking"]
    assert body["stop_reason"] == "end_turn"


def test_a_recorded_chat_reply_replays_in_messages_words():
    from proxy.exchange import Reply, ToolCall, Usage

    reply = Reply(None, "Hmm.", (ToolCall("c1", "read", '{"path": "a"}'),), "tool_calls", Usage(3, 4))

    body = MESSAGES.codec.render_reply(reply)

    assert body["content"] == [
        {"type": "thinking", "thinking": "Hmm.", "signature": ""},
        {"type": "tool_use", "id": "c1", "name": "read", "input": {"path": "a"}},
    ]
    assert (body["stop_reason"], body["usage"]) == ("tool_use", {"input_tokens": 3, "output_tokens": 4})


def test_an_echo_of_an_empty_reply_sends_no_empty_assistant_turn():
    body = rendered([Echo(reply_of()), Note("Say something.")])

    assert [m["role"] for m in body["messages"]] == ["user", "user"]
