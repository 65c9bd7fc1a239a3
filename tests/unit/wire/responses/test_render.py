"""Writing the Responses API: nudges that keep the pairing rules, summaries, endings, errors."""

from __future__ import annotations

import json

from proxy.errors import InvalidRequest
from proxy.exchange import Echo, Note, ReturnCalls, Tool
from proxy.wire.responses.format import RESPONSES
from proxy.wire.responses.parse import parse_reply
from proxy.wire.responses.render import is_proxy_id
from tests.support.fake_responses import custom_call, function_call, message, reasoning, response


def _reply(body: dict):
    reply = parse_reply(json.dumps(body).encode())
    assert reply is not None
    return reply


def _rendered(payload: dict, turns) -> dict:
    return json.loads(RESPONSES.codec.render_request(payload, turns))


NOTE = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say something."}]}


def test_a_note_is_a_user_message_after_the_whole_input():
    payload = {"model": "m", "input": "Fix it.", "store": False, "extra": {"kept": True}}

    rendered = _rendered(payload, [Note("Say something.")])

    assert rendered == {**payload, "input": [{"role": "user", "content": "Fix it."}, NOTE]}


def test_an_echo_sends_the_output_items_back_exactly_reasoning_and_phase_kept():
    body = response(reasoning("hmm", encrypted="gAAA-exact=="), message("Let me check.", phase="commentary"))
    payload = {"input": [{"role": "user", "content": "Go."}], "store": False}

    rendered = _rendered(payload, [Echo(_reply(body)), Note("Say something.")])

    assert rendered["input"] == [{"role": "user", "content": "Go."}, *body["output"], NOTE]


def test_returned_calls_are_echoed_and_each_answered_by_its_output_item():
    body = response(reasoning(), function_call("f", "{}", "c1"), custom_call("patch", "diff", "c2"))
    payload = {"input": "Go.", "store": False}

    rendered = _rendered(payload, [ReturnCalls(_reply(body), {"c1": "bad args", "c2": "not run"})])

    assert rendered["input"][1:] == [
        *body["output"],
        {"type": "function_call_output", "call_id": "c1", "output": "bad args"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "not run"},
    ]


def test_on_a_chained_request_a_nudge_chains_to_the_rejected_response_and_sends_only_what_is_new():
    rejected = response(reasoning(), function_call("f", "{}", "c1"))
    payload = {
        "input": [{"type": "function_call_output", "call_id": "c0", "output": "ok"}],
        "previous_response_id": "resp_old",
    }

    rendered = _rendered(payload, [ReturnCalls(_reply(rejected), {"c1": "repeated"}), Note("Stop repeating.")])

    assert rendered["previous_response_id"] == rejected["id"]
    assert rendered["input"] == [
        {"type": "function_call_output", "call_id": "c1", "output": "repeated"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Stop repeating."}]},
    ]


def test_on_a_conversation_a_nudge_sends_only_what_is_new_and_keeps_the_conversation():
    rejected = response(message(""))
    payload = {"input": "Go.", "conversation": "conv_1"}

    rendered = _rendered(payload, [Echo(_reply(rejected)), Note("Say something.")])

    assert rendered["conversation"] == "conv_1"
    assert "previous_response_id" not in rendered
    assert rendered["input"] == [NOTE]


def test_a_request_guard_note_on_a_chained_request_is_appended_to_its_input():
    payload = {"input": [{"role": "user", "content": "Go."}], "previous_response_id": "resp_old"}

    rendered = _rendered(payload, [Note("Say something.")])

    assert rendered["previous_response_id"] == "resp_old"
    assert rendered["input"] == [{"role": "user", "content": "Go."}, NOTE]


def test_the_summary_request_forbids_tools_drops_the_format_and_does_not_stream():
    payload = {
        "input": "Go.",
        "tools": [{"type": "function", "name": "f"}],
        "text": {"format": {"type": "json_schema", "schema": {}}, "verbosity": "low"},
        "stream": True,
        "background": True,
        "max_output_tokens": 5000,
    }

    rendered = json.loads(RESPONSES.codec.render_summary_request(payload, [], "Summarize.", 800, False))

    assert rendered["tool_choice"] == "none"
    assert rendered["tools"] == payload["tools"]
    assert rendered["text"] == {"verbosity": "low"}
    assert "stream" not in rendered
    assert "background" not in rendered
    assert rendered["max_output_tokens"] == 800
    assert rendered["input"][-1]["content"][0]["text"] == "Summarize."


def test_the_summary_cap_is_added_only_when_forced():
    uncapped = json.loads(RESPONSES.codec.render_summary_request({"input": "x"}, [], "S.", 800, False))
    capped = json.loads(RESPONSES.codec.render_summary_request({"input": "x"}, [], "S.", 800, True))

    assert "max_output_tokens" not in uncapped
    assert capped["max_output_tokens"] == 800


def test_an_ending_is_a_complete_response_with_proxy_ids():
    ending = RESPONSES.codec.ending("Found X.", model="m")

    reply = _reply(ending)
    assert reply.content == "Found X."
    assert not reply.tool_calls
    assert is_proxy_id(ending["id"])
    assert ending["id"].startswith("resp_lw")
    assert ending["output"][0]["id"].startswith("msg_lw")
    assert ending["status"] == "completed"


def test_an_ending_for_a_structured_request_is_a_refusal_unless_text_already_streamed():
    payload = {"text": {"format": {"type": "json_schema", "schema": {}}}}
    ending = RESPONSES.codec.ending("Stopped: Y missing.", model="m")

    refused = RESPONSES.codec.shaped(payload, ending, text_started=False)

    assert refused["output"][0]["content"] == [{"type": "refusal", "refusal": "Stopped: Y missing."}]
    assert _reply(refused).refusal == "Stopped: Y missing."
    assert RESPONSES.codec.shaped(payload, ending, text_started=True) is ending
    assert RESPONSES.codec.shaped({}, ending, text_started=False) is ending


def test_notes_are_appended_to_the_outputs_of_the_calls_they_concern():
    payload = {
        "input": [
            {"type": "function_call_output", "call_id": "c1", "output": "result"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "r2"}]},
            {"type": "function_call_output", "call_id": "c3", "output": "untouched"},
        ]
    }

    amended = RESPONSES.codec.amended(payload, {"c1": "Failing again.", "c2": "Note."}, [])

    assert amended["input"][0]["output"] == "result\n\n[LoopWarden] Failing again."
    assert amended["input"][1]["output"][-1] == {"type": "input_text", "text": "[LoopWarden] Note."}
    assert amended["input"][2] is payload["input"][2]


