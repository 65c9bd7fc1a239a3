"""Streamed Anthropic Messages: the assembler, the event channels, splitting and framing events."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from proxy.exchange import Channel, Usage
from proxy.wire.messages.format import MESSAGES
from proxy.wire.messages.parse import parse_reply, reply_from_message
from proxy.wire.messages.stream import MessagesAssembler, message_events
from tests.support.fake_messages import (
    check_stream,
    events_of,
    message_body,
    said,
    streamed_message,
    text,
    thinking,
    tool_use,
)

PAYLOAD: dict[str, Any] = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


def assembled(events: list[dict[str, Any]]) -> MessagesAssembler:
    assembler = MessagesAssembler()
    for event in events:
        assembler.add(event)
    return assembler


def test_the_assembled_reply_equals_the_same_message_read_whole():
    blocks = (thinking("Plan."), text("Reading."), tool_use("read", {"path": "a", "n": [1, 2]}))
    body = message_body(said(*blocks), PAYLOAD)

    streamed = assembled(events_of(*blocks)).reply()
    whole = parse_reply(json.dumps(body).encode())

    assert whole is not None
    assert dataclasses.replace(streamed, tool_calls=()) == dataclasses.replace(whole, tool_calls=())
    assert [c.parsed_arguments() for c in streamed.tool_calls] == [c.parsed_arguments() for c in whole.tool_calls]
    assert streamed.source == whole.source


def test_the_completion_is_the_message_a_json_call_returns():
    blocks = (thinking("Plan."), text("Done."))
    body = message_body(said(*blocks), PAYLOAD)

    completion = assembled(events_of(*blocks)).completion()

    assert completion["content"] == body["content"]
    assert (completion["stop_reason"], completion["usage"]) == ("end_turn", body["usage"])


def test_message_stop_completes_the_stream_and_nothing_before_it_does():
    assembler = MessagesAssembler()
    events = events_of(text("Hi"))

    flags = [assembler.add(event) for event in events[:-1]]

    assert not assembler.complete
    assert assembler.add(events[-1]) == Channel.FINISH
    assert assembler.complete
    assert flags[-1] == Channel.FINISH  # message_delta waits for the verdict too


@pytest.mark.parametrize(
    ("block", "channel"),
    [
        (text("Hi"), Channel.TEXT),
        (thinking("Hmm"), Channel.REASONING),
        (tool_use("read", {"path": "a"}), Channel.TOOL_CALLS),
        ({"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"q": "x"}}, Channel.TEXT),
    ],
)
def test_every_event_of_a_block_carries_the_blocks_channel(block: dict[str, Any], channel: int):
    assembler = MessagesAssembler()
    events = events_of(block)

    flags = [assembler.add(e) for e in events if e["type"].startswith("content_block")]

    assert set(flags) == {channel}


def test_pings_and_unknown_events_carry_nothing():
    assembler = MessagesAssembler()

    assert assembler.add({"type": "ping"}) == Channel.NONE
    assert assembler.add({"type": "content_block_future", "index": 0}) == Channel.NONE


def test_partial_json_is_kept_as_written_for_the_argument_checks():
    assembler = MessagesAssembler()
    assembler.add({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {"input_tokens": 3}}})
    assembler.add({"type": "content_block_start", "index": 0, "content_block": tool_use("run", {})})
    for part in ['{"cmd": "rm -rf /",', ' "cmd": "ls"}']:
        assembler.add(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": part}}
        )

    [call] = assembler.reply().tool_calls

    assert call.parsed_arguments()[1] == "arguments give the key 'cmd' more than once"


def test_usage_from_message_start_and_message_delta_is_merged():
    assembler = MessagesAssembler()
    assembler.add(
        {
            "type": "message_start",
            "message": {"usage": {"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 1}},
        }
    )
    assembler.add({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}})

    assert assembler.usage is not None
    assert (assembler.usage.prompt_tokens, assembler.usage.cached_tokens, assembler.usage.completion_tokens) == (
        105,
        100,
        42,
    )


def test_the_partial_reply_tells_text_from_reasoning_and_calls():
    assembler = MessagesAssembler()
    events = events_of(thinking("Hmm"), text("Hi there"), tool_use("read", {}))
    for event in events[:8]:
        assembler.add(event)

    assert assembler.has_reasoning
    assert not assembler.has_tool_calls
    for event in events[8:]:
        assembler.add(event)
    assert (assembler.has_text, assembler.has_tool_calls, assembler.content) == (True, True, "Hi there")


def delta(index: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": body}


def test_text_deltas_grow_the_answer_and_every_count_of_it():
    assembler = MessagesAssembler()
    assembler.add({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})

    flags = [assembler.add(delta(0, {"type": "text_delta", "text": part})) for part in ("  ", "Hi", " there")]

    assert flags == [Channel.TEXT] * 3
    assert (assembler.content, assembler.text_length, assembler.produced_chars) == ("  Hi there", 10, 10)
    assert assembler.has_text
    assert assembler.completion()["content"] == [{"type": "text", "text": "  Hi there"}]


def test_whitespace_text_alone_is_not_yet_an_answer():
    assembler = MessagesAssembler()
    assembler.add({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})

    assembler.add(delta(0, {"type": "text_delta", "text": " \n"}))
    assembler.add(delta(0, {"type": "text_delta", "text": None}))

    assert (assembler.has_text, assembler.content, assembler.text_length) == (False, " \n", 2)


def test_a_text_delta_to_a_block_that_is_not_text_is_counted_but_not_the_answer():
    assembler = MessagesAssembler()
    block = {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}
    assembler.add({"type": "content_block_start", "index": 0, "content_block": block})

    flag = assembler.add(delta(0, {"type": "text_delta", "text": "aside"}))

    assert flag == Channel.TEXT
    assert (assembler.content, assembler.has_text, assembler.produced_chars) == ("", False, 5)


def test_usage_is_none_until_the_stream_reports_it_and_follows_each_report():
    assembler = MessagesAssembler()
    assembler.add({"type": "message_start", "message": {"id": "m", "model": "x"}})

    assert assembler.usage is None
    assembler.add({"type": "message_delta", "delta": {}, "usage": {"input_tokens": 4, "output_tokens": 2}})
    assert assembler.usage is not None
    assert assembler.usage.completion_tokens == 2
    assembler.add({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 9}})
    assert assembler.usage is not None
    assert (assembler.usage.prompt_tokens, assembler.usage.completion_tokens) == (4, 9)


def test_a_count_reported_as_null_leaves_the_one_reported_before():
    assembler = MessagesAssembler()
    assembler.add({"type": "message_start", "message": {"usage": {"input_tokens": 6, "output_tokens": 1}}})

    assembler.add({"type": "message_delta", "delta": {}, "usage": {"input_tokens": None, "output_tokens": 8}})

    assert assembler.usage == Usage(6, 8)
    assert assembler.completion()["usage"] == {"input_tokens": 6, "output_tokens": 8}


def test_message_start_gives_the_message_all_but_its_content():
    assembler = MessagesAssembler()
    start = {"id": "msg_9", "model": "claude", "content": [{"type": "text", "text": "x"}], "container": {"id": "c"}}

    assembler.add({"type": "message_start", "message": start})

    completion = assembler.completion()
    assert (completion["id"], completion["model"], completion["container"]) == ("msg_9", "claude", {"id": "c"})
    assert (completion["content"], assembler.model) == ([], "claude")
    assert start["content"] == [{"type": "text", "text": "x"}]  # the event itself is left as it came


def test_an_empty_usage_object_is_reported_usage_of_nothing():
    assembler = MessagesAssembler()

    assembler.add({"type": "message_delta", "delta": {}, "usage": {}})

    assert assembler.usage == Usage()


def test_usage_set_on_the_assembler_is_what_it_reads_until_the_next_report():
    assembler = MessagesAssembler()
    assembler.add({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 3}})

    assembler.usage = Usage(1, 2)

    assert assembler.usage == Usage(1, 2)
    assembler.add({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 5}})
    assert assembler.usage == Usage(0, 5)


def test_the_reply_carries_the_calls_as_streamed_and_the_merged_usage():
    events = events_of(text("Reading."), tool_use("read", {"path": "a"}))

    reply = assembled(events).reply()

    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [("read", {"path": "a"})]
    assert reply.usage == assembled(events).usage
    assert reply.content == "Reading."


def test_blocks_opened_out_of_order_are_read_by_index():
    assembler = MessagesAssembler()
    for index, word in ((1, "second"), (0, "first"), (2, "third")):
        assembler.add({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
        assembler.add(delta(index, {"type": "text_delta", "text": word}))

    reply = assembler.reply()

    assert [b["text"] for b in assembler.completion()["content"]] == ["first", "second", "third"]
    assert [b["text"] for b in reply.source] == ["first", "second", "third"]


def test_a_block_opened_again_at_its_index_keeps_the_order_by_index():
    assembler = MessagesAssembler()
    for index, word in ((0, "a"), (1, "b"), (0, "c")):
        assembler.add({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": word}})

    assert [b["text"] for b in assembler.reply().source] == ["c", "b"]


@pytest.mark.parametrize(
    "events",
    [
        events_of(text("Hi"), tool_use("read", {"path": "a"})),
        events_of(text("No."), stop_reason="refusal"),
        [
            {"type": "message_start", "message": {"id": "m1", "model": 7, "usage": {"input_tokens": 2}}},
            {"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": {"explanation": "Why."}}},
        ],
        [{"type": "message_delta", "delta": {"stop_reason": "pause_turn", "model": "later", "content": "odd"}}],
        [],
    ],
)
def test_the_reply_reads_what_the_completion_says(events: list[dict[str, Any]]):
    assembler = assembled(events)

    reply = assembler.reply()

    whole = reply_from_message(assembler.completion())
    assert dataclasses.replace(reply, tool_calls=()) == dataclasses.replace(whole, tool_calls=())
    assert reply.source == whole.source
    assert [(c.id, c.name, c.parsed_arguments()) for c in reply.tool_calls] == [
        (c.id, c.name, c.parsed_arguments()) for c in whole.tool_calls
    ]


def test_a_citations_delta_is_added_to_its_text_block():
    assembler = MessagesAssembler()
    assembler.add(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "", "citations": None}}
    )
    assembler.add({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Cited."}})
    citation = {"type": "char_location", "cited_text": "x"}
    assembler.add(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": citation}}
    )

    assert assembler.completion()["content"] == [{"type": "text", "text": "Cited.", "citations": [citation]}]


@pytest.mark.parametrize(
    ("event", "released", "going"),
    [
        ({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}, Channel.TEXT, True),
        (
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}},
            Channel.REASONING,
            False,
        ),
        ({"type": "content_block_start", "index": 1, "content_block": tool_use("a", {})}, Channel.TOOL_CALLS, True),
        ({"type": "content_block_stop", "index": 1}, Channel.ALL, False),
    ],
)
def test_an_event_is_split_whole_one_way_or_the_other(event: dict[str, Any], released: int, going: bool):
    out, kept = MESSAGES.stream.split_event(event, released)

    assert (out, kept) == ((event, None) if going else (None, event))


# -- what the client receives -------------------------------------------------------------


def test_an_ending_streams_as_one_well_formed_message():
    body = MESSAGES.codec.ending("Stopping here.", model="m")

    events = check_stream(MESSAGES.stream.streamed(body, include_usage=True))

    assert streamed_message(events)["content"] == body["content"]
    assert events[0]["message"]["id"].startswith("msg_lw")


def test_a_reply_with_every_block_kind_streams_back_as_it_was():
    body = message_body(said(thinking("Plan."), text("Reading."), tool_use("read", {"path": "a"})), PAYLOAD)

    events = check_stream(MESSAGES.stream.streamed(body, include_usage=True))

    assert streamed_message(events)["content"] == body["content"]


def test_the_error_event_is_named_and_in_anthropics_shape():
    from proxy.errors import UpstreamError

    raw = MESSAGES.stream.error_event(UpstreamError("gone"))

    assert raw.startswith(b"event: error\ndata: ")
    assert json.loads(raw.split(b"data: ", 1)[1]) == {
        "type": "error",
        "error": {"type": "api_error", "message": "gone"},
    }


def test_a_refusals_details_arrive_in_the_streams_message_delta():
    details = {"type": "refusal", "category": None, "explanation": "Stopping."}
    events = list(message_events({"id": "msg_1", "content": [], "stop_reason": "refusal", "stop_details": details}))

    assert "stop_details" not in events[0]["message"]
    assert events[-2]["delta"] == {"stop_reason": "refusal", "stop_sequence": None, "stop_details": details}
