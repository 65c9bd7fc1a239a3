"""Writing Gemini requests and replies: the proxy's turns, notes, dropped functions, endings."""

from __future__ import annotations

import json

from proxy.exchange import Echo, Note, Reply, ReturnCalls, ToolCall, Usage
from proxy.wire.gemini.parse import parse_reply
from proxy.wire.gemini.render import (
    amended,
    as_refusal,
    completion,
    render_request,
    set_apart,
    summary_overrides,
    without_calls,
)

SIGNED = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [{"functionCall": {"name": "f", "args": {"x": 1}}, "thoughtSignature": "sig-1"}],
            },
            "finishReason": "STOP",
        }
    ]
}
REQUEST = {
    "contents": [{"role": "user", "parts": [{"text": "Go."}]}],
    "tools": [{"functionDeclarations": [{"name": "f"}, {"name": "g"}]}],
}


def _signed_reply() -> Reply:
    reply = parse_reply(json.dumps(SIGNED).encode())
    assert reply is not None
    return reply


def test_a_returned_call_goes_back_with_its_thought_signature_and_a_response():
    reply = _signed_reply()

    contents = json.loads(render_request(REQUEST, (ReturnCalls(reply, {reply.tool_calls[0].id: "not run"}),)))[
        "contents"
    ]

    assert contents[1] == SIGNED["candidates"][0]["content"]
    assert contents[2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "f", "response": {"output": "not run"}}}],
    }


def test_a_call_with_an_id_is_answered_by_that_id():
    reply = Reply(None, None, (ToolCall("fc-1", "f", "{}"),), "tool_calls", Usage())

    contents = json.loads(render_request(REQUEST, (ReturnCalls(reply, {"fc-1": "no"}),)))["contents"]

    assert contents[1]["parts"] == [{"functionCall": {"name": "f", "args": {}, "id": "fc-1"}}]
    assert contents[2]["parts"][0]["functionResponse"]["id"] == "fc-1"


def test_a_note_and_an_echo_are_user_and_model_turns():
    reply = Reply("Done.", None, (), "stop", Usage())

    contents = json.loads(render_request(REQUEST, (Echo(reply), Note("Check again."))))["contents"]

    assert contents[1:] == [
        {"role": "model", "parts": [{"text": "Done."}]},
        {"role": "user", "parts": [{"text": "Check again."}]},
    ]


def test_a_dropped_function_is_no_longer_declared_nor_allowed():
    payload = {
        **REQUEST,
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f", "g"]}},
    }

    result = amended(payload, {}, ("g",))

    assert result["tools"] == [{"functionDeclarations": [{"name": "f"}]}]
    assert result["toolConfig"]["functionCallingConfig"]["allowedFunctionNames"] == ["f"]


def test_dropping_every_function_drops_the_tool_config():
    result = amended({**REQUEST, "toolConfig": {}}, {}, ("f", "g"))

    assert "tools" not in result
    assert "toolConfig" not in result


def test_a_response_without_text_gets_its_note_apart():
    payload = {
        "contents": [
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}, "id": "c1"}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "id": "c1", "response": {"n": 3}}}]},
        ]
    }

    result = amended(payload, {"c1": "twice"}, ())

    assert result["contents"][1]["parts"][0]["functionResponse"]["response"] == {
        "n": 3,
        "loopwarden": "[LoopWarden] twice",
    }
    assert payload["contents"][1]["parts"][0]["functionResponse"]["response"] == {"n": 3}


def test_the_summary_call_forbids_functions_drops_the_schema_and_caps_the_output():
    payload = {**REQUEST, "generationConfig": {"responseJsonSchema": {}, "maxOutputTokens": 900, "temperature": 0}}

    overrides = summary_overrides(payload, 300, False)

    assert overrides == {
        "toolConfig": {"functionCallingConfig": {"mode": "NONE"}},
        "tool_config": None,
        "generationConfig": {"maxOutputTokens": 300, "temperature": 0},
        "generation_config": None,
    }


def test_snake_case_fields_are_read_and_not_sent_twice():
    payload = {**REQUEST, "generation_config": {"max_output_tokens": 900, "response_json_schema": {}}}

    overrides = summary_overrides(payload, 300, False)

    assert overrides["generationConfig"] == {"maxOutputTokens": 300}
    assert overrides["generation_config"] is None


def test_an_ending_is_a_stopped_text_candidate():
    body = completion("The run ended.", model="gemini-x", usage=Usage(3, 4))

    assert body["candidates"][0]["content"]["parts"] == [{"text": "The run ended."}]
    assert body["candidates"][0]["finishReason"] == "STOP"
    assert body["usageMetadata"] == {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7}


def test_a_refusal_ends_as_other_with_its_text_also_the_finish_message():
    body = as_refusal(completion("Stopped.", model=None))

    assert body["candidates"][0]["content"]["parts"] == [{"text": "Stopped."}]
    assert (body["candidates"][0]["finishReason"], body["candidates"][0]["finishMessage"]) == ("OTHER", "Stopped.")
    assert (parse_reply(json.dumps(body).encode()).refusal, parse_reply(json.dumps(body).encode()).content) == (
        "Stopped.",
        None,
    )


def test_a_goal_call_is_taken_out_of_a_reply():
    body = without_calls(SIGNED, "f")

    assert body["candidates"][0]["content"]["parts"] == [{"text": ""}]


def test_an_ending_after_streamed_text_is_set_apart():
    body = set_apart(completion("More.", model=None))

    assert body["candidates"][0]["content"]["parts"] == [{"text": "\n\nMore."}]
