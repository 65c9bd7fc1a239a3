"""Reading Gemini requests and replies: parts, function calls and responses, schemas, usage."""

from __future__ import annotations

import json

from proxy.exchange import Usage
from proxy.wire.gemini.parse import (
    declared_schemas,
    json_schema,
    parse_conversation,
    parse_reply,
    parse_usage,
    requested_schema,
    wants_structured_output,
)

CALLED = {
    "systemInstruction": {"parts": [{"text": "Be brief."}]},
    "contents": [
        {"role": "user", "parts": [{"text": "Weather?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Checking.", "thought": True},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "s1"},
            ],
        },
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "sun"}}}]},
    ],
}


def test_the_conversation_reads_system_user_model_and_function_response_turns():
    messages = parse_conversation(CALLED).messages

    assert [(m.role, m.text) for m in messages] == [
        ("system", "Be brief."),
        ("user", "Weather?"),
        ("assistant", ""),
        ("tool", "sun"),
    ]
    assert messages[2].reasoning == "Checking."


def test_a_function_response_without_an_id_answers_the_call_of_its_name():
    messages = parse_conversation(CALLED).messages

    call = messages[2].tool_calls[0]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert messages[3].call_id == call.id


def test_ids_the_calls_carry_are_kept():
    payload = json.loads(json.dumps(CALLED))
    payload["contents"][1]["parts"][1]["functionCall"]["id"] = "fc-7"
    payload["contents"][2]["parts"][0]["functionResponse"]["id"] = "fc-7"

    messages = parse_conversation(payload).messages

    assert (messages[2].tool_calls[0].id, messages[3].call_id) == ("fc-7", "fc-7")


def test_both_parameter_forms_are_declared_as_json_schema():
    payload = {
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "a", "parameters": {"type": "OBJECT", "properties": {"q": {"type": "STRING"}}}},
                    {"name": "b", "parametersJsonSchema": {"type": "object"}},
                ]
            }
        ]
    }

    declared = declared_schemas(payload)

    assert declared == [
        (
            "tools[0].functionDeclarations[0].parameters",
            "a",
            {"type": "object", "properties": {"q": {"type": "string"}}},
        ),
        ("tools[0].functionDeclarations[1].parametersJsonSchema", "b", {"type": "object"}),
    ]


def test_a_nullable_openapi_type_becomes_a_json_schema_union():
    assert json_schema({"type": "STRING", "nullable": True}) == {"type": ["string", "null"]}


def test_the_output_schema_comes_from_either_response_schema_field():
    assert requested_schema({"generationConfig": {"responseJsonSchema": {"type": "object"}}}) == {"type": "object"}
    assert requested_schema({"generationConfig": {"responseSchema": {"type": "ARRAY"}}}) == {"type": "array"}
    assert wants_structured_output({"generationConfig": {"responseMimeType": "application/json"}})


def test_the_forced_function_and_the_output_cap_are_read():
    payload = {
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["answer"]}},
        "generationConfig": {"maxOutputTokens": 64},
    }

    conversation = parse_conversation(payload)

    assert (conversation.forced_tool, conversation.output_cap) == ("answer", ("maxOutputTokens", 64))


def test_thought_and_tool_use_prompt_tokens_count_where_they_are_billed():
    usage = parse_usage(
        {
            "promptTokenCount": 100,
            "toolUsePromptTokenCount": 5,
            "candidatesTokenCount": 20,
            "thoughtsTokenCount": 30,
            "cachedContentTokenCount": 40,
        }
    )

    assert usage == Usage(prompt_tokens=105, completion_tokens=50, cached_tokens=40)


def test_a_reply_reads_text_thoughts_calls_and_why_it_stopped():
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "Hmm.", "thought": True},
                        {"text": "Calling."},
                        {"functionCall": {"name": "f", "args": {}}},
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "modelVersion": "gemini-2.5-flash",
    }

    reply = parse_reply(json.dumps(body).encode())

    assert reply is not None
    assert (reply.content, reply.reasoning, reply.finish_reason, reply.model) == (
        "Calling.",
        "Hmm.",
        "tool_calls",
        "gemini-2.5-flash",
    )
    assert [c.name for c in reply.tool_calls] == ["f"]


def test_max_tokens_cuts_a_reply_short():
    body = {"candidates": [{"content": {"parts": [{"text": "Half"}]}, "finishReason": "MAX_TOKENS"}]}

    reply = parse_reply(json.dumps(body).encode())

    assert reply is not None
    assert reply.cut_short


def test_a_blocked_prompt_is_an_answer_cut_short():
    reply = parse_reply(b'{"promptFeedback": {"blockReason": "SAFETY"}}')

    assert reply is not None
    assert reply.finish_reason == "content_filter"


def test_a_body_of_another_shape_is_no_reply():
    assert parse_reply(b'{"choices": []}') is None
    assert parse_reply(b"not json") is None


def test_a_models_own_other_stop_with_text_of_its_own_is_text():
    body = {"candidates": [{"content": {"parts": [{"text": "Half"}]}, "finishReason": "OTHER", "finishMessage": "x"}]}

    assert (parse_reply(json.dumps(body).encode()).content, parse_reply(json.dumps(body).encode()).refusal) == (
        "Half",
        None,
    )
