"""Writing chat completions: request bodies rewritten (notes, hidden tools, caps, turns), replies trimmed
of the goal tool's calls, endings as refusals or set apart, completions replayed as streams."""

from __future__ import annotations

import json

import pytest

from proxy.exchange import Note, Usage
from proxy.wire.chat.render import (
    amended,
    as_refusal,
    capped_output,
    completion,
    completion_as_sse,
    render_request,
    set_apart,
    with_usage_requested,
    without_calls,
)


def test_usage_is_requested_without_touching_the_rest_of_the_body():
    body = b'{"model":"m","messages":[{"role":"user","content":"caf\\u00e9 }"}],"stream":true}  \n'

    spliced = json.loads(with_usage_requested(body))

    assert spliced == {**json.loads(body), "stream_options": {"include_usage": True}}


def test_an_ending_as_refusal_moves_the_text_and_keeps_everything_else():
    body = completion("Found X. Missing Y. Next: Z.", model="m")

    refused = as_refusal(body)

    assert refused["choices"][0]["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": "Found X. Missing Y. Next: Z.",
    }
    assert {k: v for k, v in refused.items() if k != "choices"} == {k: v for k, v in body.items() if k != "choices"}
    assert body["choices"][0]["message"]["content"] == "Found X. Missing Y. Next: Z."  # the original is untouched


def test_a_refusal_streams_as_refusal_deltas_with_no_content():
    sse = completion_as_sse(as_refusal(completion("No object: Y is missing.", model="m")))

    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in sse.split(b"\n\n") if line.startswith(b"data: {")]

    assert deltas[0] == {"role": "assistant", "content": None, "refusal": None}
    assert "".join(d.get("refusal") or "" for d in deltas) == "No object: Y is missing."
    assert not any(d.get("content") for d in deltas)
    assert sse.endswith(b"data: [DONE]\n\n")


def test_as_refusal_turns_every_choice_and_leaves_odd_shapes_alone():
    two = {"choices": [{"message": {"content": "a"}}, {"message": {"content": "b"}}]}

    assert [c["message"]["refusal"] for c in as_refusal(two)["choices"]] == ["a", "b"]
    assert as_refusal({"choices": "x"}) == {"choices": "x"}
    assert as_refusal({"choices": [{"message": {"content": None}}]}) == {"choices": [{"message": {"content": None}}]}


def test_amended_appends_a_note_to_the_tool_result_it_names_and_leaves_the_rest():
    payload = {
        "model": "m",
        "messages": [
            {"role": "tool", "tool_call_id": "c1", "content": "found"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "parts"}]},
            {"role": "tool", "tool_call_id": "c3", "content": "other"},
        ],
    }

    sent = amended(payload, {"c1": "Called 3 times.", "c2": "Again."})

    assert [m["content"] for m in sent["messages"]] == [
        "found\n\n[LoopWarden] Called 3 times.",
        [{"type": "text", "text": "parts"}, {"type": "text", "text": "[LoopWarden] Again."}],
        "other",
    ]
    assert payload["messages"][0]["content"] == "found"  # the client's own transcript is untouched


TOOLS = [
    {"type": "function", "function": {"name": "search"}},
    {"type": "function", "function": {"name": "rm"}},
]

DROPPED = [
    pytest.param(
        {"tools": TOOLS, "tool_choice": "auto"},
        ("rm",),
        {"tools": TOOLS[:1], "tool_choice": "auto"},
        id="a-hidden-tool-goes",
    ),
    pytest.param(
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "rm"}}},
        ("rm",),
        {"tools": TOOLS[:1]},
        id="a-choice-forcing-it-goes-too",
    ),
    pytest.param(
        {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
        ("rm", "search"),
        {},
        id="no-tool-left-no-tool-fields",
    ),
]


@pytest.mark.parametrize(("payload", "drop", "sent"), DROPPED)
def test_amended_removes_hidden_tools_and_what_only_they_need(payload, drop, sent):
    assert amended(payload, {}, drop) == sent


CAPPED = [
    pytest.param({}, None, False, {}, id="no-cap"),
    pytest.param({"max_tokens": 4096}, 1024, False, {"max_tokens": 1024}, id="the-clients-field-lowered"),
    pytest.param({"max_completion_tokens": 500}, 1024, False, {"max_completion_tokens": 500}, id="a-lower-kept"),
    pytest.param({}, 1024, False, {}, id="no-field-of-its-own-uncapped"),
    pytest.param({}, 1024, True, {"max_tokens": 1024}, id="forced"),
]


@pytest.mark.parametrize(("payload", "cap", "force", "fields"), CAPPED)
def test_the_summary_is_capped_in_the_field_the_client_uses(payload, cap, force, fields):
    assert capped_output(payload, cap, force=force) == fields


def test_render_request_appends_turns_and_applies_overrides_none_removing():
    payload = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [], "temperature": 1}

    sent = json.loads(render_request(payload, (Note("Stop."),), tools=None, temperature=0))

    assert sent == {
        "model": "m",
        "messages": [*payload["messages"], {"role": "user", "content": "Stop."}],
        "temperature": 0,
    }


def test_without_calls_takes_out_one_tools_calls_and_a_finish_left_without_calls_stops():
    body = {
        "choices": [
            {
                "message": {"role": "assistant", "content": "ok", "tool_calls": [_call("goal")]},
                "finish_reason": "tool_calls",
            }
        ]
    }

    kept = without_calls(body, "goal")["choices"][0]

    assert (kept["message"], kept["finish_reason"]) == ({"role": "assistant", "content": "ok"}, "stop")


def test_without_calls_keeps_the_other_tools_calls():
    body = {"choices": [{"message": {"tool_calls": [_call("goal"), _call("search")]}, "finish_reason": "tool_calls"}]}

    kept = without_calls(body, "goal")["choices"][0]

    assert (kept["message"]["tool_calls"], kept["finish_reason"]) == ([_call("search")], "tool_calls")


def _call(name: str) -> dict:
    return {"id": f"c-{name}", "type": "function", "function": {"name": name, "arguments": "{}"}}


@pytest.mark.parametrize(("content", "shown"), [("Done.", "\n\nDone."), ("", ""), (None, None)])
def test_an_ending_after_streamed_text_is_set_apart_by_a_blank_line(content, shown):
    body = {"choices": [{"message": {"content": content}}]}

    assert set_apart(body)["choices"][0]["message"]["content"] == shown


def test_a_completion_streams_reasoning_text_and_calls_then_the_finish_and_usage_when_asked():
    body = completion("Hi.", model="m", usage=Usage(3, 2))
    body["choices"][0]["message"] |= {"reasoning_content": "Think.", "tool_calls": [_call("search")]}

    events = [
        json.loads(line[6:]) for line in completion_as_sse(body, include_usage=True).split(b"\n\n") if b"{" in line
    ]

    deltas = [e["choices"][0]["delta"] if e["choices"] else "usage" for e in events]
    assert deltas[:3] == [{"role": "assistant", "content": ""}, {"reasoning_content": "Think."}, {"content": "Hi."}]
    assert deltas[3]["tool_calls"][0]["function"] == {"name": "search", "arguments": "{}"}
    assert (deltas[4], events[4]["choices"][0]["finish_reason"]) == ({}, "stop")
    assert events[5]["usage"]["total_tokens"] == 5