def test_dropping_tools_removes_them_and_a_tool_choice_naming_one():
    payload = {
        "tools": [{"type": "function", "name": "rm"}, {"type": "function", "name": "ls"}],
        "tool_choice": {"type": "function", "name": "rm"},
    }

    amended = RESPONSES.codec.amended(payload, {}, ["rm"])

    assert amended["tools"] == [{"type": "function", "name": "ls"}]
    assert "tool_choice" not in amended


def test_an_offered_tool_is_flat():
    payload = RESPONSES.codec.with_tool({"tools": []}, Tool("goal_done", {"type": "object"}, description="d"))

    assert payload["tools"] == [
        {"type": "function", "name": "goal_done", "description": "d", "parameters": {"type": "object"}}
    ]


def test_errors_keep_openais_shape():
    body = json.loads(RESPONSES.codec.error_body(InvalidRequest("Bad.", param="input")))

    assert body == {"error": {"message": "Bad.", "type": "invalid_request_error", "param": "input", "code": None}}


def test_the_goal_tools_calls_are_taken_out_of_a_response():
    body = response(message("x"), function_call("goal_done", "{}", "g"), function_call("ls", "{}", "c"))

    kept = RESPONSES.codec.without_calls(body, "goal_done")

    assert [item.get("name") for item in kept["output"]] == [None, "ls"]


def test_a_session_hint_comes_from_codex_headers_then_the_conversation_never_the_prompt_cache_key():
    headers = {b"session_id": "s-1", b"conversation_id": "c-1"}

    assert RESPONSES.codec.session_hint({"prompt_cache_key": "k"}, headers.get) == "s-1"
    assert RESPONSES.codec.session_hint(
        {"prompt_cache_key": "k", "client_metadata": {"session_id": "codex-1"}}, {}.get
    ) == ("codex-1")
    assert RESPONSES.codec.session_hint({"prompt_cache_key": "k"}, {}.get) is None
    assert RESPONSES.codec.session_hint({"conversation": {"id": "conv_9"}}, {}.get) == "conv_9"
    assert RESPONSES.codec.session_hint({"conversation": "conv_8"}, {}.get) == "conv_8"
    assert RESPONSES.codec.session_hint({}, {}.get) is None


def test_the_judge_request_is_a_responses_call_that_is_not_stored():
    body = json.loads(RESPONSES.judge.request("sys", "usr", model="m", max_tokens=50, schema={"type": "object"}))

    assert body["instructions"] == "sys"
    assert body["input"] == [{"role": "user", "content": "usr"}]
    assert body["store"] is False
    assert body["text"]["format"]["schema"] == {"type": "object"}
    assert _reply(RESPONSES.codec.ending("verdict", model="m")).content == "verdict"


def test_a_neutral_reply_renders_as_a_response_under_proxy_ids_and_reads_back_the_same():
    from proxy.exchange import Reply, ToolCall, Usage

    reply = Reply(
        "Checking.", "Think first.", (ToolCall("c1", "search", '{"q": "x"}'),), "tool_calls", Usage(5, 3), "m"
    )

    body = RESPONSES.codec.render_reply(reply)

    assert is_proxy_id(body["id"])
    assert all(is_proxy_id(item["id"]) for item in body["output"])
    assert [item["type"] for item in body["output"]] == ["reasoning", "message", "function_call"]
    read = _reply(body)
    assert (read.content, read.reasoning, read.tool_calls, read.usage) == (
        reply.content,
        reply.reasoning,
        reply.tool_calls,
        reply.usage,
    )


def test_a_cut_short_reply_renders_as_an_incomplete_response():
    from proxy.exchange import Reply, Usage

    body = RESPONSES.codec.render_reply(Reply("Part", None, (), "length", Usage()))

    assert body["status"] == "incomplete"
    assert _reply(body).cut_short


def test_a_reply_and_the_history_that_resends_it_name_the_same_run():
    from proxy.session.identity import turn_digest
    from proxy.wire.responses.parse import parse_conversation

    body = response(message("Part one, "), message("part two.", phase="final_answer"))
    reply = _reply(body)
    resent = parse_conversation({"input": [{"role": "user", "content": "Go."}, *body["output"]]}).messages[1]

    assert turn_digest(resent.text, resent.tool_calls) == turn_digest(reply.content, reply.tool_calls)
